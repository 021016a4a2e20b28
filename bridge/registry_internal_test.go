package bridge

import (
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
)

// TestPlainPortsCostNothing: a plain JSON port has no codec (the registry is never asked) and
// its emits are built with no allocation, however the action's other ports are encoded.
func TestPlainPortsCostNothing(t *testing.T) {
	reg, err := schema.New(schema.Settings{URLs: []string{"http://127.0.0.1:1"}}, nil) // never asked
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"s --in in=x.v1 --out out=y.v1 -- prog", "s --in in=x.v1 --out out=y.v1 --out other=z.v1 --encode other=avro -- prog"} {
		a, err := actionconf.ParseLine(strings.Fields(line))
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewServer(Options{Action: a, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.enc["out"]; s.dec != nil || ok {
			t.Fatalf("%s: codecs %v, %v; want none for in and out", line, s.dec, s.enc)
		}
		c := &conversation{s: s, id: "c", start: &flowv1.Start{Pipeline: "p"}, outlets: map[string]string{"out": "out-topic", "other": "other-topic"}, maxBytes: 4 << 20}
		staged := []stdio.Emit{{Outlet: "out", Payload: []byte(`{"a":1}`)}}
		var sc emitScratch
		out := make([]*flowv1.FromProcess, 0, 1)
		tc := &stdio.TraceContext{}
		allocs := testing.AllocsPerRun(100, func() {
			sc.reset()
			if _, err := c.emits(1, staged, tc, nil, &sc, out[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: emits to the plain outlet = %v allocations; want 0", line, allocs)
		}
	}
}
