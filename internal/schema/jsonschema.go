package schema

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonCodec is a compiled JSON Schema.
type jsonCodec struct {
	s *jsonschema.Schema
}

// base is where the schemas live for the compiler: references resolve against it by their
// names, and nothing is loaded from outside (the compiler's loader reads no network).
const base = "mem://registry/"

// printer writes the validator's reasons in English.
var printer = message.NewPrinter(language.English)

func compileJSONSchema(id int, text string, refs []ref) (codec, error) {
	c := jsonschema.NewCompiler()
	for _, rf := range refs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(rf.text))
		if err != nil {
			return nil, fmt.Errorf("the referenced JSON Schema %q is not JSON: %w", rf.name, err)
		}
		url := rf.name
		if !strings.Contains(url, "://") {
			url = base + strings.TrimPrefix(url, "/")
		}
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("the referenced JSON Schema %q: %w", rf.name, err)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the JSON Schema is not JSON: %w", err)
	}
	main := fmt.Sprintf("%sschema-%d.json", base, id)
	if err := c.AddResource(main, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(main)
	if err != nil {
		return nil, err
	}
	return &jsonCodec{s: s}, nil
}

func (*jsonCodec) format() Format { return JSONSchema }

// check validates the JSON in data.
func (c *jsonCodec) check(data []byte, what string) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &fault{reason: what + " is not JSON", err: err}
	}
	err = c.s.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		// The first leaf names the field and the keyword that failed.
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		path := "$"
		for _, p := range ve.InstanceLocation {
			path += "." + p
		}
		return &fault{path: path, reason: what + " does not fit the JSON Schema: " + ve.ErrorKind.LocalizedString(printer)}
	}
	if err != nil {
		return &fault{reason: what + " does not fit the JSON Schema", err: err}
	}
	return nil
}

func (c *jsonCodec) decode(payload []byte) ([]byte, error) {
	if err := c.check(payload, "the record"); err != nil {
		return nil, err
	}
	return bytes.Clone(payload), nil
}

func (c *jsonCodec) encode(dst []byte, id int, _ string, json []byte) ([]byte, error) {
	if err := c.check(json, "the payload"); err != nil {
		return nil, err
	}
	dst, _ = header.AppendEncode(dst, id, nil)
	return append(dst, json...), nil
}
