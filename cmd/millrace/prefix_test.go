package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoPackagePrefix: the messages of the tools' packages reach a person after "millrace
// run:" or "millrace test:", so none starts with the package's own name ("local: ",
// "conformance: "), which says nothing to a user.
func TestNoPackagePrefix(t *testing.T) {
	for _, pkg := range []string{"local", "conformance"} {
		files, err := filepath.Glob(filepath.Join("internal", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("the sources of cmd/millrace/internal/%s: %v", pkg, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, pkg+": ") {
					t.Errorf("%s: the message %q starts with the package's name: a user reads it after millrace's own prefix", fset.Position(lit.Pos()), s)
				}
				return true
			})
		}
	}
}
