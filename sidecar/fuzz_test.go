package sidecar_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/sidecar"
)

// FuzzConfigFromEnv feeds arbitrary text to the variables the sidecar parses itself: it never
// panics, a refusal is always a *ConfigError listing problems, and an accepted configuration
// binds every declared port to a non-empty topic with positive limits.
func FuzzConfigFromEnv(f *testing.F) {
	f.Add("in=orders", "out=shouts", `{"min-rooms": 2}`, "1Mi", "100")
	f.Add("in=a,in=b", "out", `{"min-rooms": true}`, "0", "-1")
	f.Add(" in = x ", "out=y,extra=z", `[]`, "4Gi", "1e3")
	descriptor := writeDescriptor(f, testSpec())
	f.Fuzz(func(t *testing.T, inlets, outlets, config, maxBytes, maxRecords string) {
		e := env{
			"FLOW_BROKERS": "k:9092", "FLOW_PIPELINE": "p", "FLOW_STREAMLET": "s", "FLOW_DESCRIPTOR": descriptor,
			"FLOW_INLETS": inlets, "FLOW_OUTLETS": outlets, "FLOW_CONFIG": config,
			"FLOW_INLET_IN_BATCH_MAX_BYTES": maxBytes, "FLOW_INLET_IN_BATCH_MAX_RECORDS": maxRecords,
		}
		cfg, err := sidecar.ConfigFromEnv(e.get, nil)
		if err != nil {
			var ce *sidecar.ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("ConfigFromEnv() = %v; want a *ConfigError with problems", err)
			}
			return
		}
		if len(cfg.Inlets) != 1 || strings.TrimSpace(cfg.Inlets[0].Topic) == "" || cfg.Inlets[0].MaxBytes < 1 || cfg.Inlets[0].MaxRecords < 1 {
			t.Fatalf("ConfigFromEnv() inlets = %+v; want in bound to a topic with positive limits", cfg.Inlets)
		}
		if cfg.Inlets[0].MaxBytes > cfg.MaxMessageBytes {
			t.Fatalf("batch max bytes %d over the message limit %d", cfg.Inlets[0].MaxBytes, cfg.MaxMessageBytes)
		}
		if len(cfg.Outlets) != 1 || cfg.Outlets[0].Topic == "" {
			t.Fatalf("ConfigFromEnv() outlets = %+v; want out bound", cfg.Outlets)
		}
	})
}
