package protocol_test

import (
	"slices"
	"testing"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// The exact messages are pinned by the fixtures (fixtures/invalid.json); these tests pin the
// paths, including for specs that only Go can build (nil entries, invalid UTF-8).
func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		spec  *flowv1.Spec
		paths []string
	}{
		{"valid", validSpec(), nil},
		{"no lists", edit(func(s *flowv1.Spec) {
			s.Streamlet.Inlets, s.Streamlet.Outlets, s.Streamlet.ConfigParameters = nil, nil, nil
		}), nil},
		{"nil spec", nil, []string{""}},
		{"empty spec", &flowv1.Spec{}, []string{"protocol_version", "sdk", "streamlet"}},
		{"version forms", edit(func(s *flowv1.Spec) { s.ProtocolVersion = "1.0.0" }), []string{"protocol_version"}},
		{"a later version is well formed", edit(func(s *flowv1.Spec) { s.ProtocolVersion = "7.3" }), nil},
		{"sdk fields", edit(func(s *flowv1.Spec) { s.Sdk = &flowv1.SdkInfo{} }), []string{"sdk.name", "sdk.version"}},
		{"name too long", edit(func(s *flowv1.Spec) { s.Streamlet.Name = string(make([]byte, 64)) }), []string{"name"}},
		{"name 63 long", edit(func(s *flowv1.Spec) {
			s.Streamlet.Name = "a23456789-123456789-123456789-123456789-123456789-123456789-123"
		}), nil},
		{"name upper", edit(func(s *flowv1.Spec) { s.Streamlet.Name = "Score" }), []string{"name"}},
		{"invalid UTF-8", edit(func(s *flowv1.Spec) {
			s.Streamlet.Description = "\xff"
			s.Streamlet.Outlets[0].Contract.SchemaName = "\xfe"
		}), []string{"description", "outlets[0].contract.schema_name"}},
		{"nil entries", edit(func(s *flowv1.Spec) {
			s.Streamlet.Inlets = append(s.Streamlet.Inlets, nil)
			s.Streamlet.ConfigParameters = append([]*flowv1.ConfigParameter{nil}, s.Streamlet.ConfigParameters...)
		}), []string{"inlets[1]", "config_parameters[0]"}},
		{"nil contract", edit(func(s *flowv1.Spec) { s.Streamlet.Outlets[1].Contract = nil }), []string{"outlets[1].contract"}},
		{"duplicate port across lists", edit(func(s *flowv1.Spec) { s.Streamlet.Outlets[1].Name = "listings" }), []string{"outlets[1].name"}},
		{"every contract field", edit(func(s *flowv1.Spec) {
			s.Streamlet.Outlets[1].Contract = &flowv1.Contract{Format: "avro", SchemaName: "x", Fingerprint: "y"}
		}), []string{"outlets[1].contract.format", "outlets[1].contract.fingerprint"}},
		{"no schema, fingerprint unchecked", edit(func(s *flowv1.Spec) {
			s.Streamlet.Inlets[0].Contract.SchemaName = ""
		}), []string{"inlets[0].contract.schema_name"}},
		{"config", edit(func(s *flowv1.Spec) {
			s.Streamlet.ConfigParameters = []*flowv1.ConfigParameter{
				{Key: "a", Type: flowv1.ConfigType_BOOLEAN, DefaultValue: "yes"},
				{Key: "a"},
				{Key: "1x"},
				{Key: "", Type: flowv1.ConfigType(42), DefaultValue: "whatever"},
				{Key: "d", Type: flowv1.ConfigType_DURATION, DefaultValue: "1m30s"},
			}
		}), []string{
			"config_parameters[0].default_value", "config_parameters[1].key",
			"config_parameters[2].key", "config_parameters[3].key", "config_parameters[3].type",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := protocol.Validate(tt.spec)
			var got []string
			for _, p := range ps {
				got = append(got, p.Path)
				if p.Message == "" {
					t.Errorf("Validate: problem at %q has no message", p.Path)
				}
			}
			if !slices.Equal(got, tt.paths) {
				t.Errorf("Validate(%s) = %v; want paths %q", tt.name, ps, tt.paths)
			}
		})
	}
}

// Validate reports problems only; it never changes the spec.
func TestValidateDoesNotModify(t *testing.T) {
	s := edit(func(s *flowv1.Spec) { s.Streamlet.Name = "BAD" })
	before := s.String()
	protocol.Validate(s)
	if after := s.String(); after != before {
		t.Errorf("Validate changed its spec: %s; want %s", after, before)
	}
}
