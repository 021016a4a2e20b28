package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// runTest is `millrace test action DIR|LINE`: the fixture tests, or with --conformance the
// protocol checks.
func runTest(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "test", "action DIR|LINE [--conformance] [--update] [--json] [--timeout D] [--set KEY=VALUE]… [--schema PORT[.key]=FILE]…")
	conf := fs.Bool("conformance", false, "check the program against the action protocol instead of running the fixtures")
	update := fs.Bool("update", false, "rewrite fixtures/NAME.out.jsonl with the answers the action gives")
	asJSON := fs.Bool("json", false, "print a machine-readable report on stdout")
	timeout := fs.Duration("timeout", 0, "how long an item may take to be answered (default: the action's --timeout; with --conformance the kit waits at most 10s, or this)")
	schemas := schemaFiles{}
	fs.Var(schemas, "schema", "PORT[.key]=FILE: the schema of an encoded port (--decode/--encode) the fixtures' payloads pass through (repeatable; default: the action directory's schemas/PORT.EXT)")
	set := keyValues{}
	fs.Var(set, "set", "KEY=VALUE: a config value for hello instead of the parameter's default (repeatable); fixtures with NAME.config.json still use theirs")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || pos[0] != "action":
		return fs.usageErr("expected: millrace test action DIR|LINE")
	case len(pos) != 2:
		return fs.usageErr(fmt.Sprintf("expected one action directory or config line after 'action', got %d arguments (quote a config line)", len(pos)-1))
	case *conf && *update:
		return fs.usageErr("--update rewrites fixtures; it has no use with --conformance")
	}
	a, err := actiondir.Load(pos[1])
	if err != nil {
		return err
	}
	if len(set) > 0 {
		if err := a.SetConfig(set); err != nil {
			return err
		}
	}
	if a.ConfigErr != nil && (*conf || a.Config == nil) {
		return a.ConfigErr
	}
	if err := a.CheckCommand(); err != nil { // as millrace run names it, before anything starts
		return err
	}
	defer quitOnSecondSignal(ctx, e.stderr,
		"millrace test: stopping the action (Ctrl-C again to quit at once)",
		"millrace test: quit; the action's processes were killed and their work folders removed")()
	defer func() {
		if ctx.Err() != nil && err != nil {
			err = &exitError{code: exitInterrupted, msg: "interrupted: the action's processes were stopped and their work folders removed"}
		}
	}()
	ca := a.Conformance(Version())
	if *timeout > 0 {
		ca.Timeout = *timeout
	}
	if *conf {
		opts := conformance.Options{AnswerWait: *timeout}
		if !*asJSON {
			opts.Progress = e.stdout // each check's line as it completes
		}
		rep, err := conformance.Run(ctx, ca, opts)
		if err != nil {
			return err
		}
		if *asJSON {
			err = writeJSON(e, rep)
		} else {
			err = rep.WriteVerdict(e.stdout)
		}
		if err == nil && !rep.Conformant {
			return &exitError{code: 1}
		}
		return err
	}
	// encoded ports: the fixtures' payloads pass through their schemas, as the bridge passes them
	roundTrip, stopRegistry, err := local.FixtureRoundTrip(a, schemas, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer stopRegistry()
	rep, err := conformance.RunFixtures(ctx, ca, conformance.FixtureOptions{Update: *update, RoundTrip: roundTrip})
	if err != nil {
		return err
	}
	if *asJSON {
		err = writeJSON(e, rep)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err == nil && !rep.Pass {
		return &exitError{code: 1}
	}
	return err
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseInterleaved parses args allowing flags after positional arguments (millrace test action
// DIR --conformance), and returns the positional ones. "--" ends the flags.
func parseInterleaved(fs *flagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

func (kv keyValues) String() string { return "" }

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	kv[k] = v
	return nil
}
