package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// runBridge runs `millrace bridge`: the streamlet process of one action, its config line given
// as the arguments, in a file (--config), or in MILLRACE_ACTION.
func runBridge(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bridge", "[--config FILE] [NAME --in PORT=SCHEMA … -- COMMAND [ARG…]]\n\n"+
		"Serves the action as an Ankka Flow streamlet on 127.0.0.1:$FLOW_PROCESS_PORT (9010).\n"+
		"Exports a span per item attempt over OTLP/HTTP when $OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observing.md, \"Tracing\").\n"+
		"The action config line comes from the arguments, else --config FILE, else $MILLRACE_ACTION:\n"+
		"NAME FLAG… -- COMMAND [ARG…] (docs/action-config.md), its flags:\n"+configLineHelp()+
		"The environment it reads (docs/action-config.md):\n"+settingsHelp(bridge.Settings)+
		"Flags of millrace bridge:")
	config := fs.String("config", "", "read the action config line from `FILE` (an action.conf); the program runs in its folder")
	if err := fs.parse(args); err != nil {
		return err
	}
	var (
		a   *actionconf.Action
		err error
	)
	switch {
	case *config != "" && fs.NArg() > 0:
		return fs.usageErr("give the action config line either as arguments or with --config, not both")
	case *config != "":
		a, err = actionconf.ParseFile(*config)
	case fs.NArg() > 0:
		a, err = actionconf.ParseLine(fs.Args())
	default:
		a, err = actionconf.FromEnv(e.getenv)
	}
	if err != nil {
		if errors.Is(err, actionconf.ErrConfig) || errors.Is(err, actionconf.ErrNoConfig) {
			return fs.usageErr(err.Error())
		}
		return err
	}
	cfg, err := bridge.ConfigFromEnv(e.getenv)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, nil))
	registry, err := bridge.RegistryFor(cfg.SchemaRegistry, a, logger) // nil unless the line has --decode/--encode
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	var tracer *bridge.Tracer
	if cfg.ExportSpans {
		if tracer, err = bridge.NewTracer(ctx, a.Name, Version(), logger); err != nil {
			return &exitError{code: 2, msg: err.Error()}
		}
	}
	return bridge.ListenAndServe(ctx, cfg.Port, bridge.Options{
		Action:  a,
		Version: Version(),
		Logger:  logger,
		Tracer:  tracer,
		Budget:  engine.NewBudget(cfg.MaxHeldBytes),

		ReplayGeneration: cfg.ReplayGeneration,
		Registry:         registry,
		SidecarPort:      cfg.SidecarPort,
	}, nil)
}

// configLineFlags are the flags of the action config line, for `bridge -h`; the defaults are
// those of a line that leaves them out, so they come from bridge's one table of defaults
// (TestBridgeHelp checks the list against the parser's).
var configLineFlags = []struct {
	flag, help string
	def        func(a *actionconf.Action) string
}{
	{"--in PORT=SCHEMA", "an inlet (at least one)", nil},
	{"--out PORT=SCHEMA", "an outlet", nil},
	{"--decode PORT[.key]=FORMAT[:RECORD][,OPTION…]", "the inlet's values (keys) are registry-encoded: FORMAT avro, protobuf or jsonschema; options strategy=topic|record|topic-record, subject=NAME (docs/encoded-topics.md)", func(*actionconf.Action) string { return "plain JSON" }},
	{"--encode PORT[.key]=FORMAT[:RECORD][,OPTION…]", "the outlet's values (keys) are encoded with the subject's latest schema, or version=N, or id=N", func(*actionconf.Action) string { return "plain JSON" }},
	{"--state PORT[,ttl=D][,max-bytes=SIZE]", "the inlet's keys keep state (one word per inlet): ttl at least 1s, max-bytes at most 1Mi (docs/state.md)", func(*actionconf.Action) string { return "no state; max-bytes 64Ki" }},
	{"--param KEY:TYPE[=DEFAULT]", "a config parameter: TYPE string, integer, double, boolean, duration or memory-size; no default: required at deploy time", nil},
	{"--concurrency N", "processes of the program", func(a *actionconf.Action) string { return strconv.Itoa(a.Concurrency) }},
	{"--per-item", "a fresh process for every item", func(*actionconf.Action) string { return "off" }},
	{"--timeout D", "per attempt of an item (0s: none); a timeout is retried", func(a *actionconf.Action) string { return a.Timeout.String() }},
	{"--ready-timeout D", "from hello to ready", func(a *actionconf.Action) string { return a.ReadyTimeout.String() }},
	{"--window N", "deliveries written ahead to one process (0: as the program's ready says)", func(a *actionconf.Action) string { return strconv.Itoa(a.Window) }},
	{"--retries N", "retries of a retryable error, crash or timeout", func(a *actionconf.Action) string { return strconv.Itoa(a.Retries) }},
	{"--dead-letter PORT", "outlet for a record that failed for good (without it the batch fails)", func(*actionconf.Action) string { return "none" }},
	{"--fallback PORT", "outlet for a record the program abstained on", func(*actionconf.Action) string { return "none" }},
	{"--effects external|none", "external: the program changes something outside", func(*actionconf.Action) string { return "none" }},
	{"--description TEXT", "the descriptor's description", nil},
	{"--metrics ADDR", "serve Prometheus metrics at http://ADDR/metrics", func(*actionconf.Action) string { return "off" }},
}

func configLineHelp() string {
	a, err := actionconf.ParseLine([]string{"defaults", "--in", "in=in.v1", "--", "true"})
	if err != nil {
		panic("the minimal config line does not parse: " + err.Error())
	}
	var b strings.Builder
	for _, f := range configLineFlags {
		def := ""
		if f.def != nil {
			def = " (default " + f.def(a) + ")"
		}
		fmt.Fprintf(&b, "  %s\n    \t%s%s\n", f.flag, f.help, def)
	}
	return b.String()
}

// settingsHelp lists a side's table of settings for -h: each variable, its default and meaning.
func settingsHelp(vars []settings.Var) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "  %s (%s)\n    \t%s\n", v.Name, v.Default, v.Meaning)
	}
	return b.String()
}
