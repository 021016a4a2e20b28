package schema

import (
	"errors"
	"fmt"

	"github.com/twmb/avro"
)

// avroCodec is a compiled Avro schema, its logical types left as the types under them: that
// is what the Avro JSON encoding writes, and no time.Time or big.Rat is made and dropped per
// record.
type avroCodec struct {
	s    *avro.Schema
	fast *avNode // the fast path's plan (avrofast.go); nil: the library's way
}

// rawLogical leaves every logical type undecoded: a custom type with no Decode.
var rawLogical = func() []avro.SchemaOpt {
	var opts []avro.SchemaOpt
	for _, lt := range []string{"decimal", "uuid", "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
		"timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos", "duration"} {
		opts = append(opts, avro.WithCustomType(avro.CustomType{LogicalType: lt}))
	}
	return opts
}()

// tagged writes unions as {"type": value}, the Avro JSON encoding that Java's JsonDecoder and
// fastavro read.
var tagged = []avro.Opt{avro.TaggedUnions()}

func compileAvro(text string, refs []ref) (codec, error) {
	// A SchemaCache resolves the named types the references define; refs come dependencies
	// first.
	var sc avro.SchemaCache
	for _, rf := range refs {
		if _, err := sc.Parse(rf.text, rawLogical...); err != nil {
			return nil, fmt.Errorf("the referenced Avro schema %q: %w", rf.name, err)
		}
	}
	s, err := sc.Parse(text, rawLogical...)
	if err != nil {
		return nil, err
	}
	return &avroCodec{s: s, fast: avPlan(s)}, nil
}

// resolveAvro is the codec that reads what writer wrote as reader's shape.
func resolveAvro(w, r codec, writerID, readerID int) (codec, error) {
	wa, ok1 := w.(*avroCodec)
	ra, ok2 := r.(*avroCodec)
	if !ok1 || !ok2 {
		return nil, &fault{reason: fmt.Sprintf("schema id %d (the writer's) and %d (the pinned reader's) are not both Avro", writerID, readerID)}
	}
	s, err := avro.Resolve(wa.s, ra.s)
	if err != nil {
		f := &fault{reason: fmt.Sprintf("the record's schema (id %d) cannot be read as the pinned schema (id %d): they are not compatible", writerID, readerID), err: err}
		var ce *avro.CompatibilityError
		if errors.As(err, &ce) && ce.Path != "" {
			f.path = "$." + ce.Path
		}
		return nil, f
	}
	return &avroCodec{s: s}, nil
}

func (*avroCodec) format() Format { return Avro }

func (c *avroCodec) decode(payload []byte) ([]byte, error) {
	if c.fast != nil {
		if out, ok := avroFast(c.fast, payload); ok {
			return out, nil
		}
	}
	return c.decodeSlow(payload)
}

// decodeSlow decodes to a Go value and writes that as JSON: every value, and every error.
func (c *avroCodec) decodeSlow(payload []byte) ([]byte, error) {
	var v any
	rest, err := c.s.Decode(payload, &v)
	if err != nil {
		return nil, avroFault("the bytes do not decode with the record's Avro schema", err)
	}
	if len(rest) != 0 {
		return nil, &fault{reason: fmt.Sprintf("%d bytes are left after the Avro value: the record was not written with its schema id's schema", len(rest))}
	}
	out, err := c.s.AppendEncodeJSON(make([]byte, 0, 2*len(payload)+64), v, tagged...)
	if err != nil {
		return nil, avroFault("the decoded value does not write as JSON", err)
	}
	return out, nil
}

func (c *avroCodec) encode(dst []byte, id int, _ string, json []byte) ([]byte, error) {
	var v any
	if err := c.s.DecodeJSON(json, &v); err != nil {
		return nil, avroFault("the payload does not fit the Avro schema", err)
	}
	dst, _ = header.AppendEncode(dst, id, nil)
	dst, err := c.s.AppendEncode(dst, v)
	if err != nil {
		return nil, avroFault("the payload does not fit the Avro schema", err)
	}
	return dst, nil
}

// avroFault is a fault with the field path the library reports.
func avroFault(reason string, err error) error {
	f := &fault{reason: reason, err: err}
	var se *avro.SemanticError
	if errors.As(err, &se) && se.Field != "" {
		f.path = "$." + se.Field
	}
	var sb *avro.ShortBufferError
	if errors.As(err, &sb) {
		f.reason = "the bytes end inside the Avro value: the record is truncated or not written with its schema id's schema"
	}
	return f
}
