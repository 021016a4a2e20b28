package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// runStateChild plays a stateful action: "state" declares a window of 64, envelopes and
// "state": true; "stateundeclared" declares none of them, "statebadready" a "state" that is no
// boolean. Each item is a running count: it
// emits {"saw": the item's state or null} and stages {"n": n+1}. Every item of a line is
// answered in one write, the last first. A payload {"do": …} changes that on attempt 1 after
// staging {"n":-1}: "error" answers a retryable error, "crash" exits, "hang" never answers,
// "violate" writes a line that is no JSON; on every attempt "state" stages the payload's
// "state" as given, "nostate" writes a state message without one, "delete" stages null.
func runStateChild(c *child, mode string) int {
	if hello, ok := c.next(); !ok || hello.Type != stdio.TypeHello {
		return 8
	}
	switch mode {
	case "stateundeclared":
		c.send(stdio.Message{Type: stdio.TypeReady})
	case "statebadready":
		c.raw(`{"type":"ready","state":"yes"}` + "\n")
	default:
		c.send(stdio.Message{Type: stdio.TypeReady, Window: 64, Batch: true, State: json.RawMessage(`true`)})
	}
	out := stdio.Packer{Single: mode == "stateundeclared"}
	for {
		l, ok := c.nextLine()
		if !ok {
			return 0
		}
		items := l.items
		for i := len(items) - 1; i >= 0; i-- {
			m := items[i]
			if m.Type == stdio.TypeShutdown {
				return 0
			}
			if m.Type != stdio.TypeItem {
				continue
			}
			var p struct {
				Do    string          `json:"do"`
				State json.RawMessage `json:"state"`
			}
			_ = json.Unmarshal(m.Payload, &p)
			state := func(v string) {
				out.AppendMessage(&stdio.Message{Type: stdio.TypeState, Delivery: m.Delivery, State: json.RawMessage(v)})
			}
			if m.Attempt == 1 && (p.Do == "error" || p.Do == "crash" || p.Do == "hang" || p.Do == "violate") {
				state(`{"n":-1}`)
				switch p.Do {
				case "error":
					out.AppendMessage(&stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "try again", Retryable: true})
					continue
				case "violate":
					out.AppendLine([]byte("oops, not json"))
				}
				os.Stdout.Write(out.Bytes())
				if p.Do == "hang" {
					time.Sleep(time.Hour)
				}
				return 3
			}
			saw := string(m.State)
			if saw == "" {
				saw = "null"
			}
			out.AppendMessage(&stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Key: m.Key, Payload: json.RawMessage(`{"saw":` + saw + `}`)})
			switch p.Do {
			case "state":
				state(string(p.State))
			case "nostate":
				out.AppendLine([]byte(`{"type":"state","delivery":"` + m.Delivery + `"}`))
			case "delete":
				state("null")
			default:
				var s struct{ N int }
				_ = json.Unmarshal(m.State, &s)
				state(fmt.Sprintf(`{"n":%d}`, s.N+1))
			}
			out.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		}
		os.Stdout.Write(out.Bytes())
		out.Reset()
	}
}

// store is what a caller of the pool keeps of state: done records each key's staged state,
// the hook reads it.
type store struct {
	mu sync.Mutex
	by map[string]json.RawMessage
}

func (s *store) record(key string, res engine.Result) {
	if res.State == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if res.State.Value == nil {
		delete(s.by, key)
	} else {
		s.by[key] = res.State.Value
	}
}

func (s *store) get(key string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[key]
}

// submitStates submits items in one batch whose states come from s, recorded in done, and
// returns their results.
func submitStates(t *testing.T, p *engine.Pool, s *store, items []stdio.Item) []engine.Result {
	t.Helper()
	keys := make([]string, len(items))
	for i := range items {
		if items[i].Key != nil {
			keys[i] = *items[i].Key
		}
	}
	res := make([]engine.Result, len(items))
	var wg sync.WaitGroup
	wg.Add(len(items))
	errs := p.SubmitBatch(context.Background(), items, func(i int, r engine.Result) {
		s.record(keys[i], r)
		res[i] = r
		wg.Done()
	}, engine.WithState(func(i int) json.RawMessage { return s.get(keys[i]) }))
	for _, err := range errs {
		if err != nil {
			t.Fatalf("SubmitBatch: %v", err)
		}
	}
	wg.Wait()
	return res
}

