// Package sdk holds the action SDKs for Python, Node.js and Ruby (one file each, standard
// library only, in sdk/python, sdk/node and sdk/ruby with their packaging and tests), embedded
// so that `millrace init` vendors the very file this folder holds: there is no second copy to
// drift.
//
// It is an API, and a small one: [For] gives any tool the SDK files of this module's version,
// to vendor into an action directory as `millrace init` does. It is not under internal/
// because go:embed reads only files at or below the package's folder, and the SDK folders stay
// here, where their users, packaging and tests find them.
package sdk

import _ "embed"

var (
	//go:embed python/millrace/__init__.py
	python []byte
	//go:embed node/millrace.js
	node []byte
	//go:embed ruby/lib/millrace.rb
	ruby []byte
)

// File is one SDK as an action directory vendors it.
type File struct {
	Name string // the file name in the action directory: millrace.py, millrace.js, millrace.rb
	Path string // where it lives in the millrace repository, e.g. sdk/python/millrace/__init__.py
	Data []byte
}

// For returns the SDK of a language (python, node, ruby), or false for a language that has none.
// The bytes are shared: the caller must not change them.
func For(lang string) (File, bool) {
	switch lang {
	case "python":
		return File{"millrace.py", "sdk/python/millrace/__init__.py", python}, true
	case "node":
		return File{"millrace.js", "sdk/node/millrace.js", node}, true
	case "ruby":
		return File{"millrace.rb", "sdk/ruby/lib/millrace.rb", ruby}, true
	}
	return File{}, false
}
