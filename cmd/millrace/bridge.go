package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// configLineHelp lists the config line's flags for -h, from the parser's own rows
// (actionconf.Flags), with the default of a line that leaves each out.
func configLineHelp() string {
	var b strings.Builder
	for _, f := range actionconf.Flags() {
		def := ""
		if f.Default != "" {
			def = " (default " + f.Default + ")"
		}
		fmt.Fprintf(&b, "  %s\n    \t%s%s\n", f.Usage, f.Help, def)
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
