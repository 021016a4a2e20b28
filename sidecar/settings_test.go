package sidecar_test

import (
	"flag"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestNewTakesTheTableDefaults: a Config built by hand with only what a deployment must set
// runs with the same defaults as one read from an environment that sets only that: the two
// take them from one table.
func TestNewTakesTheTableDefaults(t *testing.T) {
	fromEnv, err := sidecar.ConfigFromEnv(validEnv(t).get, nil)
	if err != nil {
		t.Fatal(err)
	}
	hand := &sidecar.Config{
		Brokers: fromEnv.Brokers, Pipeline: fromEnv.Pipeline, Streamlet: fromEnv.Streamlet,
		DescriptorPath: fromEnv.DescriptorPath, Deployed: fromEnv.Deployed, ConfigValues: fromEnv.ConfigValues,
		ProcessPort: fromEnv.ProcessPort, SidecarPort: fromEnv.SidecarPort, ReadinessFile: fromEnv.ReadinessFile,
		Outlets: fromEnv.Outlets,
	}
	for _, in := range fromEnv.Inlets {
		hand.Inlets = append(hand.Inlets, sidecar.Inlet{Port: in.Port, Topic: in.Topic})
	}
	run := func(cfg *sidecar.Config) sidecar.Config {
		sc, err := sidecar.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("New(%+v) = %v", cfg, err)
		}
		t.Cleanup(func() { _ = sidecar.CloseUnrun(sc) })
		return sidecar.ConfigOf(sc)
	}
	got, want := run(hand), run(fromEnv)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("New(hand-built) runs with\n%+v\nwant what New(ConfigFromEnv) runs with\n%+v", got, want)
	}
	if got.DiscoveryBackoff != (sidecar.Backoff{Initial: 500 * time.Millisecond, Max: 10 * time.Second}) ||
		got.FailureBackoff != (sidecar.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}) {
		t.Errorf("backoffs = %+v, %+v; want the spec's, 500ms to 10s and 500ms to 30s", got.DiscoveryBackoff, got.FailureBackoff)
	}
}

// TestNewChecksAsConfigFromEnv: a hand-built Config whose batches cannot fit the message limit
// is refused by New as ConfigFromEnv refuses the variables that say so.
func TestNewChecksAsConfigFromEnv(t *testing.T) {
	cfg, err := sidecar.ConfigFromEnv(validEnv(t).get, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxMessageBytes = 1 << 20 // the default batch (1Mi) no longer fits
	if _, err := sidecar.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "does not leave a batch under the message limit") {
		t.Errorf("New(batch over the message limit) = %v; want ErrConfig naming FLOW_INLET_IN_BATCH_MAX_BYTES", err)
	}
}

// update rewrites the docs tables the code generates (TestDocsSidecarSettings).
var update = flag.Bool("update", false, "rewrite docs/sidecar.md's table of settings from the code")

// TestDocsSidecarSettings: docs/sidecar.md's table of the sidecar's environment is the one the
// settings table prints: every variable, its default and its docs text.
func TestDocsSidecarSettings(t *testing.T) {
	testkit.DocTable(t, "../docs/sidecar.md", "It is configured by environment variables only.", settings.Markdown(sidecar.Settings), *update)
}
