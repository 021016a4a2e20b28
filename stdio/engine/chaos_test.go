package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestChaos pushes keyed and keyless items through a pool of windowed processes that crash,
// hang, print garbage, answer the wrong delivery or emit after done on first attempts: every
// item ends exactly once, done with exactly its own emit, each key in Submit order and never
// in flight twice.
func TestChaos(t *testing.T) {
	dir := t.TempDir()
	var seenMu sync.Mutex
	seen := map[error]int{}
	p := start(t, config("chaos", func(c *engine.Config) {
		c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
			seenMu.Lock()
			defer seenMu.Unlock()
			for _, e := range []error{engine.ErrCrashed, stdio.ErrProtocol, engine.ErrTimeout, engine.ErrAction} {
				if errors.Is(a.Err, e) {
					seen[e]++
				}
			}
		}
		c.Concurrency = 3
		c.Window = 4
		c.Retries = 10
		c.ItemTimeout = 500 * time.Millisecond
		c.ShutdownGrace = time.Second
		c.Env = append(c.Env, "STDIO_TEST_MARKER="+dir)
	}))
	const n = 150
	var mu sync.Mutex
	calls := make(map[string]int)
	order := make(map[string][]int)
	var wg sync.WaitGroup
	for i := range n {
		id := "chaos/0/" + strconv.Itoa(i)
		payload := fmt.Sprintf(`{"i":%d}`, i)
		it := item(id, payload)
		key := ""
		if i%3 != 0 {
			key = "k" + strconv.Itoa(i%7)
			it.Key = &key
		}
		wg.Add(1)
		err := p.Submit(context.Background(), it, func(r engine.Result) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			calls[id]++
			if r.Outcome != engine.Done || len(r.Emits) != 1 || string(r.Emits[0].Payload) != payload {
				t.Errorf("item %s = %v after %d attempts, emits %+v, err %v; want done with its one emit", id, r.Outcome, r.Attempts, r.Emits, r.Err)
			}
			if key != "" {
				order[key] = append(order[key], i)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatalf("Close(drain) = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != n {
		t.Fatalf("%d items finished; want %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Errorf("item %s finished %d times; want once", id, c)
		}
	}
	for k, got := range order {
		if !slices.IsSorted(got) {
			t.Errorf("key %s finished in order %v; want Submit order", k, got)
		}
	}
	if kids := children(); len(kids) > 0 {
		t.Errorf("children after Close: %v", kids)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	for _, e := range []error{engine.ErrCrashed, stdio.ErrProtocol, engine.ErrTimeout, engine.ErrAction} {
		if seen[e] == 0 {
			t.Errorf("no attempt failed with %v (failures seen: %v); the chaos child did not misbehave", e, seen)
		}
	}
	t.Logf("failed attempts by cause: %v", seen)
}

// TestChaosAbandon closes a busy chaotic pool without draining: every item still ends
// exactly once, done (with its own emit) or abandoned (with none).
func TestChaosAbandon(t *testing.T) {
	p := start(t, config("chaos", func(c *engine.Config) {
		c.Concurrency = 3
		c.Window = 4
		c.Retries = 10
		c.ItemTimeout = 500 * time.Millisecond
		c.ShutdownGrace = 200 * time.Millisecond
		c.Env = append(c.Env, "STDIO_TEST_MARKER="+t.TempDir())
	}))
	const n = 150
	var mu sync.Mutex
	calls := make(map[string]int)
	finished := make(chan struct{}, n)
	for i := range n {
		id := "abandon/0/" + strconv.Itoa(i)
		payload := strconv.Itoa(i)
		it := item(id, payload)
		if i%2 == 0 {
			k := "k" + strconv.Itoa(i%5)
			it.Key = &k
		}
		err := p.Submit(context.Background(), it, func(r engine.Result) {
			mu.Lock()
			calls[id]++
			mu.Unlock()
			switch {
			case r.Outcome == engine.Done && len(r.Emits) == 1 && string(r.Emits[0].Payload) == payload:
			case r.Outcome == engine.Abandoned && len(r.Emits) == 0 && errors.Is(r.Err, engine.ErrClosed):
			default:
				t.Errorf("item %s = %v %+v %v; want done with its emit or abandoned", id, r.Outcome, r.Emits, r.Err)
			}
			finished <- struct{}{}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range n / 3 {
		<-finished
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx, false); err != nil {
		t.Fatalf("Close(abandon) = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != n {
		t.Fatalf("%d items finished after Close; want all %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Errorf("item %s finished %d times; want once", id, c)
		}
	}
}
