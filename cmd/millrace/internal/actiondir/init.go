package actiondir

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/sdk"
)

//go:embed all:templates
var templates embed.FS

// modulePath is the Go module of millrace, which Go actions import for the SDK.
const modulePath = "github.com/ankka-flow/millrace"

// EnvSource names a millrace source checkout for `init action --lang go` outside one.
const EnvSource = "MILLRACE_SOURCE"

// Langs are the languages of `millrace init action`, with the program file each writes.
var Langs = []struct{ Name, Title, Program string }{
	{"raw", "Python with the standard library only, the protocol written out by hand", "main.py"},
	{"python", "Python, on the millrace SDK (millrace.py, vendored)", "main.py"},
	{"node", "Node.js, on the millrace SDK (millrace.js, vendored)", "main.js"},
	{"ruby", "Ruby, on the millrace SDK (millrace.rb, vendored)", "main.rb"},
	{"go", "Go, on the millrace SDK (github.com/ankka-flow/millrace/stdio/action)", "main.go"},
	{"bash", "bash with jq", "main.sh"},
}

var nameRE = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// InitOptions tune Init.
type InitOptions struct {
	// Source is the millrace checkout a Go action outside it builds the SDK from ("": the
	// MILLRACE_SOURCE variable, else the checkout holding the current directory).
	Source string
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
	// State is the word of the line's --state, PORT[,ttl=D][,max-bytes=SIZE] ("": the action
	// keeps no state). The inlet is named PORT, the line carries --state with the word as
	// given, and the program and fixtures show the key's state: its visits.
	State string
}

// Init writes a new action directory dir for lang: action.conf, the program, fixtures that it
// passes, a sample input for `millrace run`, and a README. For python, node and ruby it also
// writes the language's SDK file (package sdk: the bytes of sdk/LANG/), so the program runs with
// no install step. The streamlet is named after the
// directory's last element. dir must not exist, or be empty.
//
// A Go action inside the millrace module needs nothing more (`go run .` builds it as part of
// the module). Outside it, Init writes a go.mod that requires millrace and replaces it with
// the local checkout (opts.Source), then runs `go mod tidy` there, so `go run .` works at once.
func Init(ctx context.Context, dir, lang string, opts InitOptions) error {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	name := filepath.Base(filepath.Clean(dir))
	if !nameRE.MatchString(name) {
		return fmt.Errorf("action name %q: a streamlet name is 1 to 63 characters of a-z, 0-9 and -, e.g. score-listing", name)
	}
	var program string
	for _, l := range Langs {
		if l.Name == lang {
			program = l.Program
		}
	}
	if program == "" {
		return fmt.Errorf("unknown language %q: want one of %s", lang, langNames())
	}
	inlet, err := stateInlet(name, opts.State)
	if err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: pick a new name, or remove it", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var goMod []byte
	if lang == "go" {
		goMod, err = goModFor(name, filepath.Dir(abs), opts)
		if err != nil {
			return err
		}
	}
	data := struct{ Name, Lang, LangName, Program, SDK, Inlet, State string }{Name: name, Lang: lang, Program: program, Inlet: inlet, State: opts.State}
	if f, ok := sdk.For(lang); ok {
		data.SDK = f.Name
	}
	for _, l := range Langs {
		if l.Name == lang {
			data.LangName = l.Title
		}
	}
	write := func(root string) error {
		return fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			src, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			t, err := template.New(p).Option("missingkey=error").Parse(string(src))
			if err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			var out bytes.Buffer
			if err := t.Execute(&out, data); err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			rel, _ := strings.CutPrefix(p, root+"/")
			rel = strings.TrimSuffix(rel, ".tmpl") // main.go.tmpl: kept out of the Go build of this module
			target := filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if path.Ext(p) == ".sh" {
				mode = 0o755
			}
			return os.WriteFile(target, out.Bytes(), mode)
		})
	}
	if err := write("templates/common"); err != nil {
		return err
	}
	if err := write("templates/" + lang); err != nil {
		return err
	}
	if f, ok := sdk.For(lang); ok {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	if goMod != nil {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), goMod, 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go mod tidy in %s: %w: %s", dir, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// stateInlet returns the inlet of a new action: "in", or the port of its --state word, which
// is checked as the action line checks it, so that nothing is written for a word the line
// would refuse.
func stateInlet(name, word string) (string, error) {
	if word == "" {
		return "in", nil
	}
	port, _, _ := strings.Cut(word, ",")
	line := []string{name, "--in", port + "=" + name + "-request.v1", "--state", word, "--", "true"}
	if _, err := actionconf.ParseLine(line); err != nil {
		return "", fmt.Errorf("--state %q: %w", word, err)
	}
	return port, nil
}

func langNames() string {
	var names []string
	for _, l := range Langs {
		names = append(names, l.Name)
	}
	return strings.Join(names, ", ")
}

// goModFor returns the go.mod of a Go action whose directory is in parent, or nil when parent
// is inside the millrace module (the action is then a package of it).
func goModFor(name, parent string, opts InitOptions) ([]byte, error) {
	if _, mod := enclosingModule(parent); mod == modulePath {
		return nil, nil
	}
	src := opts.Source
	if src == "" {
		src = opts.Getenv(EnvSource)
	}
	if src == "" {
		if wd, err := os.Getwd(); err == nil {
			if root, mod := enclosingModule(wd); mod == modulePath {
				src = root
			}
		}
	}
	if src == "" {
		return nil, fmt.Errorf("a Go action outside the millrace source needs it for the SDK (%s/stdio/action): name a millrace checkout with --source DIR (or $%s), run init from inside one, or write the action inside it", modulePath, EnvSource)
	}
	src, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	if _, mod := enclosingModule(src); mod != modulePath {
		return nil, fmt.Errorf("%s is not a millrace checkout (no go.mod of %s there)", src, modulePath)
	}
	goVersion := "1.26"
	if data, err := os.ReadFile(filepath.Join(src, "go.mod")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go "); ok {
				goVersion = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Appendf(nil, "module %s\n\ngo %s\n\nrequire %s v0.0.0-00010101000000-000000000000\n\n// The SDK comes from the local millrace checkout.\nreplace %s => %s\n", name, goVersion, modulePath, modulePath, src), nil
}

// enclosingModule returns the directory and module path of the go.mod at or above dir.
func enclosingModule(dir string) (root, module string) {
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			return dir, ""
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", ""
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", ""
		}
		dir = up
	}
}

// ProtocolDoc says where the action protocol's reference is: docs/protocol.md of the millrace
// checkout that getenv's MILLRACE_SOURCE names or that holds the current directory, by its
// path, or by its place in the repository when no checkout is at hand.
func ProtocolDoc(getenv func(string) string) string {
	const rel = "docs/protocol.md"
	roots := []string{getenv(EnvSource)}
	if wd, err := os.Getwd(); err == nil {
		if root, mod := enclosingModule(wd); mod == modulePath {
			roots = append(roots, root)
		}
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(rel))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return rel + " in the millrace repository (" + modulePath + ")"
}
