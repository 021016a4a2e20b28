package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestPoolSharesBurst: a burst of 100 items over 8 processes of a sequential action with a
// window of 64, each stuck on its first item, is spread over all of them: every process gets
// work and none holds more than its share (100 over 8, rounded up), where before the first
// process to wake took up to its whole window. Nothing is answered, so the spread is the
// sharing rule's alone, not a matter of timing.
func TestPoolSharesBurst(t *testing.T) {
	const procs, items = 8, 100
	p := start(t, config("holdall", func(c *engine.Config) { c.Concurrency = procs }))
	burst := make([]stdio.Item, items)
	for i := range burst {
		burst[i] = item(fmt.Sprintf("s/0/%d", i), `{}`)
	}
	if errs := p.SubmitBatch(context.Background(), burst, func(int, engine.Result) {}); errs != nil {
		t.Fatalf("SubmitBatch = %v", errs)
	}
	if !testkit.Eventually(60*time.Second, func() bool { return p.Stats().InFlight == items }) {
		t.Fatalf("Stats() = %+v; want all %d items in flight", p.Stats(), items)
	}
	loads := p.Loads()
	if len(loads) != procs {
		t.Fatalf("Loads() = %+v; want %d slots", loads, procs)
	}
	share := (items + procs - 1) / procs
	for _, l := range loads {
		if l.Held < 1 || l.Held > share {
			t.Errorf("slot %d holds %d of the burst; want between 1 and its share, %d (loads %+v)", l.Slot, l.Held, share, loads)
		}
	}
}

// TestPoolSlowProcessHoldsNothing: in a pool of two processes of a sequential action with a
// window of 64, one stuck on an item, every later item goes to the other, the one with the
// least in flight: none waits behind the stuck one (each is submitted once the one before is
// done, so the other process holds nothing when the next comes).
func TestPoolSlowProcessHoldsNothing(t *testing.T) {
	p := start(t, config("seqstuck", func(c *engine.Config) { c.Concurrency = 2 }))
	submit(t, p, item("h/0/0", `"stuck"`))
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 1 }) {
		t.Fatalf("Stats() = %+v; want the stuck item in flight", p.Stats())
	}
	for i := range 20 {
		if r := run(t, p, item(fmt.Sprintf("h/0/%d", i+1), `{}`)); r.Outcome != engine.Done {
			t.Fatalf("item %d: %v (%v); want done by the process that is not stuck", i+1, r.Outcome, r.Err)
		}
	}
	if st := p.Stats(); st.InFlight != 1 {
		t.Errorf("Stats() = %+v; want only the stuck item in flight", st)
	}
}
