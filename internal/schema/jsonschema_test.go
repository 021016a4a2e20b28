package schema_test

import (
	"context"
	"testing"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/franz-go/pkg/sr"
)

const addressJSONSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
	"properties":{"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["zip"]}`

const userJSONSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"User","type":"object",
	"properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},"address":{"$ref":"address.json"}},
	"required":["name"],"additionalProperties":false}`

// TestJSONSchema: the JSON passes through, checked against the schema (with a reference) both
// ways; what does not fit names its path. It runs against the real registry
// MILLRACE_SCHEMA_REGISTRY_TEST_URL names, if set.
func TestJSONSchema(t *testing.T) {
	f := newTarget(t)
	users := f.name("users")
	f.register(t, "address", sr.Schema{Type: sr.TypeJSON, Schema: addressJSONSchema})
	id := f.register(t, "users-value", sr.Schema{Type: sr.TypeJSON, Schema: userJSONSchema,
		References: []sr.SchemaReference{{Name: "address.json", Subject: "address", Version: 1}}})
	ctx := context.Background()
	c := schema.Codec{Format: schema.JSONSchema}
	const user = `{"name":"ann","age":30,"address":{"zip":"00100"}}`

	enc, err := f.reg.Encode(ctx, users, false, c, []byte(user))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if string(enc) != string(wire(id, []byte(user))) {
		t.Errorf("Encode = %q; want the header and the JSON itself", enc)
	}
	got, err := f.reg.Decode(ctx, users, false, c, enc)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sameJSON(t, "Decode", got, user)

	for _, tc := range []struct{ name, json, path, reason string }{
		{"wrong type", `{"name":1}`, "$.name", "does not fit the JSON Schema"},
		{"minimum", `{"name":"a","age":-1}`, "$.age", "does not fit the JSON Schema"},
		{"through the reference", `{"name":"a","address":{"zip":"1"}}`, "$.address.zip", "does not fit the JSON Schema"},
		{"required", `{"age":1}`, "$", "missing property 'name'"},
		{"not JSON", `{"name":`, "", "is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.reg.Encode(ctx, users, false, c, []byte(tc.json))
			dataErr(t, "Encode", err, tc.path, tc.reason)
			_, err = f.reg.Decode(ctx, users, false, c, wire(id, []byte(tc.json)))
			dataErr(t, "Decode", err, tc.path, tc.reason)
		})
	}
}
