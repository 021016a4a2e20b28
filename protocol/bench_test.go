package protocol_test

import (
	"testing"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// These run once per Discover or Start, never per record; the figures only guard against
// an accidental blow-up.

func BenchmarkMarshalDescriptor(b *testing.B) {
	spec := validSpec()
	for b.Loop() {
		if _, err := protocol.MarshalDescriptor(spec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalDescriptor(b *testing.B) {
	data, err := protocol.MarshalDescriptor(validSpec())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := protocol.UnmarshalDescriptor(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	spec := validSpec()
	for b.Loop() {
		if ps := protocol.Validate(spec); ps != nil {
			b.Fatal(ps)
		}
	}
}

func BenchmarkResolveConfig(b *testing.B) {
	params := []*flowv1.ConfigParameter{
		{Key: "name", Type: flowv1.ConfigType_STRING, DefaultValue: "x"},
		{Key: "rooms", Type: flowv1.ConfigType_INTEGER},
		{Key: "ratio", Type: flowv1.ConfigType_DOUBLE, DefaultValue: "0.25"},
		{Key: "every", Type: flowv1.ConfigType_DURATION, DefaultValue: "90s"},
		{Key: "cache", Type: flowv1.ConfigType_MEMORY_SIZE, DefaultValue: "512Mi"},
	}
	values := map[string]string{"rooms": "3"}
	for b.Loop() {
		if _, ps := protocol.ResolveConfig(params, values); ps != nil {
			b.Fatal(ps)
		}
	}
}
