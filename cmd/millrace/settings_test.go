package main

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestBothSidesParseAlike: the two containers of a pod take the same forms, and refuse the
// same values, of what they both read: the process port, and the held-output budgets (the
// bridge's MILLRACE_BRIDGE_MAX_HELD_BYTES, the sidecar's FLOW_MAX_HELD_EMIT_BYTES).
func TestBothSidesParseAlike(t *testing.T) {
	a, err := actionconf.ParseLine([]string{"s", "--in", "in=a.v1", "--", "cat"})
	if err != nil {
		t.Fatal(err)
	}
	descriptor, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		t.Fatal(err)
	}
	required := map[string]string{"FLOW_BROKERS": "k:9092", "FLOW_PIPELINE": "p", "FLOW_STREAMLET": "s", "FLOW_DESCRIPTOR": "/d.json", "FLOW_INLETS": "in=t"}
	sidecarWith := func(name, v string) (*sidecar.Config, error) {
		env := maps.Clone(required)
		env[name] = v
		return sidecar.ConfigFromEnv(func(k string) string { return env[k] }, func(string) ([]byte, error) { return descriptor, nil })
	}
	bridgeWith := func(name, v string) (*bridge.Config, error) {
		return bridge.ConfigFromEnv(func(k string) string { return map[string]string{name: v}[k] })
	}
	for _, v := range []string{"9020", " 9020\n", "\t1 ", "65535", "0", "65536", "90x", "-1", "9 020"} {
		b, berr := bridgeWith(protocol.EnvProcessPort, v)
		s, serr := sidecarWith(protocol.EnvProcessPort, v)
		if (berr == nil) != (serr == nil) || (berr == nil && b.Port != s.ProcessPort) {
			t.Errorf("%s=%q: the bridge takes %v (%v), the sidecar %v (%v); want the same", protocol.EnvProcessPort, v, b, berr, s, serr)
		}
	}
	for _, v := range []string{"64Mi", "67108864", " 1Gi ", "65536Ki", "2G", "1Ki", "1023", "64MiB", "lots", "-1"} {
		b, berr := bridgeWith(bridge.EnvMaxHeldBytes, v)
		s, serr := sidecarWith("FLOW_MAX_HELD_EMIT_BYTES", v)
		if (berr == nil) != (serr == nil) || (berr == nil && b.MaxHeldBytes != s.MaxHeldEmitBytes) {
			t.Errorf("%q as the held budget: the bridge takes %v (%v), the sidecar %v (%v); want the same", v, b, berr, s, serr)
		}
	}
	b, err := bridgeWith("", "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sidecarWith("", "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Port != s.ProcessPort || b.MaxHeldBytes != s.MaxHeldEmitBytes {
		t.Errorf("defaults: the bridge serves on %d and holds %d bytes, the sidecar dials %d and holds %d; want the same", b.Port, b.MaxHeldBytes, s.ProcessPort, s.MaxHeldEmitBytes)
	}
}

// TestBadSettingsNameTheSideOnce: a bad deploy setting of `millrace bridge` (exit 2) or
// `millrace sidecar` (exit 1) is reported after the command's own prefix, which names the side,
// so "bridge:" or "sidecar:" is said once, and the variable is named.
func TestBadSettingsNameTheSideOnce(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bridge", "s", "--in", "in=a.v1", "--", "cat"}, 2, "millrace bridge: bad deploy settings"},
		{[]string{"sidecar"}, 1, "millrace sidecar: bad deploy configuration"},
	} {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
			getenv: func(k string) string { return map[string]string{protocol.EnvProcessPort: "90x"}[k] }}
		code := dispatch(context.Background(), e, tt.args)
		got := errOut.String()
		if code != tt.code || !strings.HasPrefix(got, tt.want) || strings.Count(got, tt.args[0]+":") != 1 || !strings.Contains(got, protocol.EnvProcessPort) {
			t.Errorf("millrace %s with %s=90x = %d, %q; want %d and %q, the side named once, the variable named", tt.args[0], protocol.EnvProcessPort, code, got, tt.code, tt.want)
		}
	}
}
