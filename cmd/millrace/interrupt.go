package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ankka-flow/millrace/stdio/engine"
)

// exitInterrupted is the exit status of a command ended by Ctrl-C or SIGTERM (128 + SIGINT).
const exitInterrupted = 130

// quitOnSecondSignal watches for a second interrupt: once ctx ended (the first Ctrl-C or
// SIGTERM, which the command answers by stopping cleanly) it prints stopping, and a second
// Ctrl-C or SIGTERM prints quitting, kills the process group of every child the engine
// started and removes every work folder (engine.Teardown), then exits 130 at once: nothing
// of the command remains. Call the returned function when the command returns.
func quitOnSecondSignal(ctx context.Context, w io.Writer, stopping, quitting string) (release func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		if stopping != "" {
			fmt.Fprintln(w, stopping)
		}
		select {
		case <-again:
			fmt.Fprintln(w, quitting)
			engine.Teardown()
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return func() { close(done) }
}
