package bridge

import (
	"os"
	"strconv"
	"strings"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/protocol"
)

// The bridge's own variables; the others are protocol's (FLOW_*), actionconf's
// (MILLRACE_ACTION) and OpenTelemetry's (OTEL_*).
const (
	// EnvMaxHeldBytes is the budget of held output: the emit lines the action's processes
	// staged and the bridge has not yet sent, across every conversation. A size, as the
	// sidecar's FLOW_MAX_HELD_EMIT_BYTES: 64Mi, 67108864.
	EnvMaxHeldBytes = "MILLRACE_BRIDGE_MAX_HELD_BYTES"
	// envMaxHeldMiB is the older name of the same budget, in whole MiB. It still works; with
	// EnvMaxHeldBytes set as well the bridge refuses to start rather than pick one.
	envMaxHeldMiB = "MILLRACE_BRIDGE_MAX_HELD_MIB"
	// envReplayGeneration is the replay generation, a whole number the operator bumps before a
	// deliberate replay (`millrace replay`); see [actionconf.AppendIdempotencyKey].
	envReplayGeneration = "FLOW_REPLAY_GENERATION"
)

// DefaultMaxHeldBytes is the bridge's budget of held output when no variable sets it: 64 MiB,
// as the sidecar's budget of held emits.
const DefaultMaxHeldBytes = 64 << 20

// minMaxHeldBytes is the smallest budget of held output the bridge takes, as the sidecar's.
const minMaxHeldBytes = 1 << 10

// Config is the bridge's deploy configuration: what `millrace bridge` takes from its
// environment (the action config line aside, which comes from its arguments first). Read it
// with [ConfigFromEnv]; a zero Config is not useful, start from what it returns.
type Config struct {
	Port             int    // FLOW_PROCESS_PORT: the port to serve on, on 127.0.0.1
	SidecarPort      int    // FLOW_SIDECAR_PORT: where a line with --state dials the sidecar's State service, for [Options].SidecarPort
	MaxHeldBytes     int64  // the budget of held output, for [Options].Budget
	ReplayGeneration uint64 // FLOW_REPLAY_GENERATION, for [Options].ReplayGeneration
	// ExportSpans is whether the standard OTEL_* variables ask for span export: then
	// [NewTracer] builds the exporter (see [SpanExportFromEnv]).
	ExportSpans bool
	// SchemaRegistry is the client settings of the schema registry (MILLRACE_SCHEMA_REGISTRY_*),
	// for the ports of --decode and --encode ([RegistryFor]); no URL is no registry.
	SchemaRegistry schema.Settings
}

// table is the bridge's settings, one row per variable, in the order -h and the docs list
// them: each row sets its default (defaultConfig), reads its variable (ConfigFromEnv) and
// prints -h (Settings) and docs/action-config.md's table (TestDocsBridgeSettings;
// `go test ./bridge -run TestDocsBridgeSettings -update` rewrites it). A new setting is a
// field of [Config] and a row here.
var table = append(settings.Table[Config]{
	settings.Port(protocol.EnvProcessPort, func(c *Config) *int { return &c.Port }, protocol.ProcessPort, "the port to serve on, on 127.0.0.1"),
	settings.Port(protocol.EnvSidecarPort, func(c *Config) *int { return &c.SidecarPort }, protocol.SidecarPort, "where a line with --state dials the sidecar's State service, on 127.0.0.1 (a stateless line dials nothing)").
		Doc("where a line with `--state` dials the sidecar's State service, on 127.0.0.1, after each `Start` (a stateless line dials nothing)"),
	settings.Custom(EnvMaxHeldBytes, settings.FormatSize(DefaultMaxHeldBytes), "the budget of held output (emit lines staged and not yet sent), a size such as 64Mi or 67108864",
		func(c *Config) { c.MaxHeldBytes = DefaultMaxHeldBytes },
		func(r *settings.Reader, c *Config) { c.MaxHeldBytes = readMaxHeld(r, c.MaxHeldBytes) }).
		Doc("the budget of held output, a size (see *Memory*)"),
	settings.Info[Config](envMaxHeldMiB, "—", "the older name of "+EnvMaxHeldBytes+", in whole MiB (64); still read, and refused together with it").
		Doc("the older name of `MILLRACE_BRIDGE_MAX_HELD_BYTES`, in whole MiB (`64`): still read; both set at once is refused"),
	settings.Uint(envReplayGeneration, func(c *Config) *uint64 { return &c.ReplayGeneration }, 0, "part of every idempotencyKey; bump it by one before a deliberate replay (0 keeps the keys of no replay)").
		Doc("part of every `idempotencyKey`; bump it by one before a deliberate replay so that systems deduplicating on the keys apply the replayed records (0 keeps the keys of no replay)"),
	settings.Info[Config](actionconf.EnvAction, "—", "the action config line, when neither arguments nor --config FILE give one").
		Doc("the action config line, when neither arguments nor `--config FILE` give one"),
	settings.Custom(envOTelEndpoint, "—", "where to export a span per item attempt over OTLP/HTTP (or "+envOTelTracesEndpoint+"); unset, none is exported", nil,
		func(r *settings.Reader, c *Config) { c.ExportSpans = readSpanExport(r) }).
		Doc("where to export a span per item attempt (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); unset, none is exported (see [Tracing](observing.md#tracing))"),
}, registryRows()...)

