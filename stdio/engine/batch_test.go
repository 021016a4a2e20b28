package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// arrival is what a batch child says, in each emit, of how its item came.
type arrival struct {
	In   string          `json:"in"`
	N    int             `json:"n"`
	Len  int             `json:"len"`
	Size int             `json:"size"`
	P    json.RawMessage `json:"p"`
}

func arrivalOf(t *testing.T, r engine.Result) arrival {
	t.Helper()
	if r.Outcome != engine.Done || len(r.Emits) != 1 {
		t.Fatalf("result = %v, %d emits (%v); want done with one emit", r.Outcome, len(r.Emits), r.Err)
	}
	var a arrival
	if err := json.Unmarshal(r.Emits[0].Payload, &a); err != nil {
		t.Fatalf("emit %s: %v", r.Emits[0].Payload, err)
	}
	return a
}

// gated starts a batch child and fills its window with four gates it holds until open is
// called: items submitted meanwhile wait in the queue, and go out together once the gates
// are answered. It returns the gates' results.
func gated(t *testing.T) (p *engine.Pool, open func(), gates []<-chan engine.Result) {
	marker := filepath.Join(t.TempDir(), "open")
	p = start(t, config("batch", func(c *engine.Config) { c.Env = append(c.Env, "STDIO_TEST_MARKER="+marker) }))
	if p.Window() != 4 {
		t.Fatalf("Window() = %d; want the 4 the batch child declares", p.Window())
	}
	for i := range 4 {
		gates = append(gates, submit(t, p, item("gate"+strconv.Itoa(i), `"gate"`)))
	}
	return p, func() {
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}, gates
}

// submitAll submits items in one SubmitBatch and returns their results' channels.
func submitAll(t *testing.T, p *engine.Pool, items []stdio.Item) []chan engine.Result {
	t.Helper()
	chans := make([]chan engine.Result, len(items))
	for i := range chans {
		chans[i] = make(chan engine.Result, 2)
	}
	if errs := p.SubmitBatch(context.Background(), items, func(i int, r engine.Result) { chans[i] <- r }); errs != nil {
		t.Fatalf("SubmitBatch = %v", errs)
	}
	return chans
}

// TestBatch: to an action that declared batch the engine writes the items ready together as
// one envelope, reads its answers in envelopes and on single lines mixed in, and each record
// keeps its own result.
func TestBatch(t *testing.T) {
	p, open, gates := gated(t)
	items := []stdio.Item{keyed("s", "single", `"s"`)}
	for i := range 7 {
		items = append(items, keyed(strconv.Itoa(i), "k"+strconv.Itoa(i), strconv.Itoa(i)))
	}
	chans := submitAll(t, p, items)
	open()
	for i, ch := range gates {
		if a := arrivalOf(t, wait(t, ch)); a.In != "gate" {
			t.Errorf("gate %d answered %+v; want a gate", i, a)
		}
	}
	enveloped := 0
	for i, ch := range chans {
		r := wait(t, ch)
		a := arrivalOf(t, r)
		if string(a.P) != string(items[i].Payload) || r.Attempts != 1 || *r.Emits[0].Key != *items[i].Key {
			t.Errorf("item %d = %+v after %d attempts, key %v; want its payload %s and key back at once", i, a, r.Attempts, r.Emits[0].Key, items[i].Payload)
		}
		if a.In == "batch" && a.N >= 2 {
			enveloped++
		}
	}
	// Once the gates are answered, at least half the window is free and all eight are queued:
	// the first write holds two items or more.
	if enveloped < 2 {
		t.Errorf("%d items came in envelopes; want those of the first write at least (2)", enveloped)
	}
}

// TestBatchAtLineLimit: the engine packs an envelope up to MaxLineBytes exactly and writes
// items that would pass it on lines of their own; an answer envelope of exactly MaxLineBytes
// is read, one a byte longer is a line too long.
func TestBatchAtLineLimit(t *testing.T) {
	// Two items whose envelope is the limit, or one byte over; they are the fifth and sixth
	// deliveries of the pool (after the gates), whose ids are as long as this one.
	const delivery = "dl_000000000000_5"
	lineOf := func(it stdio.Item) int {
		it.Delivery, it.Attempt = delivery, 1
		return len(stdio.AppendItem(nil, &it)) - 1
	}
	for _, over := range []int{0, 1} {
		t.Run("over"+strconv.Itoa(over), func(t *testing.T) {
			p, open, gates := gated(t)
			b1, b2 := item("big1", `""`), item("big2", `""`)
			room := stdio.MaxLineBytes - stdio.BatchOverhead - 1 - lineOf(b1) - lineOf(b2)
			b1.Payload = []byte(`"` + strings.Repeat("a", room/2) + `"`)
			b2.Payload = []byte(`"` + strings.Repeat("b", room-room/2+over) + `"`)
			chans := submitAll(t, p, []stdio.Item{b1, b2})
			open()
			for _, ch := range gates {
				arrivalOf(t, wait(t, ch))
			}
			for i, ch := range chans {
				a := arrivalOf(t, wait(t, ch))
				want := arrival{In: "batch", N: 2, Len: stdio.MaxLineBytes, Size: len([]stdio.Item{b1, b2}[i].Payload)}
				if over == 1 {
					want = arrival{In: "line", N: 1, Len: lineOf([]stdio.Item{b1, b2}[i]), Size: want.Size}
				}
				if a.In != want.In || a.N != want.N || a.Len != want.Len || a.Size != want.Size {
					t.Errorf("big item %d came as %+v; want %+v", i+1, a, want)
				}
			}
		})
	}

	p := start(t, config("batch"))
	r := run(t, p, item("at", `"at-limit"`))
	if r.Outcome != engine.Done || len(r.Emits) != 1 || len(r.Emits[0].Payload) < stdio.MaxLineBytes-200 {
		t.Fatalf("an answer envelope of MaxLineBytes: %v, %d emits (%v); want done with its 8 MiB emit", r.Outcome, len(r.Emits), r.Err)
	}
	r = run(t, p, item("over", `"over-limit"`))
	if r.Outcome != engine.Failed || !errors.Is(r.Err, stdio.ErrLineTooLong) {
		t.Fatalf("an answer envelope a byte over MaxLineBytes: %v (%v); want failed, line too long", r.Outcome, r.Err)
	}
}