func stateConfig(mode string, mut ...func(*engine.Config)) engine.Config {
	return config(mode, append([]func(*engine.Config){func(c *engine.Config) {
		c.State = map[string]engine.StateLimits{"events": {MaxValueBytes: 64}}
	}}, mut...)...)
}

func stateItem(id, key, payload string) stdio.Item {
	it := keyed(id, key, payload)
	it.Inlet = "events"
	return it
}

// TestStateChain is the rule of one delivery of a key at a time: with a window of 64, four
// processes and batches submitted at once, every item of a key sees the state the previous
// one staged, a chain without forks.
func TestStateChain(t *testing.T) {
	p := start(t, stateConfig("state", func(c *engine.Config) { c.Concurrency = 4 }))
	s := &store{by: map[string]json.RawMessage{}}
	const n, batches = 2000, 4
	items := make([][]stdio.Item, batches)
	for i := range n {
		key := "k9" // the hot key: half the items
		if i%2 == 1 {
			key = fmt.Sprintf("k%d", (i/2)%9)
		}
		b := i % batches
		items[b] = append(items[b], stateItem(fmt.Sprintf("events/0/%d", i), key, `{}`))
	}
	// The batches run at once, sharing one store: whatever the order the pool takes them in,
	// each key's items form one chain, and within a batch they keep Submit order.
	results := make([][]engine.Result, batches)
	var wg sync.WaitGroup
	for b := range batches {
		wg.Go(func() { results[b] = submitStates(t, p, s, items[b]) })
	}
	wg.Wait()
	saw := map[string][]bool{} // by key: which counts some item saw
	count := map[string]int{}
	for b := range batches {
		last := map[string]int{}
		for i, r := range results[b] {
			key := *items[b][i].Key
			if r.Outcome != engine.Done || len(r.Emits) != 1 {
				t.Fatalf("item %s: %v %v", items[b][i].ID, r.Outcome, r.Err)
			}
			var e struct{ Saw *struct{ N int } }
			if err := json.Unmarshal(r.Emits[0].Payload, &e); err != nil {
				t.Fatal(err)
			}
			got := 0
			if e.Saw != nil {
				got = e.Saw.N
			}
			if l, ok := last[key]; ok && got <= l {
				t.Fatalf("item %s of key %s saw %d after an earlier item of its batch saw %d", items[b][i].ID, key, got, l)
			}
			last[key] = got
			for len(saw[key]) <= got {
				saw[key] = append(saw[key], false)
			}
			if saw[key][got] {
				t.Fatalf("two items of key %s saw the count %d: a fork in the chain", key, got)
			}
			saw[key][got] = true
			count[key]++
		}
	}
	for key, c := range count {
		if len(saw[key]) != c || string(s.get(key)) != fmt.Sprintf(`{"n":%d}`, c) {
			t.Fatalf("key %s: %d items saw counts up to %d, left %s; want a chain 0…%d", key, c, len(saw[key])-1, s.get(key), c-1)
		}
	}
	if count["k9"] != n/2 || len(count) != 10 {
		t.Fatalf("keys seen %v; want 10 keys, k9 %d times", count, n/2)
	}
}

