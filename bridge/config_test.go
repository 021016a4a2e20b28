package bridge_test

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestConfigFromEnv: each setting's default, the forms it takes (the sidecar's: trimmed, sizes
// in bytes or with a unit), the older MiB name of the held-output budget, and a problem naming
// the variable for each bad value.
func TestConfigFromEnv(t *testing.T) {
	const ep = "http://127.0.0.1:1"
	defaults := bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 64 << 20}
	tests := []struct {
		name    string
		env     map[string]string
		want    bridge.Config
		wantErr []string
	}{
		{name: "nothing set", want: defaults},
		{name: "port trimmed", env: map[string]string{"FLOW_PROCESS_PORT": " 9020\n"}, want: bridge.Config{Port: 9020, SidecarPort: 9011, MaxHeldBytes: 64 << 20}},
		{name: "held bytes with a unit", env: map[string]string{"MILLRACE_BRIDGE_MAX_HELD_BYTES": "128Mi"}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 128 << 20}},
		{name: "held bytes in bytes", env: map[string]string{"MILLRACE_BRIDGE_MAX_HELD_BYTES": "67108864"}, want: defaults},
		{name: "held in MiB, the older name", env: map[string]string{"MILLRACE_BRIDGE_MAX_HELD_MIB": " 3 "}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 3 << 20}},
		{name: "sidecar port", env: map[string]string{"FLOW_SIDECAR_PORT": "19011"}, want: bridge.Config{Port: 9010, SidecarPort: 19011, MaxHeldBytes: 64 << 20}},
		{name: "replay generation", env: map[string]string{"FLOW_REPLAY_GENERATION": "7"}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 64 << 20, ReplayGeneration: 7}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 64 << 20, ExportSpans: true}},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces"}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 64 << 20, ExportSpans: true}},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_SDK_DISABLED": "true"}, want: defaults},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "none"}, want: defaults},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: bridge.Config{Port: 9010, SidecarPort: 9011, MaxHeldBytes: 64 << 20, ExportSpans: true}},
		{name: "both budget names", env: map[string]string{"MILLRACE_BRIDGE_MAX_HELD_BYTES": "64Mi", "MILLRACE_BRIDGE_MAX_HELD_MIB": "64"},
			wantErr: []string{"MILLRACE_BRIDGE_MAX_HELD_BYTES and MILLRACE_BRIDGE_MAX_HELD_MIB are both set: set only MILLRACE_BRIDGE_MAX_HELD_BYTES"}},
		{name: "every bad value at once", env: map[string]string{
			"FLOW_PROCESS_PORT": "90x", "FLOW_SIDECAR_PORT": "0", "MILLRACE_BRIDGE_MAX_HELD_BYTES": "lots", "FLOW_REPLAY_GENERATION": "-1",
			"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_TRACES_EXPORTER": "zipkin",
		}, wantErr: []string{
			"FLOW_PROCESS_PORT=90x is not a TCP port: write a whole number from 1 to 65535",
			"FLOW_SIDECAR_PORT=0 is not a TCP port",
			"MILLRACE_BRIDGE_MAX_HELD_BYTES=lots is not a size of at least 1Ki: write bytes or a unit, e.g. 64Mi",
			"FLOW_REPLAY_GENERATION=-1 is not a whole number from 0 up",
			"OTEL_TRACES_EXPORTER=zipkin: the bridge exports spans over OTLP only",
		}},
		{name: "bad MiB", env: map[string]string{"MILLRACE_BRIDGE_MAX_HELD_MIB": "64Mi"},
			wantErr: []string{"MILLRACE_BRIDGE_MAX_HELD_MIB=64Mi is not a whole number of MiB from 1 to 1048576: write e.g. 64, or set MILLRACE_BRIDGE_MAX_HELD_BYTES to a size such as 64Mi"}},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: []string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := bridge.ConfigFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != nil {
				if !errors.Is(err, settings.ErrSettings) {
					t.Fatalf("ConfigFromEnv(%v) = %v, %v; want an error matching settings.ErrSettings", tt.env, c, err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("ConfigFromEnv(%v) = %v; want it to say %q", tt.env, err, w)
					}
				}
				return
			}
			if err != nil || !reflect.DeepEqual(*c, tt.want) {
				t.Fatalf("ConfigFromEnv(%v) = %+v, %v; want %+v", tt.env, c, err, tt.want)
			}
			on, err := bridge.SpanExportFromEnv(func(k string) string { return tt.env[k] })
			if err != nil || on != tt.want.ExportSpans {
				t.Errorf("SpanExportFromEnv(%v) = %v, %v; want %v, as ConfigFromEnv", tt.env, on, err, tt.want.ExportSpans)
			}
		})
	}
}

// TestSettingsTable: the table names every variable ConfigFromEnv (and actionconf.FromEnv, for
// MILLRACE_ACTION) reads of the bridge's own, and nothing it does not; the OTEL_* variables
// the exporter reads itself are documented under Tracing, the two endpoints stand for them.
func TestSettingsTable(t *testing.T) {
	read := map[string]bool{}
	getenv := func(k string) string {
		read[k] = true
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
	}
	if _, err := bridge.ConfigFromEnv(getenv); err != nil {
		t.Fatal(err)
	}
	_, _ = actionconf.FromEnv(getenv)
	listed := map[string]bool{}
	for _, v := range bridge.Settings {
		listed[v.Name] = true
		if !read[v.Name] {
			t.Errorf("bridge.Settings lists %s, which the bridge does not read", v.Name)
		}
	}
	for name := range read {
		if !listed[name] && !strings.HasPrefix(name, "OTEL_") {
			t.Errorf("the bridge reads %s, which bridge.Settings does not list: add a row", name)
		}
	}
}

// update rewrites the docs tables the code generates (TestDocsBridgeSettings).
var update = flag.Bool("update", false, "rewrite docs/action-config.md's table of the bridge's environment from the code")

// TestDocsBridgeSettings: docs/action-config.md's table of the bridge's environment is the one
// the settings table prints: the same variables, in the same order, with the same defaults.
func TestDocsBridgeSettings(t *testing.T) {
	testkit.DocTable(t, "../docs/action-config.md", "The bridge reads its settings from the environment", settings.Markdown(bridge.Settings), *update)
}
