package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

func TestMarshalDescriptor(t *testing.T) {
	const empty = `{"protocolVersion":"","sdk":{"name":"","version":""},"streamlet":{"configParameters":[],"description":"","inlets":[],"name":"","outlets":[]}}`
	tests := []struct {
		name string
		spec *flowv1.Spec
		want string
	}{
		{"empty spec: every field present", &flowv1.Spec{}, empty},
		{"empty messages equal missing ones", &flowv1.Spec{Sdk: &flowv1.SdkInfo{}, Streamlet: &flowv1.StreamletDescriptor{}}, empty},
		{"nil entries and contract", &flowv1.Spec{Streamlet: &flowv1.StreamletDescriptor{
			Inlets:           []*flowv1.Port{nil, {Name: "a"}},
			ConfigParameters: []*flowv1.ConfigParameter{nil},
		}}, `{"protocolVersion":"","sdk":{"name":"","version":""},"streamlet":{"configParameters":[{"defaultValue":"","description":"","key":"","type":"STRING"}],"description":"","inlets":[{"contract":{"fingerprint":"","format":"","schemaName":""},"name":""},{"contract":{"fingerprint":"","format":"","schemaName":""},"name":"a"}],"name":"","outlets":[]}}`},
		{"unknown config type as its number", &flowv1.Spec{Streamlet: &flowv1.StreamletDescriptor{
			ConfigParameters: []*flowv1.ConfigParameter{{Key: "k", Type: 9}, {Key: "n", Type: -1}},
		}}, `{"protocolVersion":"","sdk":{"name":"","version":""},"streamlet":{"configParameters":[{"defaultValue":"","description":"","key":"k","type":9},{"defaultValue":"","description":"","key":"n","type":-1}],"description":"","inlets":[],"name":"","outlets":[]}}`},
		{"escapes", &flowv1.Spec{ProtocolVersion: "\x00\x1f\x7f\u2028\"\\/<>&\b\f\n\r\té𝄞"},
			`{"protocolVersion":"\u0000\u001f` + "\x7f\u2028" + `\"\\/<>&\b\f\n\r\té𝄞","sdk":{"name":"","version":""},"streamlet":{"configParameters":[],"description":"","inlets":[],"name":"","outlets":[]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := protocol.MarshalDescriptor(tt.spec)
			if err != nil || string(got) != tt.want {
				t.Errorf("MarshalDescriptor(%s) = %s, %v; want %s", tt.name, got, err, tt.want)
			}
		})
	}
}

func TestMarshalDescriptorErrors(t *testing.T) {
	tests := []struct {
		name string
		spec *flowv1.Spec
		says string
	}{
		{"nil", nil, "nil spec"},
		{"invalid UTF-8", edit(func(s *flowv1.Spec) { s.Streamlet.Outlets[1].Contract.SchemaName = "a\xffb" }),
			"outlets[1].contract.schema_name is not valid UTF-8"},
		{"invalid UTF-8 in a parameter", edit(func(s *flowv1.Spec) { s.Streamlet.ConfigParameters[1].DefaultValue = "\xc3" }),
			"config_parameters[1].default_value is not valid UTF-8"},
	}
	for _, tt := range tests {
		got, err := protocol.MarshalDescriptor(tt.spec)
		if !errors.Is(err, protocol.ErrDescriptor) || !strings.Contains(err.Error(), tt.says) || got != nil {
			t.Errorf("MarshalDescriptor(%s) = %q, %v; want an ErrDescriptor saying %q", tt.name, got, err, tt.says)
		}
	}
}

func TestUnmarshalDescriptor(t *testing.T) {
	want := &flowv1.Spec{
		ProtocolVersion: "1.0",
		Streamlet: &flowv1.StreamletDescriptor{
			Name:             "x",
			ConfigParameters: []*flowv1.ConfigParameter{{Key: "k", Type: flowv1.ConfigType_DURATION}},
		},
	}
	tests := []string{
		`{"protocolVersion":"1.0","streamlet":{"name":"x","configParameters":[{"key":"k","type":"DURATION"}]}}`,
		" \n{ \"streamlet\" : {\"config_parameters\":[{\"type\":4,\"key\":\"k\"}], \"name\":\"x\"},\t\"protocol_version\":\"1.0\"}\n",
		`{"protocolVersion":"1.0","sdk":null,"streamlet":{"name":"x","inlets":null,"configParameters":[{"key":"k","type":"DURATION","defaultValue":null}]}}`,
	}
	for _, in := range tests {
		got, err := protocol.UnmarshalDescriptor([]byte(in))
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("UnmarshalDescriptor(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestUnmarshalDescriptorErrors(t *testing.T) {
	tests := []struct{ in, says string }{
		{``, "unexpected"},
		{`[]`, "unexpected"},
		{`{"protocolVersion":"1.0"} x`, "syntax error"},
		{`{"protocolVersion":"1.0","extra":1}`, `unknown field "extra"`},
		{`{"streamlet":{"name":"x","inlet":[]}}`, `unknown field "inlet"`},
		{`{"protocolVersion":"1.0","protocolVersion":"1.0"}`, "duplicate"},
		{`{"protocolVersion":"1.0","protocol_version":"1.0"}`, "duplicate"},
		{`{"protocolVersion":1.0}`, "invalid value"},
		{`{"streamlet":{"inlets":{}}}`, "unexpected"},
		{`{"streamlet":{"configParameters":[{"type":"TEXT"}]}}`, "invalid value"},
		{`{"protocolVersion":"\ud800"}`, ""}, // a lone surrogate
	}
	for _, tt := range tests {
		got, err := protocol.UnmarshalDescriptor([]byte(tt.in))
		if !errors.Is(err, protocol.ErrDescriptor) || !strings.Contains(err.Error(), tt.says) || got != nil {
			t.Errorf("UnmarshalDescriptor(%s) = %v, %v; want an ErrDescriptor saying %q", tt.in, got, err, tt.says)
		}
		if !errors.Is(err, proto.Error) { // protojson's own error stays in the chain
			t.Errorf("UnmarshalDescriptor(%s) = %v; want an error wrapping protojson's (proto.Error)", tt.in, err)
		}
	}
}

// The canonical bytes do not depend on Go's map order: many runs give one result.
func TestMarshalDescriptorDeterministic(t *testing.T) {
	first, err := protocol.MarshalDescriptor(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if got, _ := protocol.MarshalDescriptor(validSpec()); string(got) != string(first) {
			t.Fatalf("MarshalDescriptor(validSpec()) = %s; want %s as on the first call", got, first)
		}
	}
}
