package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
)

// runInit is `millrace init action NAME --lang LANG [--state WORD]`: a new action directory
// that passes its own conformance and fixture tests (with --state: keeping state per key).
func runInit(ctx context.Context, e *env, args []string) error {
	var langs []string
	for _, l := range actiondir.Langs {
		langs = append(langs, l.Name)
	}
	fs := newFlagSet(e, "init", "action NAME --lang "+strings.Join(langs, "|")+" [--state PORT[,ttl=D][,max-bytes=SIZE]] [--source DIR]")
	lang := fs.String("lang", "", "the language of the program: "+strings.Join(langs, ", ")+" (python, node, ruby: on the SDK, vendored; raw: Python with no SDK, the protocol written out)")
	source := fs.String("source", "", "go: the millrace checkout the SDK comes from, for an action outside it (default $"+actiondir.EnvSource+", else the checkout holding the current directory)")
	state := fs.String("state", "", "PORT[,ttl=D][,max-bytes=SIZE]: the action keeps state per key of its inlet, named PORT; the line carries --state with this word, and the program shows reading and staging the key's state")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || pos[0] != "action":
		return fs.usageErr("expected: millrace init action NAME --lang LANG")
	case len(pos) != 2:
		return fs.usageErr(fmt.Sprintf("expected one NAME after 'action', got %d arguments", len(pos)-1))
	case *lang == "":
		return fs.usageErr("--lang is required: one of " + strings.Join(langs, ", "))
	}
	dir := pos[1]
	if err := actiondir.Init(ctx, dir, *lang, actiondir.InitOptions{Source: *source, Getenv: e.getenv, State: *state}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s (%s). Next:\n  millrace test action %s --conformance\n  millrace test action %s\n  millrace run %s --input %s/sample.jsonl\nThe action protocol: %s\n", dir, *lang, dir, dir, dir, dir, actiondir.ProtocolDoc(e.getenv))
	return nil
}
