package sidecar_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar"
)

// waits records the sidecar's backoffs instead of waiting them.
type waits struct {
	mu sync.Mutex
	ds []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) bool {
	w.mu.Lock()
	w.ds = append(w.ds, d)
	w.mu.Unlock()
	return ctx.Err() == nil
}

func (w *waits) first(n int) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ds) < n {
		return nil
	}
	return append([]time.Duration(nil), w.ds[:n]...)
}

// TestFailureBackoff checks the backoff between conversations at its real intervals (500 ms
// doubling to 30 s), the waits recorded rather than waited: a process that fails every batch
// backs off to 30 s; one whose every conversation commits a batch before failing the next
// waits the shortest time every time, however often it fails.
func TestFailureBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		// ackFirst: the process acknowledges the first batch of each conversation, then
		// fails the next
		ackFirst bool
		want     []time.Duration
	}{
		{name: "every batch fails", want: []time.Duration{500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}},
		{name: "each conversation commits, then fails", ackFirst: true, want: []time.Duration{500 * ms, 500 * ms, 500 * ms, 500 * ms, 500 * ms, 500 * ms, 500 * ms, 500 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			b.Produce(t, records(in, 1, 40)...)
			f := newProcess(t, nil)
			var mu sync.Mutex
			seen := map[int]int{} // batches per conversation
			f.OnBatch = func(c *call) error {
				mu.Lock()
				seen[c.Conv]++
				first := seen[c.Conv] == 1
				mu.Unlock()
				if tc.ackFirst && first {
					return echo(c)
				}
				return c.Fail("boom")
			}
			e := baseEnv(t, b, f, in, out)
			e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "1"
			cfg := e.config(t)
			cfg.FailureBackoff = sidecar.Backoff{} // the spec's intervals; nothing waits them
			w := &waits{}
			startTuned(t, cfg, func(s *sidecar.Sidecar) { sidecar.SetSleep(s, w.sleep) })
			var got []time.Duration
			waitFor(t, fmt.Sprintf("%d backoffs", len(tc.want)), func() bool { got = w.first(len(tc.want)); return got != nil })
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("backoffs = %v; want %v", got, tc.want)
			}
		})
	}
}
