package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
)

func TestMain(m *testing.M) {
	testkit.Main(m, child, nil)
}

// testAction is the test binary playing behaviour b.
func testAction(t *testing.T, b string) conformance.Action {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return conformance.Action{
		Action: actionconf.Action{
			Name: b, Command: []string{exe}, Dir: t.TempDir(),
			Inlets: []actionconf.Port{{Name: "in"}}, Outlets: []actionconf.Port{{Name: "out"}},
			// generous bounds: a race-built child on a loaded machine is slow, and no test waits
			// for them to pass except the behaviours built to miss them (which shorten them)
			ReadyTimeout: 30 * time.Second, Timeout: 30 * time.Second,
		},
		Version: "1.0.0", Env: []string{envChild + "=" + b, "GORACE=atexit_sleep_ms=0"},
		Config: json.RawMessage(`{"n":2}`), ShutdownGrace: 30 * time.Second,
	}
}

func testInputs(a *conformance.Action) []conformance.Input {
	k1, k2 := "k1", "k2"
	mk := func(off int64, key *string, payload string) conformance.Input {
		it := stdio.Item{ID: "fixtures/0/" + string(rune('0'+off)), Key: key, Payload: json.RawMessage(payload), Inlet: "in", Topic: "fixtures", Offset: off, Run: "t", IdempotencyKey: "ik", Attempt: 1}
		return conformance.Input{Item: it, Source: "test item " + string(rune('1'+off))}
	}
	return []conformance.Input{mk(0, &k1, `{"id":1,"text":"hello"}`), mk(1, &k2, `{"id":2,"skip":true}`), mk(2, nil, `{"id":3}`)}
}

// TestBehaviours runs the kit on every behaviour: the good ones pass every check, and each
// broken one fails exactly the check named for its fault.
func TestBehaviours(t *testing.T) {
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			a := testAction(t, b.name)
			opts := conformance.Options{Inputs: testInputs(&a)}
			switch b.name {
			case "slow-ready":
				a.ReadyTimeout = 300 * time.Millisecond
			case "skip-answer":
				a.Timeout = 5 * time.Second // once, in the main conversation; long enough for 1 MiB under load
			case "long-stderr":
				opts.StderrLineMax = 64 << 10
			case "never-answers":
				opts.AnswerWait = time.Second
			case "mute":
				a.ReadyTimeout, opts.AnswerWait = 300*time.Millisecond, time.Second
			case "ignore-shutdown":
				a.ShutdownGrace = time.Second
			case "truncated":
				opts.AnswerWait = 30 * time.Second // the verdict must come from the line, not the wait
			case "batch-unread":
				opts.AnswerWait = 2 * time.Second
			case "batch-good", "batch-small-buffer", "concurrent-batch":
				// an envelope of 8 MiB through a race-built child on a loaded machine takes seconds
				opts.AnswerWait = 30 * time.Second
			}
			// a bound for a hang only: the kit's own verdicts come within seconds
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := conformance.Run(ctx, a, opts)
			if err != nil {
				t.Fatalf("Run(%s) = %v", b.name, err)
			}
			var text bytes.Buffer
			_ = rep.WriteText(&text)
			var want []string
			if b.catch != "" {
				want = []string{b.catch}
			}
			if got := rep.Failed(); !slices.Equal(got, want) {
				t.Fatalf("Run(%s: %s) failed %q; want %q\n%s", b.name, b.what, got, want, text.String())
			}
			notRun := rep.NotRun()
			if len(notRun) > 0 && b.skips == nil {
				t.Fatalf("Run(%s) could not judge %q\n%s", b.name, notRun, text.String())
			}
			for _, name := range b.skips {
				if !slices.Contains(notRun, name) {
					t.Fatalf("Run(%s) judged %s, which its fault keeps from being seen\n%s", b.name, name, text.String())
				}
			}
			for _, name := range notRun { // each fault charged once: the rest say what kept them
				if line := "SKIP " + name + ": " + b.catch + " failed\n"; !strings.Contains(text.String(), line) {
					t.Fatalf("Run(%s) has no line %q\n%s", b.name, line, text.String())
				}
			}
			if rep.Conformant != (b.catch == "") {
				t.Fatalf("Run(%s).Conformant = %v; want %v", b.name, rep.Conformant, b.catch == "")
			}
			last := strings.TrimSpace(text.String())
			last = last[strings.LastIndexByte(last, '\n')+1:]
			if wantLast := b.name + ": conformant"; b.catch == "" && last != wantLast {
				t.Fatalf("last line = %q; want %q", last, wantLast)
			}
			if len(rep.Checks) != len(conformance.Checks) {
				t.Fatalf("Run(%s) gave %d checks; want %d", b.name, len(rep.Checks), len(conformance.Checks))
			}
			t.Logf("%s", text.String())
		})
	}
}

// TestPerItem: with --per-item every item gets a fresh process, each shut down after its item.
func TestPerItem(t *testing.T) {
	a := testAction(t, "good")
	a.PerItem = true
	rep, err := conformance.Run(context.Background(), a, conformance.Options{Inputs: testInputs(&a)})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !rep.Conformant || !strings.Contains(text.String(), "burst: does not apply with --per-item") {
		t.Fatalf("Run(per-item) =\n%s", text.String())
	}
	// main (3) + unknown keys (3) + config (3) + non-ascii (2) + large: one process each
	if !strings.Contains(text.String(), "PASS shutdown: 12 processes exited with status 0") {
		t.Fatalf("Run(per-item) did not shut 12 processes down:\n%s", text.String())
	}
}

// TestDeadLetterOutlet: with a --dead-letter port beside one outlet, an emit that names no
// outlet goes to that one, as in the bridge: the action is conformant.
func TestDeadLetterOutlet(t *testing.T) {
	a := testAction(t, "good")
	a.Outlets = append(a.Outlets, actionconf.Port{Name: "rejected"})
	a.DeadLetter = "rejected"
	rep, err := conformance.Run(context.Background(), a, conformance.Options{Inputs: testInputs(&a)})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !rep.Conformant {
		t.Fatalf("Run(good, --dead-letter rejected) =\n%s", text.String())
	}
}
