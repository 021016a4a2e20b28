package actionconf_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestParseLineState: --state words in line order, their options, defaults filled in, and the
// line written back.
func TestParseLineState(t *testing.T) {
	tests := []struct {
		line string
		want []actionconf.StatePort
	}{
		{`s --in a=x --in b=y -- p`, nil},
		{`s --in a=x --state a -- p`, []actionconf.StatePort{{Port: "a", MaxBytes: engine.DefaultStateMaxBytes}}},
		{`s --state=b,ttl=720h --in a=x --in b=y --state a,max-bytes=1Mi -- p`, []actionconf.StatePort{
			{Port: "b", TTL: 720 * time.Hour, MaxBytes: engine.DefaultStateMaxBytes},
			{Port: "a", MaxBytes: engine.MaxStateBytes},
		}},
		{`s --in a=x --state a,max-bytes=1,ttl=1s -- p`, []actionconf.StatePort{{Port: "a", TTL: time.Second, MaxBytes: 1}}},
		{`s --in a=x --state a,max-bytes=100k,ttl=90m -- p`, []actionconf.StatePort{{Port: "a", TTL: 90 * time.Minute, MaxBytes: 100_000}}},
		{`s --in a=x --state a,max-bytes=3Ki -- p`, []actionconf.StatePort{{Port: "a", MaxBytes: 3 << 10}}},
	}
	for _, tt := range tests {
		a, err := actionconf.ParseString(tt.line)
		if err != nil {
			t.Errorf("ParseString(%q) = %v", tt.line, err)
			continue
		}
		if !reflect.DeepEqual(a.State, tt.want) {
			t.Errorf("ParseString(%q).State = %+v; want %+v", tt.line, a.State, tt.want)
		}
		b, err := actionconf.ParseString(a.Line())
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("ParseString(Line()) = %+v, %v; want %+v (line %s)", b, err, a, a.Line())
		}
	}
}

// TestStateLine: the line writes each --state word once, its options only when not the
// defaults.
func TestStateLine(t *testing.T) {
	a, err := actionconf.ParseString(`s --in a=x --in b=y --state b --state a,ttl=24h,max-bytes=65536 -- p`)
	if err != nil {
		t.Fatal(err)
	}
	if line := a.Line(); !strings.Contains(line, "--state b --state a,ttl=24h0m0s --") {
		t.Errorf("Line() = %s; want --state b --state a,ttl=24h0m0s", line)
	}
}

// TestStateLimitsAndVersion: the engine's view of the --state words, and the protocol version
// discovery reports (the state minor only for a line that keeps state).
func TestStateLimitsAndVersion(t *testing.T) {
	a, err := actionconf.ParseString(`s --in a=x --in b=y --state a,ttl=2h --state b,max-bytes=1Ki -- p`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]engine.StateLimits{
		"a": {TTL: 2 * time.Hour, MaxValueBytes: engine.DefaultStateMaxBytes},
		"b": {MaxValueBytes: 1 << 10},
	}
	if got := a.StateLimits(); !reflect.DeepEqual(got, want) {
		t.Errorf("StateLimits() = %+v; want %+v", got, want)
	}
	if got := a.EngineConfig().State; !reflect.DeepEqual(got, want) {
		t.Errorf("EngineConfig().State = %+v; want %+v", got, want)
	}
	if got := a.Spec("1").GetProtocolVersion(); got != protocol.Version {
		t.Errorf("Spec of a stateful line says protocol %s; want %s", got, protocol.Version)
	}
	s, err := actionconf.ParseString(`s --in a=x -- p`)
	if err != nil {
		t.Fatal(err)
	}
	if s.StateLimits() != nil || s.EngineConfig().State != nil {
		t.Errorf("a stateless line's StateLimits() = %v, EngineConfig().State = %v; want nil", s.StateLimits(), s.EngineConfig().State)
	}
	if got := s.Spec("1").GetProtocolVersion(); got != protocol.BaseVersion {
		t.Errorf("Spec of a stateless line says protocol %s; want %s", got, protocol.BaseVersion)
	}
}
