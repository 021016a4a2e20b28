package protocol_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// FuzzDescriptor checks UnmarshalDescriptor and MarshalDescriptor on any input: neither
// panics; whatever UnmarshalDescriptor accepts, MarshalDescriptor writes as valid JSON; the
// result reads back as the same Spec, is its own canonical form (idempotent), and any other
// reading of it (Validate) does not panic.
func FuzzDescriptor(f *testing.F) {
	seeds, _ := filepath.Glob("fixtures/descriptors/*.json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"streamlet":{"configParameters":[{"type":7}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := protocol.UnmarshalDescriptor(data)
		if err != nil {
			return
		}
		protocol.Validate(spec)
		first, err := protocol.MarshalDescriptor(spec)
		if err != nil {
			t.Fatalf("MarshalDescriptor(UnmarshalDescriptor(%q)) = %v; want no error for a spec read from JSON", data, err)
		}
		if !json.Valid(first) {
			t.Fatalf("MarshalDescriptor(UnmarshalDescriptor(%q)) = %s; not valid JSON", data, first)
		}
		back, err := protocol.UnmarshalDescriptor(first)
		if err != nil {
			t.Fatalf("UnmarshalDescriptor(%s) = %v; want its own output read back", first, err)
		}
		second, err := protocol.MarshalDescriptor(back)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("MarshalDescriptor is not idempotent:\n%s\nthen\n%s (%v)", first, second, err)
		}
		// Reading the canonical form again gives the same message (missing and empty
		// messages aside, which the canonical form does not distinguish).
		again, _ := protocol.UnmarshalDescriptor(second)
		if !proto.Equal(back, again) {
			t.Fatalf("UnmarshalDescriptor(%s) differs between two reads", second)
		}
	})
}

// FuzzResolveConfig checks ParseConfigValue and ResolveConfig on any value of any type: no
// panic, and an accepted value always yields valid JSON.
func FuzzResolveConfig(f *testing.F) {
	for _, s := range []string{"0", "1.5e-7", "true", "1h30m", "512Mi", "é\x00", "-9223372036854775808", "1e400"} {
		for typ := range int32(7) {
			f.Add(typ, s)
		}
	}
	f.Fuzz(func(t *testing.T, typ int32, s string) {
		params := []*flowv1.ConfigParameter{{Key: "k", Type: flowv1.ConfigType(typ)}}
		b, ps := protocol.ResolveConfig(params, map[string]string{"k": s})
		if ps == nil && !json.Valid(b) {
			t.Fatalf("ResolveConfig(%d, %q) = %s; not valid JSON", typ, s, b)
		}
		if ps != nil && b != nil {
			t.Fatalf("ResolveConfig(%d, %q) = %s with problems %v; want nil bytes", typ, s, b, ps)
		}
		_, err := protocol.ParseConfigValue(flowv1.ConfigType(typ), s)
		if (err == nil) != (ps == nil) {
			t.Fatalf("ParseConfigValue(%d, %q) = %v but ResolveConfig problems = %v; want them to agree", typ, s, err, ps)
		}
	})
}
