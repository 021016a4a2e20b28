package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ankka-flow/millrace/bridge/actionconf"
)

// references registers in the embedded registry the files the schema at path refers to, each
// under the subject Confluent's serializers give a reference (a .proto's import path, an Avro
// type's full name), what they refer to first, and returns the schema's references. The files
// are found beside the schema: a .proto's imports by their import path under its directory
// (as protoc -I would), an Avro schema's named types it does not define itself as
// FULLNAME.avsc in its directory. A schema that does not parse or compile here is named with
// the file and the compiler's line.
func (s *seeds) references(format, path, text string) ([]sr.SchemaReference, error) {
	switch format {
	case actionconf.FormatProtobuf:
		return s.protoReferences(path)
	case actionconf.FormatAvro:
		var doc any
		if err := json.Unmarshal([]byte(text), &doc); err != nil {
			return nil, jsonFault(path, text, err)
		}
		return s.avroReferences(filepath.Dir(path), path, doc, map[string]bool{})
	}
	var doc any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, jsonFault(path, text, err)
	}
	return nil, nil
}

// jsonFault names the line of a schema file that is not JSON.
func jsonFault(path, text string, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line := 1 + strings.Count(text[:min(int(syn.Offset), len(text))], "\n")
		return fmt.Errorf("%w: %s:%d: the schema is not JSON: %w; fix the file", errSchema, path, line, err)
	}
	return fmt.Errorf("%w: %s: the schema is not JSON: %w; fix the file", errSchema, path, err)
}

// protoReferences compiles the .proto at path with its imports from its directory, and
// registers each import (but the well-known google/protobuf ones, which come with every
// compiler) under its import path.
func (s *seeds) protoReferences(path string) ([]sr.SchemaReference, error) {
	dir := filepath.Dir(path)
	comp := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{dir}}),
		MaxParallelism: 1,
	}
	files, err := comp.Compile(context.Background(), filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not compile: %w; fix it (its imports are read from %s, by their import path)", errSchema, path, err, dir)
	}
	return s.protoImports(dir, files[0])
}

func (s *seeds) protoImports(dir string, fd protoreflect.FileDescriptor) ([]sr.SchemaReference, error) {
	var refs []sr.SchemaReference
	imports := fd.Imports()
	for i := range imports.Len() {
		imp := imports.Get(i)
		name := imp.Path()
		if strings.HasPrefix(name, "google/protobuf/") {
			continue
		}
		deps, err := s.protoImports(dir, imp.FileDescriptor)
		if err != nil {
			return nil, err
		}
		text, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return nil, fmt.Errorf("%w: the import %s: %w", errSchema, name, err)
		}
		ref, err := s.reference(name, sr.Schema{Schema: string(text), Type: sr.TypeProtobuf, References: deps})
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// avroReferences registers the named types doc (the schema at path) uses and does not define,
// each from dir/FULLNAME.avsc under subject FULLNAME; seen holds the names on the way here, so
// that a cycle is an error rather than a loop.
func (s *seeds) avroReferences(dir, path string, doc any, seen map[string]bool) ([]sr.SchemaReference, error) {
	var refs []sr.SchemaReference
	for _, name := range avroExternal(doc) {
		if seen[name] {
			return nil, fmt.Errorf("%w: %s: the named type %s refers back to itself through other files: define the types of a cycle in one file", errSchema, path, name)
		}
		file := filepath.Join(dir, name+".avsc")
		text, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s uses the type %s, which it does not define: put the schema of %s in %s (it is registered as the reference %s)", errSchema, path, name, name, file, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errSchema, err)
		}
		var sub any
		if err := json.Unmarshal(text, &sub); err != nil {
			return nil, jsonFault(file, string(text), err)
		}
		seen[name] = true
		deps, err := s.avroReferences(dir, file, sub, seen)
		delete(seen, name)
		if err != nil {
			return nil, err
		}
		ref, err := s.reference(name, sr.Schema{Schema: string(text), References: deps})
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// reference registers a referenced schema under its name as its subject.
func (s *seeds) reference(name string, sch sr.Schema) (sr.SchemaReference, error) {
	_, version, err := s.fake.RegisterSchema(name, sch)
	if err != nil {
		return sr.SchemaReference{}, fmt.Errorf("%w: registering the reference %s: %w", errSchema, name, err)
	}
	return sr.SchemaReference{Name: name, Subject: name, Version: version}, nil
}

// avroPrimitive are the Avro type names that name no schema.
var avroPrimitive = map[string]bool{"null": true, "boolean": true, "int": true, "long": true, "float": true, "double": true, "bytes": true, "string": true}

// avroExternal returns the full names of the named types an Avro schema uses and does not
// define, in the order of their first use.
func avroExternal(doc any) []string {
	defined, used := map[string]bool{}, []string{}
	full := func(name, ns string) string {
		if strings.Contains(name, ".") || ns == "" {
			return name
		}
		return ns + "." + name
	}
	var walk func(node any, ns string)
	walk = func(node any, ns string) {
		switch n := node.(type) {
		case string:
			if !avroPrimitive[n] {
				used = append(used, full(n, ns))
			}
		case []any:
			for _, b := range n {
				walk(b, ns)
			}
		case map[string]any:
			switch t, _ := n["type"].(string); t {
			case "record", "error", "enum", "fixed":
				name, _ := n["name"].(string)
				if space, ok := n["namespace"].(string); ok && !strings.Contains(name, ".") {
					ns = space
				}
				name = full(name, ns)
				defined[name] = true
				if i := strings.LastIndex(name, "."); i >= 0 {
					ns = name[:i]
				} else {
					ns = ""
				}
				fields, _ := n["fields"].([]any)
				for _, f := range fields {
					if f, ok := f.(map[string]any); ok {
						walk(f["type"], ns)
					}
				}
			case "array":
				walk(n["items"], ns)
			case "map":
				walk(n["values"], ns)
			default:
				walk(n["type"], ns)
			}
		}
	}
	walk(doc, "")
	var ext []string
	for _, name := range used {
		if !defined[name] && !slices.Contains(ext, name) {
			ext = append(ext, name)
		}
	}
	return ext
}
