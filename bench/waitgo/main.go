// Command waitgo is the Go action of BenchmarkWaiting: a call per record that takes the
// milliseconds of its first argument (a stand-in for an HTTP API or a database: a timer,
// cancelled with the delivery), then the payload out again with its key, on the Go SDK at
// its concurrent defaults (action.Concurrency(action.ConcurrentWindow)).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ankka-flow/millrace/stdio/action"
)

func main() {
	ms, err := strconv.Atoi(os.Args[len(os.Args)-1])
	if err != nil || len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: waitgo CALL_MS")
		os.Exit(2)
	}
	call := time.Duration(ms) * time.Millisecond
	action.Map(func(ctx action.Context[action.NoConfig], in json.RawMessage) ([]json.RawMessage, error) {
		t := time.NewTimer(call)
		defer t.Stop()
		select {
		case <-t.C:
			return []json.RawMessage{in}, nil
		case <-ctx.Done():
			return nil, action.Retryable(ctx.Err())
		}
	}, action.Concurrency(action.ConcurrentWindow))
}