// defaultConfig is the bridge's defaults: what each variable means unset.
func defaultConfig() Config {
	var c Config
	table.Defaults(&c)
	return c
}

// Settings is every variable the bridge reads, with its default and meaning: the source of
// `millrace bridge -h`.
var Settings = table.Vars()

// ConfigFromEnv reads the bridge's deploy configuration through getenv (os.Getenv in
// production) and checks it: every bad value is listed at once in the error, which matches
// settings.ErrSettings, each line naming the variable and a form it takes. MILLRACE_ACTION is
// read by actionconf.FromEnv, when the arguments give no line.
func ConfigFromEnv(getenv func(string) string) (*Config, error) {
	r := settings.NewReader(getenv)
	c := defaultConfig()
	table.Read(r, &c)
	c.SchemaRegistry = schema.SettingsFromEnv(getenv, os.ReadFile, r.Badf)
	if err := r.Err(); err != nil {
		return nil, err
	}
	return &c, nil
}

// readMaxHeld reads the budget of held output from EnvMaxHeldBytes, or from its older name
// envMaxHeldMiB; both at once is a problem, since they could disagree.
func readMaxHeld(r *settings.Reader, def int64) int64 {
	mib, old := r.Lookup(envMaxHeldMiB)
	if _, ok := r.Lookup(EnvMaxHeldBytes); ok || !old {
		if ok && old {
			r.Badf("%s and %s are both set: set only %s (%s is its older name, in whole MiB)", EnvMaxHeldBytes, envMaxHeldMiB, EnvMaxHeldBytes, envMaxHeldMiB)
		}
		return r.Size(EnvMaxHeldBytes, def, minMaxHeldBytes, 0)
	}
	n, err := strconv.Atoi(mib)
	if err != nil || n < 1 || n > 1<<20 {
		r.Badf("%s=%s is not a whole number of MiB from 1 to 1048576: write e.g. %d, or set %s to a size such as %s", envMaxHeldMiB, mib, def>>20, EnvMaxHeldBytes, settings.FormatSize(def))
		return def
	}
	return int64(n) << 20
}

// SpanExportFromEnv reads the standard OTEL_* variables that decide whether the bridge exports
// spans, through getenv: on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless OTEL_TRACES_EXPORTER=none or
// OTEL_SDK_DISABLED=true. A setting the bridge cannot honour (another exporter, the grpc
// protocol) is an error naming it. ConfigFromEnv reads the same rows; `millrace run`, whose
// bridges take nothing else from the environment, reads only these.
func SpanExportFromEnv(getenv func(string) string) (bool, error) {
	r := settings.NewReader(getenv)
	on := readSpanExport(r)
	return on, r.Err()
}

func readSpanExport(r *settings.Reader) bool {
	if s, _ := r.Lookup(envOTelDisabled); strings.EqualFold(s, "true") {
		return false
	}
	_, ep := r.Lookup(envOTelEndpoint)
	_, tep := r.Lookup(envOTelTracesEndpoint)
	if !ep && !tep {
		return false
	}
	switch exp, _ := r.Lookup(envOTelExporter); exp {
	case "", "otlp":
	case "none":
		return false
	default:
		r.Badf("%s=%s: the bridge exports spans over OTLP only; set it to otlp, or to none to export nothing", envOTelExporter, exp)
		return false
	}
	for _, name := range []string{envOTelTracesProtocol, envOTelProtocol} {
		if p, ok := r.Lookup(name); ok {
			if p != "http/protobuf" {
				r.Badf("%s=%s: the bridge exports spans over OTLP/HTTP with protobuf only; set it to http/protobuf (or leave it unset) and point the endpoint at the collector's HTTP port (4318)", name, p)
				return false
			}
			break // the traces variable wins over the general one
		}
	}
	return true
}