// TestStateOverlappingBatches submits two batches of the same keys at once: the second's
// items wait for the first's, and each batch reads its own hook, never the other's.
func TestStateOverlappingBatches(t *testing.T) {
	p := start(t, stateConfig("state", func(c *engine.Config) { c.Concurrency = 2 }))
	a, b := &store{by: map[string]json.RawMessage{}}, &store{by: map[string]json.RawMessage{"k": json.RawMessage(`{"n":100}`)}}
	var ra, rb []engine.Result
	var wg sync.WaitGroup
	wg.Go(func() {
		ra = submitStates(t, p, a, []stdio.Item{stateItem("a1", "k", `{}`), stateItem("a2", "k", `{}`)})
	})
	wg.Go(func() { rb = submitStates(t, p, b, []stdio.Item{stateItem("b1", "k", `{}`)}) })
	wg.Wait()
	if got := string(rb[0].Emits[0].Payload); got != `{"saw":{"n":100}}` {
		t.Fatalf("batch b's item saw %s; want its own hook's {\"n\":100}", got)
	}
	if string(ra[1].Emits[0].Payload) != `{"saw":{"n":1}}` || string(a.get("k")) != `{"n":2}` || string(b.get("k")) != `{"n":101}` {
		t.Fatalf("batch a saw %s then %s, left %s; b left %s", ra[0].Emits[0].Payload, ra[1].Emits[0].Payload, a.get("k"), b.get("k"))
	}
}

// TestStateFailedAttemptStagesNothing: an attempt that stages a state and then errs,
// crashes, breaks the protocol or times out applies nothing: its retry sees the state the
// failed attempt saw, and the item's successor the retry's.
func TestStateFailedAttemptStagesNothing(t *testing.T) {
	for _, do := range []string{"error", "crash", "violate", "hang"} {
		t.Run(do, func(t *testing.T) {
			clock := engine.NewFakeClock()
			var failed atomic.Bool // attempt 1 is over: from then on the clock moves in small steps
			p := start(t, stateConfig("state", func(c *engine.Config) {
				c.Retries = 1
				c.ItemTimeout = time.Second
				c.Hooks.AttemptFinished = func(ai engine.AttemptInfo) {
					if ai.Item.ID == "x1" && ai.Item.Attempt == 1 {
						failed.Store(true)
					}
				}
				engine.UseClock(c, clock)
			}))
			s := &store{by: map[string]json.RawMessage{"k": json.RawMessage(`{"n":7}`)}}
			done := make(chan []engine.Result, 1)
			go func() {
				done <- submitStates(t, p, s, []stdio.Item{stateItem("x1", "k", `{"do":"`+do+`"}`), stateItem("x2", "k", `{}`)})
			}()
			var res []engine.Result
			if !testkit.Eventually(60*time.Second, func() bool {
				select {
				case res = <-done:
					return true
				default:
					if failed.Load() {
						clock.Advance(10 * time.Millisecond) // the retry's backoff, the restart's, never attempt 2's timeout
					} else {
						clock.Advance(time.Second) // attempt 1's timeout
					}
					return false
				}
			}) {
				t.Fatal("no results within 60s")
			}
			if res[0].Outcome != engine.Done || res[0].Attempts != 2 || string(res[0].Emits[0].Payload) != `{"saw":{"n":7}}` {
				t.Fatalf("x1: %v after %d attempts, emits %v (%v); want done on attempt 2, having seen {\"n\":7}", res[0].Outcome, res[0].Attempts, res[0].Emits, res[0].Err)
			}
			if got := string(res[1].Emits[0].Payload); got != `{"saw":{"n":8}}` || string(s.get("k")) != `{"n":9}` {
				t.Fatalf("x2 saw %s and left %s; want {\"n\":8}, then {\"n\":9}", got, s.get("k"))
			}
		})
	}
}

