package schema

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// maxIndexes bounds the message indexes a record may carry: the nesting depth of the message.
const maxIndexes = 64

// protoCodec is a compiled .proto file.
type protoCodec struct {
	file  protoreflect.FileDescriptor
	first protoreflect.MessageDescriptor   // index [0], the common case
	plans map[protoreflect.FullName]*pbMsg // the fast path's (protofast.go)
}

// protoFile is the name of schema id's own file among its imports.
func protoFile(id int) string { return fmt.Sprintf("millrace-schema-%d.proto", id) }

// compileProtobuf compiles the registry's schema with its references (the files it imports,
// by their import paths). The registry holds .proto text; a registry that keeps what
// confluent-kafka-python's serializer registers verbatim holds a base64 FileDescriptorProto,
// which is read as well.
func compileProtobuf(id int, text string, refs []ref) (codec, error) {
	srcs := map[string]string{}
	descs := map[string]*descriptorpb.FileDescriptorProto{}
	add := func(name, text string) string {
		if fd := asDescriptor(text); fd != nil {
			if name == "" {
				name = fd.GetName()
			}
			fd.Name = proto.String(name)
			descs[name] = fd
			return name
		}
		if name == "" {
			name = protoFile(id)
		}
		srcs[name] = text
		return name
	}
	for _, rf := range refs {
		add(rf.name, rf.text)
	}
	main := add("", text)
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
			if fd, ok := descs[path]; ok {
				return protocompile.SearchResult{Proto: fd}, nil
			}
			if src, ok := srcs[path]; ok {
				return protocompile.SearchResult{Source: strings.NewReader(src)}, nil
			}
			return protocompile.SearchResult{}, fmt.Errorf("%q is imported but is not among the schema's references", path)
		})),
		MaxParallelism: 1,
	}
	files, err := comp.Compile(context.Background(), main)
	if err != nil {
		return nil, err
	}
	fd := files[0]
	if fd.Messages().Len() == 0 {
		return nil, fmt.Errorf("the .proto %s declares no message", fd.Path())
	}
	return &protoCodec{file: fd, first: fd.Messages().Get(0), plans: pbPlans(fd)}, nil
}

// asDescriptor reads text as a base64 FileDescriptorProto, or returns nil.
func asDescriptor(text string) *descriptorpb.FileDescriptorProto {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil
	}
	fd := &descriptorpb.FileDescriptorProto{}
	if proto.Unmarshal(b, fd) != nil || fd.GetName() == "" {
		return nil
	}
	// Generated code's descriptors leave json_name out, where protoc's descriptor sets hold
	// it; the compiler reads a missing one as the custom name "" (a clash between fields).
	for _, m := range fd.MessageType {
		fillJSONNames(m)
	}
	return fd
}

func fillJSONNames(m *descriptorpb.DescriptorProto) {
	for _, f := range m.Field {
		if f.JsonName == nil {
			f.JsonName = proto.String(jsonName(f.GetName()))
		}
	}
	for _, n := range m.NestedType {
		fillJSONNames(n)
	}
}

// jsonName is protoc's default JSON name of a field: lowerCamelCase, underscores dropped.
func jsonName(name string) string {
	b := make([]byte, 0, len(name))
	upper := false
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '_':
			upper = true
		case upper && 'a' <= c && c <= 'z':
			b = append(b, c-'a'+'A')
			upper = false
		default:
			b = append(b, c)
			upper = false
		}
	}
	return string(b)
}

func (*protoCodec) format() Format { return Protobuf }

// partial skips the check for proto2's required fields on decoding (two walks of every message
// decoded, a quarter of the allocations, that proto3 has no use for); encoding keeps it.
var partial = proto.UnmarshalOptions{AllowPartial: true}

