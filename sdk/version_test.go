package sdk_test

import (
	"os"
	"regexp"
	"testing"
)

// TestOneVersion: every SDK is released at one version, written in five places (each
// ecosystem reads its own): the Python package's pyproject.toml and __version__, the Node.js
// package.json, the Ruby gemspec and Millrace::VERSION. A release changes them together.
func TestOneVersion(t *testing.T) {
	places := []struct{ file, pattern string }{
		{"python/pyproject.toml", `(?m)^version = "([^"]+)"$`},
		{"python/millrace/__init__.py", `(?m)^__version__ = "([^"]+)"$`},
		{"node/package.json", `(?m)^  "version": "([^"]+)",$`},
		{"ruby/millrace.gemspec", `(?m)^\s*s\.version\s*=\s*['"]([^'"]+)['"]`},
		{"ruby/lib/millrace.rb", `(?m)^\s*VERSION = ['"]([^'"]+)['"]`},
	}
	var first, firstFile string
	for _, p := range places {
		data, err := os.ReadFile(p.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(p.pattern).FindSubmatch(data)
		if m == nil {
			t.Errorf("%s: no version (want a match of %s)", p.file, p.pattern)
			continue
		}
		v := string(m[1])
		if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v) {
			t.Errorf("%s: version %q is not MAJOR.MINOR.PATCH", p.file, v)
		}
		if first == "" {
			first, firstFile = v, p.file
		} else if v != first {
			t.Errorf("%s says version %s, %s says %s: the SDKs are released at one version, change them together", p.file, v, firstFile, first)
		}
	}
}
