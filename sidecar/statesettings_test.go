package sidecar_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// statefulSpec is testSpec speaking protocol 1.1: the descriptor of an action that keeps state.
func statefulSpec() *flowv1.Spec {
	s := testSpec()
	s.ProtocolVersion = protocol.Version
	return s
}

func TestConfigFromEnvState(t *testing.T) {
	cfg, err := sidecar.ConfigFromEnv(validEnv(t).get, nil)
	if err != nil {
		t.Fatalf("ConfigFromEnv(valid) = %v; want nil", err)
	}
	if cfg.Inlets[0].StateTopic != "" || cfg.StateDir != "/tmp/millrace-state" || cfg.StateKeepRevoked != 10*time.Minute {
		t.Errorf("ConfigFromEnv(valid) state topic %q, dir %q, keep revoked %v; want none, /tmp/millrace-state, 10m", cfg.Inlets[0].StateTopic, cfg.StateDir, cfg.StateKeepRevoked)
	}

	e := validEnv(t)
	e["FLOW_DESCRIPTOR"] = writeDescriptor(t, statefulSpec())
	e["FLOW_INLET_IN_STATE_TOPIC"] = " shop.upper.in.state "
	e["FLOW_STATE_DIR"] = "/var/state"
	e["FLOW_STATE_KEEP_REVOKED"] = "1h"
	cfg, err = sidecar.ConfigFromEnv(e.get, nil)
	if err != nil {
		t.Fatalf("ConfigFromEnv(stateful) = %v; want nil", err)
	}
	if cfg.Inlets[0].StateTopic != "shop.upper.in.state" || cfg.StateDir != "/var/state" || cfg.StateKeepRevoked != time.Hour {
		t.Errorf("ConfigFromEnv(stateful) state topic %q, dir %q, keep revoked %v; want the values set", cfg.Inlets[0].StateTopic, cfg.StateDir, cfg.StateKeepRevoked)
	}
}

func TestConfigFromEnvStateProblems(t *testing.T) {
	stateless := writeDescriptor(t, testSpec())
	stateful := writeDescriptor(t, statefulSpec())
	for _, tc := range []struct {
		name string
		set  map[string]string
		want []string
		not  string // that no problem may say
	}{
		{name: "1.1 descriptor, no changelog", set: map[string]string{"FLOW_DESCRIPTOR": stateful},
			want: []string{"FLOW_DESCRIPTOR=" + stateful + " speaks protocol 1.1", "no FLOW_INLET_<PORT>_STATE_TOPIC is set"}},
		{name: "1.0 descriptor, a changelog", set: map[string]string{"FLOW_DESCRIPTOR": stateless, "FLOW_INLET_IN_STATE_TOPIC": "in.state"},
			want: []string{"FLOW_INLET_IN_STATE_TOPIC is set but FLOW_DESCRIPTOR=" + stateless + " speaks protocol 1.0", "--state in, or unset the variable"}},
		{name: "changelog is the inlet's topic", set: map[string]string{"FLOW_DESCRIPTOR": stateful, "FLOW_INLET_IN_STATE_TOPIC": "orders"},
			want: []string{"FLOW_INLET_IN_STATE_TOPIC=orders is also inlet in's topic (FLOW_INLETS)"}},
		{name: "changelog is the outlet's topic", set: map[string]string{"FLOW_DESCRIPTOR": stateful, "FLOW_INLET_IN_STATE_TOPIC": "shouts"},
			want: []string{"FLOW_INLET_IN_STATE_TOPIC=shouts is also outlet out's topic (FLOW_OUTLETS)"}},
		{name: "malformed version, no changelog", set: map[string]string{"FLOW_DESCRIPTOR": writeDescriptor(t, versioned("1.1.0"))},
			want: []string{"protocol_version"}, not: "keeps state"},
		{name: "keep revoked", set: map[string]string{"FLOW_STATE_KEEP_REVOKED": "0"}, want: []string{"FLOW_STATE_KEEP_REVOKED=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEnv(t)
			for k, v := range tc.set {
				e[k] = v
			}
			_, err := sidecar.ConfigFromEnv(e.get, nil)
			if !errors.Is(err, sidecar.ErrConfig) {
				t.Fatalf("ConfigFromEnv() = %v; want a configuration error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ConfigFromEnv() = %v; want it to name %q", err, w)
				}
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("ConfigFromEnv() = %v; want no problem saying %q", err, tc.not)
			}
		})
	}
}

// versioned is testSpec speaking protocol version v.
func versioned(v string) *flowv1.Spec {
	s := testSpec()
	s.ProtocolVersion = v
	return s
}

// TestConfigFromEnvOtherMajor: a deployed descriptor of another major says nothing of state:
// no changelog is asked for (discovery's version check judges the major).
func TestConfigFromEnvOtherMajor(t *testing.T) {
	e := validEnv(t)
	e["FLOW_DESCRIPTOR"] = writeDescriptor(t, versioned("2.1"))
	if _, err := sidecar.ConfigFromEnv(e.get, nil); err != nil {
		t.Errorf("ConfigFromEnv(2.1 descriptor, no changelog) = %v; want nil", err)
	}
}
