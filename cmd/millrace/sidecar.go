package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/sidecar"
)

// runSidecar runs the standard Ankka Flow sidecar, configured by FLOW_* environment variables
// (docs/sidecar.md). `millrace sidecar ready-check` exits 0 iff the readiness file
// exists, for a container probe without a shell.
func runSidecar(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sidecar", "[ready-check] [-log-level LEVEL]\n\n"+
		"Runs the standard Ankka Flow sidecar: Kafka to the streamlet process on\n"+
		"127.0.0.1:$FLOW_PROCESS_PORT and back. `ready-check` exits 0 once $FLOW_READINESS_FILE exists.\n"+
		"The environment it reads (docs/sidecar.md):\n"+sidecarEnvHelp())
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fs.usageErr(fmt.Sprintf("-log-level %q is not debug, info, warn or error", *level))
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "ready-check":
		path := sidecar.ReadinessFileFromEnv(e.getenv)
		if !sidecar.Ready(path) {
			return &exitError{code: 1, msg: "not ready: " + path + " does not exist"}
		}
		return nil
	case fs.NArg() > 0:
		return fs.usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}

	logger := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: lv})).With("pipeline", e.getenv("FLOW_PIPELINE"), "streamlet", e.getenv("FLOW_STREAMLET"))
	cfg, err := sidecar.ConfigFromEnv(e.getenv, nil)
	if err != nil {
		return err
	}
	cfg.SidecarVersion = Version()
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		return err
	}
	if err := sc.Run(ctx); err != nil {
		if errors.Is(err, sidecar.ErrRefused) || errors.Is(err, kafkaconn.ErrRefused) {
			return &exitError{code: 1, msg: err.Error()}
		}
		return err
	}
	return nil
}

func sidecarEnvHelp() string { return settingsHelp(sidecar.Settings) + "Flags:" }
