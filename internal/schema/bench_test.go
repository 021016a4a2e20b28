package schema_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/franz-go/pkg/sr"
)

// benchCase registers a schema, encodes one record and returns what Decode and Encode take,
// the cache warm.
func benchCase(b *testing.B, format schema.Format) (*schema.Registry, schema.Codec, []byte, []byte) {
	b.Helper()
	f := newFake(b, schema.Settings{})
	c := schema.Codec{Format: format}
	var js string
	switch format {
	case schema.Avro:
		f.register(b, "orders-value", sr.Schema{Schema: readTestdata(b, "order.avsc")})
		js = orderJSON
	case schema.Protobuf:
		f.register(b, "shop/common.proto", sr.Schema{Type: sr.TypeProtobuf, Schema: readTestdata(b, "shop/common.proto")})
		f.register(b, "orders-value", sr.Schema{Type: sr.TypeProtobuf, Schema: readTestdata(b, "shop/order.proto"),
			References: []sr.SchemaReference{{Name: "shop/common.proto", Subject: "shop/common.proto", Version: 1}}})
		js = orderProtoJSON
	case schema.JSONSchema:
		f.register(b, "orders-value", sr.Schema{Type: sr.TypeJSON, Schema: readTestdata(b, "user.schema.json")})
		js = `{"name":"ann","age":30,"tags":["a","b"]}`
	}
	data, err := f.reg.Encode(context.Background(), "orders", false, c, []byte(js))
	if err != nil {
		b.Fatal(err)
	}
	out, err := f.reg.Decode(context.Background(), "orders", false, c, data)
	if err != nil {
		b.Fatal(err)
	}
	return f.reg, c, data, out
}

func benchDecode(b *testing.B, format schema.Format) {
	reg, c, data, _ := benchCase(b, format)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := reg.Decode(ctx, "orders", false, c, data); err != nil {
			b.Fatal(err)
		}
	}
}

func benchEncode(b *testing.B, format schema.Format) {
	reg, c, _, js := benchCase(b, format)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(js)))
	for b.Loop() {
		if _, err := reg.Encode(ctx, "orders", false, c, js); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAvro(b *testing.B)       { benchDecode(b, schema.Avro) }
func BenchmarkDecodeProtobuf(b *testing.B)   { benchDecode(b, schema.Protobuf) }
func BenchmarkDecodeJSONSchema(b *testing.B) { benchDecode(b, schema.JSONSchema) }
func BenchmarkEncodeAvro(b *testing.B)       { benchEncode(b, schema.Avro) }
func BenchmarkEncodeProtobuf(b *testing.B)   { benchEncode(b, schema.Protobuf) }
func BenchmarkEncodeJSONSchema(b *testing.B) { benchEncode(b, schema.JSONSchema) }

// BenchmarkJSONLine is the yardstick: parsing the decoded Avro record's JSON line, as a script
// does with each item, costs about this.
func BenchmarkJSONLine(b *testing.B) {
	_, _, _, js := benchCase(b, schema.Avro)
	b.ReportAllocs()
	b.SetBytes(int64(len(js)))
	for b.Loop() {
		var v any
		if err := json.Unmarshal(js, &v); err != nil {
			b.Fatal(err)
		}
	}
}
