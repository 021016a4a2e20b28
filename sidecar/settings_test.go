package sidecar_test

import (
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

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

// TestDocsSidecarSettings: docs/sidecar.md's table of the sidecar's environment is
// sidecar.Settings: every variable, and each with the same default.
func TestDocsSidecarSettings(t *testing.T) {
	readme, err := os.ReadFile("../docs/sidecar.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "It is configured by environment variables only.")
	if !ok {
		t.Fatal("docs/sidecar.md: no table of the sidecar's environment (\"It is configured by environment variables only.\")")
	}
	section, _, _ = strings.Cut(section, "\n\n#")
	defaults := map[string]string{} // the page's
	row := regexp.MustCompile("(?m)^\\| ((?:`[A-Z_<>]+`(?:, )?)+) \\| ([^|]+) \\|")
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		def := strings.ReplaceAll(strings.TrimSpace(m[2]), "`", "")
		for _, name := range strings.Split(m[1], ", ") {
			defaults[strings.Trim(name, "`")] = def
		}
	}
	listed := map[string]bool{}
	for _, v := range sidecar.Settings {
		listed[v.Name] = true
		if def, ok := defaults[v.Name]; !ok {
			t.Errorf("docs/sidecar.md: the sidecar's table has no row for %s (default %s)", v.Name, v.Default)
		} else if def != v.Default {
			t.Errorf("docs/sidecar.md: the default of %s is %q; sidecar.Settings says %q", v.Name, def, v.Default)
		}
	}
	for name := range defaults {
		if !listed[name] {
			t.Errorf("docs/sidecar.md: the sidecar's table has %s, which sidecar.Settings does not list", name)
		}
	}
}