// TestStateRefused is each state an item cannot keep: it fails for good with ErrState, is
// not retried, applies nothing, and the process serves the next item.
func TestStateRefused(t *testing.T) {
	var started sync.Map
	p := start(t, stateConfig("state", func(c *engine.Config) {
		c.Retries = 3
		c.Hooks.ProcessStarted = func(pid int) { started.Store(pid, true) }
	}))
	big := `{"pad":"` + strings.Repeat("x", 60) + `"}`
	keyless := item("e/0/1", `{"do":"state","state":{"n":1}}`)
	keyless.Inlet = "events"
	audit := stateItem("a/0/1", "k", `{}`)
	audit.Inlet = "audit"
	for _, tc := range []struct {
		it   stdio.Item
		want string
	}{
		{keyless, "has no key, so it has no state"},
		{audit, "inlet audit keeps no state: add --state audit"},
		{stateItem("e/0/2", "k", `{"do":"state","state":`+big+`}`), `the state staged for key "k" is 70 bytes, over max-bytes 64 bytes`},
		{stateItem("e/0/3", "k", `{"do":"nostate"}`), `a state message carries "state"`},
	} {
		res := run(t, p, tc.it)
		if res.Outcome != engine.Failed || !errors.Is(res.Err, engine.ErrState) || res.Attempts != 1 || res.State != nil || res.Emits != nil {
			t.Fatalf("%s: %v after %d attempts, state %v, err %v; want failed for good with ErrState", tc.it.ID, res.Outcome, res.Attempts, res.State, res.Err)
		}
		if !strings.Contains(res.Err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to say %q", tc.it.ID, res.Err, tc.want)
		}
	}
	// The process kept serving: the same one answers the next item, and a deletion is staged.
	res := run(t, p, stateItem("e/0/4", "k", `{"do":"delete"}`))
	if res.Outcome != engine.Done || res.State == nil || res.State.Value != nil {
		t.Fatalf("a deletion: %v, state %+v, %v; want done with a nil Value", res.Outcome, res.State, res.Err)
	}
	res = run(t, p, stateItem("e/0/5", "k", `{}`))
	if res.Outcome != engine.Done || string(res.State.Value) != `{"n":1}` {
		t.Fatalf("a count: %v, state %+v, %v", res.Outcome, res.State, res.Err)
	}
	n := 0
	started.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d processes started; want the first one serving throughout", n)
	}
}

// TestStateReadyRule: a pool that keeps state refuses a process whose ready does not declare
// it, naming the inlet; a pool that keeps none refuses a state message from such a process as
// the protocol violation it is, and its items carry no state.
func TestStateReadyRule(t *testing.T) {
	_, err := engine.Start(context.Background(), stateConfig("stateundeclared"))
	if !errors.Is(err, engine.ErrStart) || !errors.Is(err, engine.ErrStateUndeclared) || !strings.Contains(err.Error(), "--state events") {
		t.Fatalf("Start = %v; want ErrStart and ErrStateUndeclared naming --state events", err)
	}
	_, err = engine.Start(context.Background(), config("statebadready"))
	var bad *stdio.ProtocolError
	if !errors.Is(err, engine.ErrStart) || !errors.As(err, &bad) || bad.Rule != stdio.RuleBadField {
		t.Fatalf(`Start with "state":"yes" in ready = %v; want ErrStart and the bad-field violation`, err)
	}
	p := start(t, config("stateundeclared", func(c *engine.Config) { c.Retries = 0 }))
	res := run(t, p, keyed("u/0/1", "k", `{}`))
	var pe *stdio.ProtocolError
	if res.Outcome != engine.Failed || !errors.As(res.Err, &pe) || pe.Rule != stdio.RuleUndeclaredState {
		t.Fatalf("a state message from an action that declared none: %v, %v; want the undeclared-state violation", res.Outcome, res.Err)
	}
}

// TestStateGivenWithItem: a Submit caller gives the state in Item.State; one holding raw
// newlines is compacted, as a payload is, so the item stays one line.
func TestStateGivenWithItem(t *testing.T) {
	p := start(t, stateConfig("state"))
	it := stateItem("g/0/1", "k", `{}`)
	it.State = json.RawMessage("{\"n\":\n 4}")
	res := run(t, p, it)
	if res.Outcome != engine.Done || string(res.Emits[0].Payload) != `{"saw":{"n":4}}` || string(res.State.Value) != `{"n":5}` {
		t.Fatalf("%v, emits %v, state %+v, %v; want it to see {\"n\":4} and stage {\"n\":5}", res.Outcome, res.Emits, res.State, res.Err)
	}
}
