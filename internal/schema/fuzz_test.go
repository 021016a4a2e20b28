package schema_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/franz-go/pkg/sr"
)

// FuzzDecode: any bytes after a known schema id decode to valid JSON or are the record's
// fault (a *DataError), never a panic or another error; what decodes encodes again (the
// Protobuf file's first message), and that decodes to the same JSON.
func FuzzDecode(f *testing.F) {
	reg := newFake(f, schema.Settings{})
	ids := []int{
		reg.register(f, "avro-value", sr.Schema{Schema: readTestdata(f, "order.avsc")}),
		registerShop(f, reg, "proto-value"),
		reg.register(f, "json-value", sr.Schema{Type: sr.TypeJSON, Schema: readTestdata(f, "user.schema.json")}),
	}
	topics := []string{"avro", "proto", "json"}
	codecs := []schema.Codec{{Format: schema.Avro}, {Format: schema.Protobuf}, {Format: schema.JSONSchema}}
	ctx := context.Background()
	for i, js := range []string{orderJSON, orderProtoJSON, `{"name":"ann","age":30,"tags":["a","b"]}`} {
		enc, err := reg.reg.Encode(ctx, topics[i], false, codecs[i], []byte(js))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), enc[5:])
	}
	f.Add(uint8(1), []byte{2, 2, 0, 0x0a, 1, 'x'})
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		i := int(which) % len(ids)
		got, err := reg.reg.Decode(ctx, topics[i], false, codecs[i], wire(ids[i], payload))
		var de *schema.DataError
		if errors.As(err, &de) {
			return
		}
		if err != nil {
			t.Fatalf("Decode(%x) = %v; want JSON or a *DataError", payload, err)
		}
		if !json.Valid(got) {
			t.Fatalf("Decode(%x) = %s, not JSON", payload, got)
		}
		if codecs[i].Format == schema.Protobuf && (len(payload) == 0 || payload[0] != 0) {
			return // another message than the first, which Encode would need named
		}
		enc, err := reg.reg.Encode(ctx, topics[i], false, codecs[i], got)
		if err != nil {
			t.Fatalf("Encode(Decode(%x) = %s): %v", payload, got, err)
		}
		again, err := reg.reg.Decode(ctx, topics[i], false, codecs[i], enc)
		if err != nil {
			t.Fatalf("Decode(Encode(%s)): %v", got, err)
		}
		if !sameJSONValue(got, again) {
			t.Fatalf("Decode(Encode(%s)) = %s", got, again)
		}
	})
}

func sameJSONValue(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// FuzzEncode: any payload encodes or is the record's fault (a *DataError), never a panic or
// another error; what encodes decodes.
func FuzzEncode(f *testing.F) {
	reg := newFake(f, schema.Settings{})
	reg.register(f, "avro-value", sr.Schema{Schema: readTestdata(f, "order.avsc")})
	registerShop(f, reg, "proto-value")
	reg.register(f, "json-value", sr.Schema{Type: sr.TypeJSON, Schema: readTestdata(f, "user.schema.json")})
	topics := []string{"avro", "proto", "json"}
	codecs := []schema.Codec{{Format: schema.Avro}, {Format: schema.Protobuf}, {Format: schema.JSONSchema}}
	for i, js := range []string{orderJSON, orderProtoJSON, `{"name":"ann","age":30,"tags":["a","b"]}`} {
		f.Add(uint8(i), []byte(js))
	}
	f.Add(uint8(0), []byte(`{"note":{"shop.Address":{"zip":"1","lines":[]}}}`))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, which uint8, js []byte) {
		i := int(which) % len(topics)
		enc, err := reg.reg.Encode(ctx, topics[i], false, codecs[i], js)
		var de *schema.DataError
		if errors.As(err, &de) {
			return
		}
		if err != nil {
			t.Fatalf("Encode(%s) = %v; want bytes or a *DataError", js, err)
		}
		if _, err := reg.reg.Decode(ctx, topics[i], false, codecs[i], enc); err != nil {
			t.Fatalf("Decode(Encode(%s) = %x): %v", js, enc, err)
		}
	})
}