// TestBatchMalformed: each kind of malformed answer envelope is a protocol violation named
// as such; the messages before the fault were applied (the metric of each attempt is kept).
func TestBatchMalformed(t *testing.T) {
	want := map[string]string{
		"missing":     `"messages" is missing`,
		"notarray":    `"messages" is not an array`,
		"notobject":   `message 2 is not a JSON object`,
		"unknowntype": `unknown message type "launch"`,
		"notype":      `without "type"`,
		"nested":      `envelopes do not nest`,
		"hello":       `a "hello" message, which an envelope from the action cannot hold`,
		"ready":       `a "ready" message, which an envelope from the action cannot hold`,
		"shutdown":    `a "shutdown" message, which an envelope from the action cannot hold`,
		"item":        `a "item" message, which an envelope from the action cannot hold`,
		"unclosed":    `message 2 is not a complete JSON object`,
	}
	p := start(t, config("batchbad", func(c *engine.Config) { c.Retries = 1 }))
	for kind, text := range want {
		t.Run(kind, func(t *testing.T) {
			r := run(t, p, item(kind, strconv.Quote(kind)))
			if r.Outcome != engine.Failed || r.Attempts != 2 || len(r.Emits) != 0 {
				t.Fatalf("result = %v after %d attempts (%v); want failed after 2", r.Outcome, r.Attempts, r.Err)
			}
			if !errors.Is(r.Err, stdio.ErrProtocol) || !errors.Is(r.Err, stdio.ErrMalformedBatch) || !strings.Contains(r.Err.Error(), "a malformed batch envelope: ") || !strings.Contains(r.Err.Error(), text) {
				t.Errorf("err = %v; want a malformed batch envelope, %q", r.Err, text)
			}
			metrics := 2 // one before the fault on each attempt
			if kind == "missing" || kind == "notarray" {
				metrics = 0
			}
			if len(r.Metrics) != metrics {
				t.Errorf("metrics = %d; want %d (the messages before the fault applied)", len(r.Metrics), metrics)
			}
		})
	}
}

// TestBatchUndeclared: an envelope from an action that did not declare batch is a protocol
// violation telling it to declare it.
func TestBatchUndeclared(t *testing.T) {
	p := start(t, config("batchundeclared"))
	r := run(t, p, item("u", `1`))
	if r.Outcome != engine.Failed || !errors.Is(r.Err, stdio.ErrProtocol) || errors.Is(r.Err, stdio.ErrMalformedBatch) ||
		!strings.Contains(r.Err.Error(), `did not declare "batch": true in its ready line`) {
		t.Fatalf("result = %v (%v); want failed: declare \"batch\": true", r.Outcome, r.Err)
	}
}

// TestBatchCrash: a process that dies in the middle of writing an envelope fails every
// delivery of its window, each retryably; their retries succeed.
func TestBatchCrash(t *testing.T) {
	var mu sync.Mutex
	var failed []engine.AttemptInfo
	p := start(t, config("batchcrash", func(c *engine.Config) {
		c.Retries = 1
		c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
			if a.Outcome == engine.Failed {
				mu.Lock()
				failed = append(failed, engine.AttemptInfo{Retry: a.Retry, Err: a.Err})
				mu.Unlock()
			}
		}
	}))
	var items []stdio.Item
	for i := range 4 {
		items = append(items, item(strconv.Itoa(i), strconv.Itoa(i)))
	}
	for i, ch := range submitAll(t, p, items) {
		r := wait(t, ch)
		if a := arrivalOf(t, r); r.Attempts != 2 || string(a.P) != string(items[i].Payload) {
			t.Errorf("item %d = %+v after %d attempts; want done on attempt 2", i, a, r.Attempts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 4 {
		t.Fatalf("failed attempts = %d; want the 4 of the window", len(failed))
	}
	for _, a := range failed {
		if !a.Retry || !errors.Is(a.Err, stdio.ErrProtocol) || !strings.Contains(a.Err.Error(), "crash in the middle of an envelope") {
			t.Errorf("failed attempt: retry %v, %v; want retried, the half line's violation quoting stderr", a.Retry, a.Err)
		}
	}
}

// TestBatchNotDeclared: an action that declares a window and no batch gets every item on a
// line of its own (the child exits at an envelope), however many are written together.
func TestBatchNotDeclared(t *testing.T) {
	p := start(t, config("echo", func(c *engine.Config) { c.Window = 16 }))
	var items []stdio.Item
	for i := range 64 {
		items = append(items, item(strconv.Itoa(i), strconv.Itoa(i)))
	}
	for i, ch := range submitAll(t, p, items) {
		if r := wait(t, ch); r.Outcome != engine.Done || r.Attempts != 1 || string(r.Emits[0].Payload) != strconv.Itoa(i) {
			t.Fatalf("item %d = %v after %d attempts (%v); want done at once", i, r.Outcome, r.Attempts, r.Err)
		}
	}
}
