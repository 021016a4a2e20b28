// Command splitgrpc moves the service stubs protoc-gen-go-grpc writes into a package of their
// own, so that a program which needs only the protocol's messages links no gRPC.
// protoc-gen-go-grpc writes its stubs into the package of the message types and has no option to
// do otherwise; this tool takes each stub file it wrote, renames its package clause, imports the
// message package and qualifies every message type the stubs name with it. It changes nothing
// else: the output is the generator's own text, reformatted by go/format.
//
// Usage (protocol/generate.sh runs it):
//
//	splitgrpc -messages DIR -import PATH -name NAME -out DIR -pkg PKG FILE...
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	messages := flag.String("messages", "", "the directory of the message package (the *.pb.go files protoc-gen-go wrote)")
	importPath := flag.String("import", "", "the import path of the message package")
	name := flag.String("name", "", "the package name of the message package, the qualifier the stubs use")
	out := flag.String("out", "", "the directory the stub files are written to")
	pkg := flag.String("pkg", "", "the package name of the stub files")
	flag.Parse()
	if err := run(*messages, *importPath, *name, *out, *pkg, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "splitgrpc:", err)
		os.Exit(1)
	}
}

func run(messages, importPath, name, out, pkg string, files []string) error {
	if messages == "" || importPath == "" || name == "" || out == "" || pkg == "" || len(files) == 0 {
		return errors.New("-messages, -import, -name, -out, -pkg and at least one stub file are required")
	}
	types, err := messageTypes(messages)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		moved, err := move(f, src, types, importPath, name, pkg)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(f)), moved, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// messageTypes is the set of type names declared in the generated message files of dir
// (every *.pb.go that is not a stub file).
func messageTypes(dir string) (map[string]bool, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pb.go"))
	if err != nil {
		return nil, err
	}
	types := map[string]bool{}
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_grpc.pb.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					types[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("no message types in %s: run protoc-gen-go first", dir)
	}
	return types, nil
}

// edit replaces src[at:at+cut] with text.
type edit struct {
	at, cut int
	text    string
}

// move rewrites one stub file: its package clause becomes pkg, the message package is imported
// as name, and each identifier that names a message type is qualified with name.
func move(path string, src []byte, types map[string]bool, importPath, name, pkg string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	edits := []edit{{off(f.Name.Pos()), len(f.Name.Name), pkg}}
	var imports *ast.GenDecl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT && g.Lparen.IsValid() {
			imports = g
			break
		}
	}
	if imports == nil {
		return nil, fmt.Errorf("%s: no parenthesised import block to add %s to", path, importPath)
	}
	edits = append(edits, edit{off(imports.Lparen) + 1, 0, fmt.Sprintf("\n%s %q", name, importPath)})

	// Names the file declares itself are never message types; a clash would make the output
	// ambiguous, so it is an error rather than a guess.
	declared := func(id *ast.Ident) error {
		if types[id.Name] {
			return fmt.Errorf("%s declares %s, which the message package declares too", path, id.Name)
		}
		return nil
	}
	skip := map[*ast.Ident]bool{}
	var clash error
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			skip[n.Sel] = true
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				skip[id] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				skip[id] = true
			}
		case *ast.TypeSpec:
			skip[n.Name] = true
			clash = errors.Join(clash, declared(n.Name))
		case *ast.FuncDecl:
			skip[n.Name] = true
			if n.Recv == nil {
				clash = errors.Join(clash, declared(n.Name))
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				skip[id] = true
				clash = errors.Join(clash, declared(id))
			}
		case *ast.Ident:
			if types[n.Name] && !skip[n] {
				edits = append(edits, edit{off(n.Pos()), 0, name + "."})
			}
		}
		return true
	})
	if clash != nil {
		return nil, clash
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].at < edits[j].at })
	var out bytes.Buffer
	last := 0
	for _, e := range edits {
		out.Write(src[last:e.at])
		out.WriteString(e.text)
		last = e.at + e.cut
	}
	out.Write(src[last:])
	formatted, err := format.Source(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: the rewritten stubs do not parse: %w", path, err)
	}
	return formatted, nil
}
