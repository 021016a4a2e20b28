package engine_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestSubmitBatch: every accepted item of a batch gets its own result under its own index,
// exactly once; an item that cannot be framed gets its error and keeps nothing else from
// running; items of one key finish in batch order.
func TestSubmitBatch(t *testing.T) {
	p := start(t, config("echo", func(c *engine.Config) { c.Concurrency = 2; c.Window = 8 }))
	items := make([]stdio.Item, 40)
	for i := range items {
		switch {
		case i == 7:
			items[i] = item("bad", `{"a":`)
		case i%2 == 0:
			items[i] = keyed(strconv.Itoa(i), "k", strconv.Itoa(i))
		default:
			items[i] = item(strconv.Itoa(i), "{\n\"n\": "+strconv.Itoa(i)+"}")
		}
	}
	var (
		mu       sync.Mutex
		results  = map[int]engine.Result{}
		keyOrder []int
		wg       sync.WaitGroup
	)
	wg.Add(len(items) - 1)
	errs := p.SubmitBatch(context.Background(), items, func(i int, r engine.Result) {
		mu.Lock()
		defer mu.Unlock()
		if _, twice := results[i]; twice {
			t.Errorf("item %d answered twice", i)
		}
		results[i] = r
		if i%2 == 0 {
			keyOrder = append(keyOrder, i)
		}
		wg.Done()
	})
	if len(errs) != len(items) || !errors.Is(errs[7], engine.ErrBadItem) {
		t.Fatalf("SubmitBatch errors = %v; want ErrBadItem for item 7 alone", errs)
	}
	for i, err := range errs {
		if i != 7 && err != nil {
			t.Fatalf("SubmitBatch error %d = %v; want nil", i, err)
		}
	}
	wg.Wait()
	for i := range items {
		if i == 7 {
			continue
		}
		r := results[i]
		want := strconv.Itoa(i)
		if i%2 == 1 {
			want = `{"n":` + want + `}` // the raw newlines compacted
		}
		if r.Outcome != engine.Done || len(r.Emits) != 1 || string(r.Emits[0].Payload) != want {
			t.Fatalf("item %d = %v emits %+v err %v; want done with %s", i, r.Outcome, r.Emits, r.Err, want)
		}
	}
	for j := 1; j < len(keyOrder); j++ {
		if keyOrder[j] < keyOrder[j-1] {
			t.Fatalf("items of one key finished in order %v; want batch order", keyOrder)
		}
	}
	if _, answered := results[7]; answered {
		t.Fatal("the refused item got a result")
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	errs = p.SubmitBatch(context.Background(), items[:2], func(int, engine.Result) { t.Error("a result after Close") })
	if len(errs) != 2 || !errors.Is(errs[0], engine.ErrClosed) || !errors.Is(errs[1], engine.ErrClosed) {
		t.Fatalf("SubmitBatch after Close = %v; want ErrClosed for each", errs)
	}
}

// TestSubmitBatchBackPressure: a batch larger than the free queue waits for room, and when ctx
// ends first the items not queued get ctx's error while the queued ones still finish.
func TestSubmitBatchBackPressure(t *testing.T) {
	p := start(t, config("hang", func(c *engine.Config) { c.QueueSize = 2; c.ShutdownGrace = 100 * time.Millisecond }))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	items := []stdio.Item{item("1", "1"), item("2", "2"), item("3", "3"), item("4", "4")}
	errs := p.SubmitBatch(ctx, items, func(int, engine.Result) {})
	if len(errs) != 4 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], context.DeadlineExceeded) || !errors.Is(errs[3], context.DeadlineExceeded) {
		t.Fatalf("SubmitBatch over a queue of 2 = %v; want the first two queued, the rest ctx's error", errs)
	}
}
