package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/ankka-flow/millrace/bridge"
)

// runBridge runs `millrace bridge`: the streamlet process of one action, its config line given
// as the arguments, in a file (--config), or in MILLRACE_ACTION.
func runBridge(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bridge", "[--config FILE] [NAME --in PORT=SCHEMA … -- COMMAND [ARG…]]\n\n"+
		"Serves the action as an Ankka Flow streamlet on 127.0.0.1:$FLOW_PROCESS_PORT (9010).\n"+
		"The action config line comes from the arguments, else --config FILE, else $MILLRACE_ACTION.\n"+
		"See the README, \"The action config line\".")
	config := fs.String("config", "", "read the action config line from `FILE` (an action.conf); the program runs in its folder")
	if err := fs.parse(args); err != nil {
		return err
	}
	var (
		a   *bridge.Action
		err error
	)
	switch {
	case *config != "" && fs.NArg() > 0:
		return fs.usageErr("give the action config line either as arguments or with --config, not both")
	case *config != "":
		a, err = bridge.ParseFile(*config)
	case fs.NArg() > 0:
		a, err = bridge.ParseLine(fs.Args())
	default:
		a, err = bridge.FromEnv(e.getenv)
	}
	if err != nil {
		if errors.Is(err, bridge.ErrConfig) || errors.Is(err, bridge.ErrNoConfig) {
			return fs.usageErr(err.Error())
		}
		return err
	}
	port, err := bridge.PortFromEnv(e.getenv)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, nil))
	tracer, err := bridge.NewTracer(ctx, e.getenv, a.Name, Version(), logger) // nil unless OTEL_* ask for spans
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	return bridge.ListenAndServe(ctx, port, bridge.Options{
		Action:  a,
		Version: Version(),
		Logger:  logger,
		Tracer:  tracer,
	}, nil)
}