// message is the message the indexes pick: [1, 0] is the first message nested in the file's
// second.
func (c *protoCodec) message(indexes []int) (protoreflect.MessageDescriptor, error) {
	if len(indexes) == 1 && indexes[0] == 0 {
		return c.first, nil
	}
	msgs := c.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range indexes {
		if i < 0 || i >= msgs.Len() {
			return nil, &fault{reason: fmt.Sprintf("the message indexes %v name no message of the schema's .proto: the record was not written with its schema id's schema", indexes)}
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}

func (c *protoCodec) decode(payload []byte) ([]byte, error) {
	md, rest := c.first, payload
	if len(payload) > 0 && payload[0] == 0 { // the indexes [0], without a slice made
		rest = payload[1:]
	} else if indexes, r, err := header.DecodeIndex(payload, maxIndexes); err == nil {
		if md, err = c.message(indexes); err != nil {
			md = nil
		}
		rest = r
	} else {
		md = nil
	}
	if md != nil {
		if p := c.plans[md.FullName()]; p != nil {
			if out, ok := protoFast(p, rest); ok {
				return out, nil
			}
		}
	}
	return c.decodeSlow(payload)
}

// decodeSlow decodes with dynamicpb and writes with protojson: every message, and every error.
func (c *protoCodec) decodeSlow(payload []byte) (out []byte, err error) {
	// protobuf-go's reflective decoder panics on some malformed map entries of a dynamic
	// message (a key of the wrong wire type); a record's bytes must never stop the bridge.
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &fault{reason: fmt.Sprintf("the bytes do not decode with the record's Protobuf schema (the decoder gave up: %v)", p)}
		}
	}()
	indexes, rest, err := header.DecodeIndex(payload, maxIndexes)
	if err != nil {
		return nil, &fault{reason: "the Protobuf message indexes after the schema id do not decode", err: err}
	}
	md, err := c.message(indexes)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := partial.Unmarshal(rest, m); err != nil {
		return nil, &fault{reason: fmt.Sprintf("the bytes do not decode as %s", md.FullName()), err: err}
	}
	out, err = protojson.MarshalOptions{AllowPartial: true}.MarshalAppend(make([]byte, 0, 2*len(rest)+64), m)
	if err != nil {
		return nil, &fault{reason: fmt.Sprintf("the decoded %s does not write as JSON", md.FullName()), err: err}
	}
	return out, nil
}

// byName is the message record names (a full name, nested ones too) and its indexes; "" is the
// file's first.
func (c *protoCodec) byName(record string) (protoreflect.MessageDescriptor, []int, error) {
	if record == "" {
		return c.first, []int{0}, nil
	}
	md := c.find(record)
	if md == nil {
		return nil, nil, fmt.Errorf("%w: the .proto %s has no message %q: name one of its messages by full name (package.Message)", ErrCodec, c.file.Path(), record)
	}
	var indexes []int
	for d := protoreflect.Descriptor(md); d != nil && d != c.file; d = d.Parent() {
		indexes = append(indexes, d.Index())
	}
	for i, j := 0, len(indexes)-1; i < j; i, j = i+1, j-1 {
		indexes[i], indexes[j] = indexes[j], indexes[i]
	}
	return md, indexes, nil
}

// find is the message of full name record, or nil.
func (c *protoCodec) find(record string) protoreflect.MessageDescriptor {
	name := record
	if pkg := string(c.file.Package()); pkg != "" {
		var ok bool
		if name, ok = strings.CutPrefix(record, pkg+"."); !ok {
			return nil
		}
	}
	msgs := c.file.Messages()
	var md protoreflect.MessageDescriptor
	for part := range strings.SplitSeq(name, ".") {
		if md = msgs.ByName(protoreflect.Name(part)); md == nil {
			return nil
		}
		msgs = md.Messages()
	}
	return md
}

func (c *protoCodec) encode(dst []byte, id int, record string, json []byte) ([]byte, error) {
	md, indexes, err := c.byName(record)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal(json, m); err != nil {
		return nil, &fault{reason: fmt.Sprintf("the payload does not fit %s (the proto3 JSON mapping)", md.FullName()), err: err}
	}
	dst, _ = header.AppendEncode(dst, id, indexes)
	dst, err = proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return nil, &fault{reason: fmt.Sprintf("the payload does not encode as %s", md.FullName()), err: err}
	}
	return dst, nil
}
