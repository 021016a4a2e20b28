// Command millrace runs a script in any language as an Ankka Flow streamlet, and ships the
// standard sidecar and the tools an action author needs. main only wires: it picks the
// subcommand, builds the logger and calls the packages that do the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: its name, a one-line summary for `millrace help`, and run,
// which parses its own flags from args.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a subcommand may touch of the outside world; tests give their own.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// commands lists every subcommand in the order `millrace help` shows them.
var commands = []*command{
	{name: "version", summary: "print the version of millrace and of the protocol it speaks", run: runVersion},
	{name: "bridge", summary: "serve an action (any program speaking JSON lines) as an Ankka Flow streamlet process", run: runBridge},
	{name: "sidecar", summary: "run the standard Ankka Flow sidecar (Kafka ⇄ the streamlet process), configured by FLOW_* variables", run: runSidecar},
	{name: "test", summary: "test an action: its fixtures, or with --conformance the action protocol", run: runTest},
	{name: "init", summary: "write a new action directory (python, node, ruby, go, bash or raw) that passes its own tests", run: runInit},
	{name: "describe", summary: "print the canonical descriptor.json of an action directory or config line", run: runDescribe},
	{name: "run", summary: "run an action or a pipeline on a local Kafka broker: input lines in, output records out", run: runRun},
	{name: "replay", summary: "rewind a stopped streamlet's consumer group, or send dead letters back to their topics", run: runReplay},
}

// errUsage marks a mistake on the command line: the caller prints usage and exits 2.
var errUsage = errors.New("usage")

// usageError is a command-line mistake: one line naming what was wrong, and the usage of
// the command it was made on.
type usageError struct {
	msg   string
	usage func(io.Writer)
}

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == errUsage }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// dispatch runs the subcommand named by args[0] and returns the process's exit status:
// 0 on success, 2 for a command-line mistake (with the usage), 1 for any other failure.
func dispatch(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		printUsage(e.stdout)
		return 0
	case "help":
		return help(e, args[1:])
	case "-version", "--version":
		name = "version" // as most tools answer it; further arguments go to version, which refuses them
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(e.stderr, "millrace: unknown command %q\n\n", name)
		printUsage(e.stderr)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "millrace %s: %v\n", cmd.name, err)
		var u *usageError
		if errors.As(err, &u) && u.usage != nil {
			u.usage(e.stderr)
		}
		return 2
	default:
		var exit *exitError
		if errors.As(err, &exit) {
			if exit.msg != "" {
				fmt.Fprintf(e.stderr, "millrace %s: %s\n", cmd.name, exit.msg)
			}
			return exit.code
		}
		fmt.Fprintf(e.stderr, "millrace %s: %v\n", cmd.name, err)
		return 1
	}
}

// exitError asks dispatch for a given exit status, with an optional last message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "millrace runs a script in any language as an Ankka Flow streamlet.\n\nUsage:\n  millrace <command> [arguments]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "print this help, or the usage of one command")
	fmt.Fprint(w, "\nRun 'millrace <command> -h' for the usage of one command.\n")
}

// flagSet is one subcommand's flags with its synopsis, for the usage it prints.
type flagSet struct {
	*flag.FlagSet
	e        *env
	synopsis string
}

// newFlagSet returns the flag set of one subcommand; synopsis follows the command's name in
// its usage line ("DIR [--input FILE|-]").
func newFlagSet(e *env, name, synopsis string) *flagSet {
	fs := flag.NewFlagSet("millrace "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, e: e, synopsis: synopsis}
}

// printUsage writes the usage line and the flags' defaults to w.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n", fs.Name(), fs.synopsis)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parse parses args. -h prints the usage on stdout and returns flag.ErrHelp, which dispatch
// treats as success; a mistake prints the usage on stderr and returns a usage error.
func (fs *flagSet) parse(args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.printUsage(fs.e.stdout)
		return flag.ErrHelp
	default:
		return fs.usageErr(err.Error())
	}
}

// usageErr returns a usage error for a mistake found after parsing (a missing or extra
// argument); dispatch prints it with the usage and exits 2.
func (fs *flagSet) usageErr(msg string) error {
	return &usageError{msg: msg, usage: fs.printUsage}
}

// help prints the usage of millrace, or of the command named in args.
func help(e *env, args []string) int {
	switch {
	case len(args) == 0, len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		printUsage(e.stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintf(e.stderr, "millrace help: expected at most one command, got %q\n\n", args)
	case lookup(args[0]) == nil:
		fmt.Fprintf(e.stderr, "millrace help: unknown command %q\n\n", args[0])
	default:
		return dispatch(context.Background(), e, []string{args[0], "-h"})
	}
	printUsage(e.stderr)
	return 2
}
