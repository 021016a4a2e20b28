package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ankka-flow/millrace/sidecar"
)

// runSidecar runs the standard Ankka Flow sidecar, configured by FLOW_* environment variables
// (README, "The sidecar"). `millrace sidecar ready-check` exits 0 iff the readiness file
// exists, for a container probe without a shell.
func runSidecar(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sidecar", "[ready-check]  (configured by FLOW_* environment variables)")
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
		path := e.getenv("FLOW_READINESS_FILE")
		if path == "" {
			path = sidecar.DefaultReadinessFile
		}
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
		if errors.Is(err, sidecar.ErrRefused) {
			return &exitError{code: 1, msg: err.Error()}
		}
		return err
	}
	return nil
}
