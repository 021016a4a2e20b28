package engine_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestStats: a process busy with a delivery that hangs, and items queued behind it, show in
// the pool's Stats.
func TestStats(t *testing.T) {
	p := start(t, config("errors", func(c *engine.Config) { c.Concurrency = 2; c.Window = 1 }))
	if st := p.Stats(); st != (engine.Stats{Processes: 2, Window: 1}) {
		t.Fatalf("Stats() of an idle pool = %+v; want 2 processes, window 1, nothing else", st)
	}
	key := "k"
	for i := range 4 { // one key: one runs, three wait behind it
		it := keyed(string(rune('a'+i)), key, `"hang"`)
		submit(t, p, it)
	}
	want := engine.Stats{Processes: 2, Busy: 1, InFlight: 1, Queued: 3, Window: 1}
	var st engine.Stats
	if !testkit.Eventually(30*time.Second, func() bool { st = p.Stats(); return st == want }) {
		t.Fatalf("Stats() with a hanging delivery and 3 behind its key = %+v; want %+v", st, want)
	}
	if got := st.Occupancy(); got != 0.5 {
		t.Errorf("Occupancy() = %v; want 0.5 (1 of 2 processes × window 1)", got)
	}
}

// TestProcessRestarted: a process that crashes is replaced, and the replacement is reported;
// the processes of the first start are not.
func TestProcessRestarted(t *testing.T) {
	var started, restarted atomic.Int32
	p := start(t, config("crashonce", func(c *engine.Config) {
		c.Retries = 1
		c.Hooks.ProcessStarted = func(int) { started.Add(1) }
		c.Hooks.ProcessRestarted = func(int) { restarted.Add(1) }
	}))
	if r := run(t, p, item("a", `{}`)); r.Outcome != engine.Done || r.Attempts != 2 {
		t.Fatalf("result = %v after %d attempts; want done after a crash", r.Outcome, r.Attempts)
	}
	if s, r := started.Load(), restarted.Load(); s != 2 || r != 1 {
		t.Errorf("started %d, restarted %d; want 2 started, 1 of them a restart", s, r)
	}
}
