package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/action"
	"github.com/ankka-flow/millrace/stdio/engine"
)

type tally struct {
	N int `json:"n"`
}

// stateChild plays a stateful action: "state-count" is a running count per key in the Go SDK
// (payload {"fail":true} stages and then fails); the others are hand-written, each breaking
// one rule of the state check:
//
//   - state-undeclared: declares no state, yet stages one for every keyed item;
//   - state-nostate: writes state messages without "state";
//   - state-late: writes its state message after done;
//   - state-keyless: stages a state for keyless items too;
//   - state-big: answers an item whose state is over 50 KiB with a state of 70 KiB;
//   - state-selfcrash: stages "oops" and exits when an item carries it back;
//   - state-stranger: stages its states for a delivery that was never given.
func stateChild(b string) int {
	if b == "state-count" {
		action.Map(func(ctx action.Context[action.NoConfig], in json.RawMessage) ([]tally, error) {
			var t tally
			if _, err := ctx.State(&t); err != nil {
				return nil, err
			}
			t.N++
			if _, keyed := ctx.Key(); !keyed {
				return []tally{t}, nil
			}
			if err := ctx.SetState(t); err != nil {
				return nil, err
			}
			if strings.Contains(string(in), `"fail":true`) {
				return nil, errors.New("failed after staging")
			}
			return []tally{t}, nil
		})
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	send := func(m stdio.Message) { out.Write(stdio.AppendMessage(nil, &m)) }
	raw := func(s string) { out.WriteString(s + "\n") }
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0
		}
		var m stdio.Message
		if err := stdio.DecodeMessage(line[:len(line)-1], &m); err != nil {
			return 9
		}
		switch m.Type {
		case stdio.TypeHello:
			ready := stdio.Message{Type: stdio.TypeReady, State: json.RawMessage(`true`)}
			if b == "state-undeclared" {
				ready.State = nil
			}
			send(ready)
		case stdio.TypeShutdown:
			out.Flush()
			return 0
		case stdio.TypeItem:
			d, keyed := m.Delivery, m.Key != nil
			state := func(v string) { send(stdio.Message{Type: stdio.TypeState, Delivery: d, State: json.RawMessage(v)}) }
			switch {
			case b == "state-selfcrash" && string(m.State) == `"oops"`:
				os.Exit(3)
			case b == "state-selfcrash" && keyed:
				state(`"oops"`)
			case b == "state-stranger":
				send(stdio.Message{Type: stdio.TypeState, Delivery: "dl-never-given", State: json.RawMessage(`1`)})
			case b == "state-nostate":
				raw(`{"type":"state","delivery":"` + d + `"}`)
			case b == "state-big" && len(m.State) > 50<<10:
				state(`"` + strings.Repeat("b", 70<<10) + `"`)
			case b == "state-keyless" || keyed && b != "state-late" && b != "state-big":
				state(`{"n":1}`)
			}
			send(stdio.Message{Type: stdio.TypeEmit, Delivery: d, Key: m.Key, Payload: m.Payload})
			send(stdio.Message{Type: stdio.TypeDone, Delivery: d})
			if b == "state-late" {
				state(`{"n":1}`)
			}
		}
		if in.Buffered() == 0 {
			out.Flush()
		}
	}
}

// TestStateCheck: an action that keeps state well passes every check, the state one
// included; each broken one fails the state check, and only it.
func TestStateCheck(t *testing.T) {
	for _, tc := range []struct {
		b, want string
	}{
		{"state-count", ""},
		{"state-undeclared", `did not declare "state": true`},
		{"state-nostate", `a state message without "state"`},
		{"state-late", "after it was answered"},
		{"state-keyless", "a state staged for keyless item"},
		{"state-big", "over the 65536 bytes hello names"},
		{"state-selfcrash", "exited with status 3"},
		{"state-stranger", `a state for delivery "dl-never-given", which was never given`},
	} {
		t.Run(tc.b, func(t *testing.T) {
			t.Parallel()
			a := testAction(t, tc.b)
			if tc.b == "state-count" { // the Go SDK declares state only when hello names it
				a.State = map[string]engine.StateLimits{"in": {}}
			}
			rep, err := conformance.Run(context.Background(), a, conformance.Options{Inputs: testInputs(&a)})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			rep.WriteText(&text)
			var state conformance.Check
			for _, c := range rep.Checks {
				if c.Name == conformance.CheckState {
					state = c
				}
			}
			if tc.want == "" {
				if !rep.Conformant || !strings.Contains(state.Detail, "answered: states of every JSON type") {
					t.Fatalf("%s is not conformant, or its state check did not run:\n%s", tc.b, text.String())
				}
				return
			}
			if got := rep.Failed(); !slices.Equal(got, []string{conformance.CheckState}) || !strings.Contains(state.Detail, tc.want) {
				t.Fatalf("%s failed %v; want the state check only, saying %q:\n%s", tc.b, got, tc.want, text.String())
			}
		})
	}
}

// TestStateFixtures: a running count keeps its state across the lines of a fixture file as
// production does; a line's "state" overrides it, a failing line applies nothing, and the
// golden lines hold each item's state after it. The stateful inlet is the line's --state, as
// `millrace test` gives it.
func TestStateFixtures(t *testing.T) {
	a := testAction(t, "state-count")
	a.Action.State = []actionconf.StatePort{{Port: "in", MaxBytes: engine.DefaultStateMaxBytes}}
	writeFile(t, filepath.Join(a.Dir, "fixtures", "count.in.jsonl"), `{"key":"u-7","payload":{}}
{"key":"u-7","payload":{}}
{"key":"u-7","payload":{"fail":true}}
{"key":"u-7","payload":{}}
{"key":"u-9","payload":{},"state":{"n":41}}
{"key":"u-7","payload":{},"state":null}
{"payload":{}}
`)
	ctx := context.Background()
	if rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{Update: true}); err != nil || !rep.Pass {
		t.Fatalf("RunFixtures(--update) = %+v, %v", rep, err)
	}
	golden, err := os.ReadFile(filepath.Join(a.Dir, "fixtures", "count.out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"outcome":"done","emits":[{"key":"u-7","payload":{"n":1}}],"state":{"n":1}}
{"outcome":"done","emits":[{"key":"u-7","payload":{"n":2}}],"state":{"n":2}}
{"outcome":"error","retryable":false,"message":"failed after staging","state":{"n":2}}
{"outcome":"done","emits":[{"key":"u-7","payload":{"n":3}}],"state":{"n":3}}
{"outcome":"done","emits":[{"key":"u-9","payload":{"n":42}}],"state":{"n":42}}
{"outcome":"done","emits":[{"key":"u-7","payload":{"n":1}}],"state":{"n":1}}
{"outcome":"done","emits":[{"payload":{"n":1}}],"state":null}
`
	if string(golden) != want {
		t.Fatalf("golden file:\n%s\nwant:\n%s", golden, want)
	}
	if rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{}); err != nil || !rep.Pass {
		t.Fatalf("RunFixtures against its own golden file = %+v, %v", rep, err)
	}
	writeFile(t, filepath.Join(a.Dir, "fixtures", "count.out.jsonl"), strings.Replace(want, `"state":{"n":3}`, `"state":{"n":4}`, 1))
	rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{})
	if err != nil || rep.Pass || len(rep.Files[0].Failures) != 1 || !slices.Contains(rep.Files[0].Failures[0].Problems, "state.n: want 4, got 3") {
		t.Fatalf("RunFixtures with a wrong golden state = %+v, %v; want one failure naming state.n", rep, err)
	}
}
