package protocol_test

import (
	"testing"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

func TestCompare(t *testing.T) {
	tests := []struct {
		name       string
		discovered *flowv1.Spec
		want       protocol.Problems
	}{
		{"same", validSpec(), nil},
		{"name and description", edit(func(s *flowv1.Spec) {
			s.Streamlet.Name, s.Streamlet.Description = "score", "Scores listings.\n"
		}), protocol.Problems{
			{"name", `deployed "score-listing", discovered "score"`},
			{"description", `deployed "Scores listings", discovered "Scores listings.\n"`},
		}},
		{"renamed outlet", edit(func(s *flowv1.Spec) { s.Streamlet.Outlets[1].Name = "dead" }), protocol.Problems{
			{"outlets[1]", `port "rejects" deployed but not discovered`},
			{"outlets", `port "dead" discovered but not deployed`},
		}},
		{"reordered outlets", edit(func(s *flowv1.Spec) {
			o := s.Streamlet.Outlets
			o[0], o[1] = o[1], o[0]
		}), protocol.Problems{
			{"outlets", `ports in another order: deployed ["scores", "rejects"], discovered ["rejects", "scores"]`},
		}},
		{"inlet became outlet", edit(func(s *flowv1.Spec) {
			s.Streamlet.Outlets = append(s.Streamlet.Outlets, s.Streamlet.Inlets[0])
			s.Streamlet.Inlets = nil
		}), protocol.Problems{
			{"inlets[0]", `port "listings" deployed but not discovered`},
			{"outlets", `port "listings" discovered but not deployed`},
		}},
		{"contract", edit(func(s *flowv1.Spec) {
			s.Streamlet.Outlets[0].Contract = &flowv1.Contract{Format: "avro", SchemaName: "score.v2", Fingerprint: "x"}
		}), protocol.Problems{
			{"outlets[0].contract.format", `port "scores": deployed "json", discovered "avro"`},
			{"outlets[0].contract.schema_name", `port "scores": deployed "score.v1", discovered "score.v2"`},
			{"outlets[0].contract.fingerprint", `port "scores": deployed "APSMg7U0a37QnwVGBNyrmwNcxdEIt7u3wTevcjoJt3M=", discovered "x"`},
		}},
		{"contract lost", edit(func(s *flowv1.Spec) { s.Streamlet.Inlets[0].Contract = nil }), protocol.Problems{
			{"inlets[0].contract.format", `port "listings": deployed "json", discovered ""`},
			{"inlets[0].contract.schema_name", `port "listings": deployed "listing.v1", discovered ""`},
			{"inlets[0].contract.fingerprint", `port "listings": deployed "3LyRaF6LWQUQJXE0+MC+nywg44FZH6pX9WkMrq0qotQ=", discovered ""`},
		}},
		{"config", edit(func(s *flowv1.Spec) {
			s.Streamlet.ConfigParameters = []*flowv1.ConfigParameter{
				{Key: "model", Type: flowv1.ConfigType_DURATION, Description: "which", DefaultValue: "1s"},
				{Key: "extra"},
			}
		}), protocol.Problems{
			{"config_parameters[0]", `parameter "min-rooms" deployed but not discovered`},
			{"config_parameters[1].description", `parameter "model": deployed "", discovered "which"`},
			{"config_parameters[1].type", `parameter "model": deployed STRING, discovered DURATION`},
			{"config_parameters[1].default_value", `parameter "model": deployed "", discovered "1s"`},
			{"config_parameters", `parameter "extra" discovered but not deployed`},
		}},
		{"config reordered", edit(func(s *flowv1.Spec) {
			c := s.Streamlet.ConfigParameters
			c[0], c[1] = c[1], c[0]
		}), protocol.Problems{
			{"config_parameters", `parameters in another order: deployed ["min-rooms", "model"], discovered ["model", "min-rooms"]`},
		}},
		{"unknown type", edit(func(s *flowv1.Spec) { s.Streamlet.ConfigParameters[1].Type = 9 }), protocol.Problems{
			{"config_parameters[1].type", `parameter "model": deployed STRING, discovered 9`},
		}},
		{"nothing discovered", &flowv1.Spec{}, protocol.Problems{
			{"name", `deployed "score-listing", discovered ""`},
			{"description", `deployed "Scores listings", discovered ""`},
			{"inlets[0]", `port "listings" deployed but not discovered`},
			{"outlets[0]", `port "scores" deployed but not discovered`},
			{"outlets[1]", `port "rejects" deployed but not discovered`},
			{"config_parameters[0]", `parameter "min-rooms" deployed but not discovered`},
			{"config_parameters[1]", `parameter "model" deployed but not discovered`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := protocol.Compare(validSpec().GetStreamlet(), tt.discovered.GetStreamlet())
			if got.Error() != tt.want.Error() {
				t.Errorf("Compare(deployed, %s) =\n%v\nwant\n%v", tt.name, got, tt.want)
			}
		})
	}
}

func TestCompareDuplicates(t *testing.T) {
	d := &flowv1.StreamletDescriptor{Outlets: []*flowv1.Port{port("a", "x"), port("a", "y")}}
	v := &flowv1.StreamletDescriptor{Outlets: []*flowv1.Port{port("a", "x")}}
	got := protocol.Compare(d, v)
	want := `outlets[1]: port "a" deployed but not discovered`
	if got.Error() != want {
		t.Errorf("Compare(two a, one a) = %q; want %q", got.Error(), want)
	}
	if got := protocol.Compare(nil, nil); got != nil {
		t.Errorf("Compare(nil, nil) = %v; want nil", got)
	}
}
