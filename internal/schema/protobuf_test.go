package schema_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/franz-go/pkg/sr"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// registerShop registers testdata/shop/order.proto under subject, with shop/common.proto as
// its reference (the well-known timestamp.proto comes with the compiler).
func registerShop(t testing.TB, f registrar, subject string) int {
	t.Helper()
	f.register(t, "shop/common.proto", sr.Schema{Type: sr.TypeProtobuf, Schema: readTestdata(t, "shop/common.proto")})
	return f.register(t, subject, sr.Schema{Type: sr.TypeProtobuf, Schema: readTestdata(t, "shop/order.proto"),
		References: []sr.SchemaReference{{Name: "shop/common.proto", Subject: "shop/common.proto", Version: 1}}})
}

// orderProtoJSON is a shop.Order in the proto3 JSON mapping: lowerCamelCase names, int64 as
// strings, enums by name, bytes in base64, the Timestamp in RFC 3339.
const orderProtoJSON = `{"orderId":"7","total":{"currency":"EUR","units":"12"},"lines":[{"sku":"a-1","qty":2}],
	"state":"STATE_PAID","at":"2023-11-14T22:13:20.123Z","blob":"/wBh","counts":{"apples":3}}`

// TestProtobuf: messages by their indexes, nested and imported types, the proto3 JSON mapping;
// against the real registry MILLRACE_SCHEMA_REGISTRY_TEST_URL names, if set.
func TestProtobuf(t *testing.T) {
	f := newTarget(t)
	id := registerShop(t, f, "orders-value")
	ctx := context.Background()
	c := schema.Codec{Format: schema.Protobuf}
	orders := f.name("orders")

	enc, err := f.reg.Encode(ctx, orders, false, c, []byte(orderProtoJSON))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if enc[5] != 0 {
		t.Errorf("Encode of the first message wrote indexes %x; want the single 0 of [0]", enc[5])
	}
	got, err := f.reg.Decode(ctx, orders, false, c, enc)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sameJSON(t, "Decode(Encode(order))", got, orderProtoJSON)

	// Proto names are accepted on encode.
	if _, err := f.reg.Encode(ctx, orders, false, c, []byte(`{"order_id":"7"}`)); err != nil {
		t.Errorf("Encode with the proto field name: %v", err)
	}

	// shop.Refund.Reason is message [1, 0]: its bytes, written by hand.
	var h sr.ConfluentHeader
	reason, _ := h.AppendEncode(nil, id, []int{1, 0})
	reason = append(reason, 0x0a, 4, 'l', 'a', 't', 'e')
	got, err = f.reg.Decode(ctx, orders, false, c, reason)
	if err != nil {
		t.Fatalf("Decode of message [1, 0]: %v", err)
	}
	sameJSON(t, "Decode(Refund.Reason)", got, `{"text":"late"}`)
	enc, err = f.reg.Encode(ctx, orders, false, schema.Codec{Format: schema.Protobuf, Record: "shop.Refund.Reason"}, []byte(`{"text":"late"}`))
	if err != nil {
		t.Fatalf("Encode of shop.Refund.Reason: %v", err)
	}
	if string(enc) != string(reason) {
		t.Errorf("Encode(shop.Refund.Reason) = %x; want %x", enc, reason)
	}
}

// TestProtobufDataErrors: indexes naming no message, bytes that do not decode and JSON that
// does not fit are the record's faults; a Record the .proto lacks is the codec's.
func TestProtobufDataErrors(t *testing.T) {
	f := newFake(t, schema.Settings{})
	id := registerShop(t, f, "orders-value")
	ctx := context.Background()
	c := schema.Codec{Format: schema.Protobuf}
	var h sr.ConfluentHeader
	bad, _ := h.AppendEncode(nil, id, []int{5})
	_, err := f.reg.Decode(ctx, "orders", false, c, bad)
	dataErr(t, "Decode of indexes [5]", err, "", "name no message")
	_, err = f.reg.Decode(ctx, "orders", false, c, append(wire(id, []byte{0}), 0x0a, 0x7f))
	dataErr(t, "Decode of truncated bytes", err, "", "do not decode as shop.Order")
	_, err = f.reg.Decode(ctx, "orders", false, c, wire(id, []byte{0x80}))
	dataErr(t, "Decode of bad indexes", err, "", "message indexes")
	_, err = f.reg.Encode(ctx, "orders", false, c, []byte(`{"orderId":"7","colour":"red"}`))
	dataErr(t, "Encode of an unknown field", err, "", "does not fit shop.Order")
	_, err = f.reg.Encode(ctx, "orders", false, c, []byte(`{"orderId":"seven"}`))
	dataErr(t, "Encode of a bad int64", err, "", "does not fit shop.Order")
	_, err = f.reg.Encode(ctx, "orders", false, schema.Codec{Format: schema.Protobuf, Record: "shop.Nothing"}, []byte(`{}`))
	if !errors.Is(err, schema.ErrCodec) {
		t.Errorf("Encode with a Record the .proto lacks: err = %v; want ErrCodec", err)
	}

	// A schema whose reference the registry lacks cannot compile: the record's fault.
	bad2 := f.register(t, "broken-value", sr.Schema{Type: sr.TypeProtobuf, Schema: readTestdata(t, "shop/order.proto")})
	_, err = f.reg.Decode(ctx, "broken", false, c, wire(bad2, []byte{0}))
	dataErr(t, "Decode with a schema missing its import", err, "", "does not compile")
}
