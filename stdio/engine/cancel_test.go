package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// runCancelChild plays a concurrent action that declared "cancel": true ("cancel", or with
// envelopes "cancelbatch"; "cancelbadready" declares "concurrent" as no boolean). It answers
// what it has read whenever its input runs dry, last read first, every emit before any done.
// On a first attempt, an item of payload "hang" is held until its cancel, then answered late
// (an emit, a metric, then done, all for the cancelled delivery); "hangerr" answers its cancel
// with a retryable error; "ignore" ignores its cancel; "hold" is never answered. A cancel for a
// delivery it does not hold is ignored, as the protocol asks. Later attempts are echoed.
func runCancelChild(c *child, mode string) int {
	if hello, ok := c.next(); !ok || hello.Type != stdio.TypeHello {
		return 8
	}
	if mode == "cancelbadready" {
		c.raw(`{"type":"ready","window":8,"concurrent":"yes"}` + "\n")
		c.next() // until the engine ends it
		return 0
	}
	batch := mode == "cancelbatch"
	c.send(stdio.Message{Type: stdio.TypeReady, Window: 64, Batch: batch, Concurrent: true, Cancel: true})
	out := stdio.Packer{Single: !batch}
	hung := map[string]stdio.Message{}
	var ready []stdio.Message
	flush := func() {
		for i := len(ready) - 1; i >= 0; i-- {
			out.AppendMessage(&stdio.Message{Type: stdio.TypeEmit, Delivery: ready[i].Delivery, Key: ready[i].Key, Payload: ready[i].Payload})
		}
		for i := len(ready) - 1; i >= 0; i-- {
			out.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: ready[i].Delivery})
		}
		ready = ready[:0]
		c.out.Write(out.Bytes())
		c.out.Flush()
		out.Reset()
	}
	for {
		l, ok := c.nextLine()
		if !ok {
			return 0
		}
		if cancels := countType(l.items, stdio.TypeCancel); l.batch && cancels > 1 {
			fmt.Fprintf(os.Stderr, "%d cancels in one envelope\n", cancels)
		}
		for _, m := range l.items {
			switch m.Type {
			case stdio.TypeShutdown:
				return 0
			case stdio.TypeCancel:
				h, ok := hung[m.Delivery]
				if !ok {
					continue
				}
				delete(hung, m.Delivery)
				switch string(h.Payload) {
				case `"hang"`:
					out.AppendMessage(&stdio.Message{Type: stdio.TypeEmit, Delivery: h.Delivery, Payload: []byte(`"late"`)})
					out.AppendMessage(&stdio.Message{Type: stdio.TypeMetric, Delivery: h.Delivery, Name: "late", Value: 1})
					out.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: h.Delivery})
				case `"hangerr"`:
					out.AppendMessage(&stdio.Message{Type: stdio.TypeError, Delivery: h.Delivery, Message: "cancelled: " + h.Delivery, Retryable: true})
				}
			case stdio.TypeItem:
				switch p := string(m.Payload); {
				case m.Attempt == 1 && (p == `"hang"` || p == `"hangerr"` || p == `"ignore"` || p == `"hold"`):
					hung[m.Delivery] = m
				default:
					ready = append(ready, m)
				}
			}
		}
		if c.in.Buffered() == 0 {
			flush()
		}
	}
}

func countType(ms []stdio.Message, typ string) int {
	n := 0
	for _, m := range ms {
		if m.Type == typ {
			n++
		}
	}
	return n
}

func cancelConfig(mode string, clk *engine.FakeClock, mut ...func(*engine.Config)) engine.Config {
	return config(mode, append([]func(*engine.Config){func(c *engine.Config) {
		c.ItemTimeout = time.Minute
		c.Retries = 3
		engine.UseClock(c, clk)
	}}, mut...)...)
}

// advanceUntil advances clk by step, pausing between steps, until cond holds (at most 60 s).
func advanceUntil(t *testing.T, clk *engine.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	if !testkit.Eventually(60*time.Second, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return cond()
	}) {
		t.Fatal("the condition did not hold within 60s")
	}
}

// TestCancelOneHungAmongMany: one call hangs among 1,000 with 64 in flight in one process that
// declared cancel. At its timeout that delivery alone fails and is cancelled; the process goes
// on, its late answer (an emit, a metric, done) is dropped, the item is retried and done; no
// other item fails, and no process is killed. With envelopes, the same.
func TestCancelOneHungAmongMany(t *testing.T) {
	for _, mode := range []string{"cancel", "cancelbatch"} {
		t.Run(mode, func(t *testing.T) {
			clk := engine.NewFakeClock()
			var started, cancelled atomic.Int32
			var answered atomic.Int64
			p := start(t, cancelConfig(mode, clk, func(c *engine.Config) {
				c.Hooks.ProcessStarted = func(int) { started.Add(1) }
				c.Hooks.Cancelled = func(_ int, it *stdio.Item) {
					if string(it.Payload) != `"hang"` || it.Attempt != 1 {
						t.Errorf("Cancelled(%s attempt %d); want the hung item's first attempt", it.Payload, it.Attempt)
					}
					cancelled.Add(1)
				}
				c.Hooks.DeliveryAnswered = func(slot int, _ time.Duration) {
					if slot != 0 {
						t.Errorf("DeliveryAnswered(slot %d); want slot 0", slot)
					}
					answered.Add(1)
				}
			}))
			if p.Window() != 64 {
				t.Fatalf("Window() = %d; want 64", p.Window())
			}
			const n, hung = 1000, 500
			results := make([]<-chan engine.Result, n)
			for i := range n {
				payload := fmt.Sprintf(`{"n":%d}`, i)
				if i == hung {
					payload = `"hang"`
				}
				results[i] = submit(t, p, item(fmt.Sprintf("c/0/%d", i), payload))
			}
			for i := range n {
				if i == hung {
					continue
				}
				if r := wait(t, results[i]); r.Outcome != engine.Done || r.Attempts != 1 {
					t.Fatalf("item %d: %v after %d attempts (%v); want done at once", i, r.Outcome, r.Attempts, r.Err)
				}
			}
			if st := p.Stats(); st.InFlight != 1 {
				t.Fatalf("Stats().InFlight = %d with only the hung call left; want 1", st.InFlight)
			}
			clk.Advance(time.Minute) // the hung call's timeout: it fails and is cancelled
			// The late answer frees its slot; then the retry's backoff passes.
			advanceUntil(t, clk, 5*time.Millisecond, func() bool { return len(results[hung]) > 0 })
			r := wait(t, results[hung])
			if r.Outcome != engine.Done || r.Attempts != 2 || len(r.Emits) != 1 || string(r.Emits[0].Payload) != `"hang"` {
				t.Fatalf("the hung item: %v after %d attempts, emits %v (%v); want done on its retry with its own emit only", r.Outcome, r.Attempts, r.Emits, r.Err)
			}
			for _, m := range r.Metrics {
				if m.Name == "late" {
					t.Errorf("the cancelled attempt's metric was kept: %+v", r.Metrics)
				}
			}
			st := p.Stats()
			if st.Cancels != 1 || st.CancelKills != 0 || st.DroppedAfterCancel != 3 || cancelled.Load() != 1 {
				t.Errorf("Stats() = %+v, Cancelled hook %d; want 1 cancel, no kill, 3 messages dropped", st, cancelled.Load())
			}
			if s := started.Load(); s != 1 {
				t.Errorf("%d processes started; want the first serving throughout", s)
			}
			if a := answered.Load(); a != n+1 {
				t.Errorf("DeliveryAnswered called %d times; want %d (every delivery's final answer, the cancelled one's late answer too)", a, n+1)
			}
			if l := p.Loads(); len(l) != 1 || l[0].Held != 0 {
				t.Errorf("Loads() = %+v; want slot 0 holding nothing", l)
			}
		})
	}
}

// TestCancelErrorAnswer: a cancelled delivery answered with the SDKs' retryable error frees
// its slot and is retried; the error is dropped, not the item's.
func TestCancelErrorAnswer(t *testing.T) {
	clk := engine.NewFakeClock()
	p := start(t, cancelConfig("cancel", clk))
	ch := submit(t, p, item("e/0/1", `"hangerr"`))
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 1 }) {
		t.Fatal("the item was not written")
	}
	clk.Advance(time.Minute)
	advanceUntil(t, clk, 5*time.Millisecond, func() bool { return len(ch) > 0 })
	if r := wait(t, ch); r.Outcome != engine.Done || r.Attempts != 2 {
		t.Fatalf("%v after %d attempts (%v); want done on the retry", r.Outcome, r.Attempts, r.Err)
	}
}

// TestCancelIgnored: a process that ignores a cancel is killed once CancelGrace passes; the
// deliveries it held fail retryably, naming the ignored cancel, and are done on a new process.
func TestCancelIgnored(t *testing.T) {
	clk := engine.NewFakeClock()
	var ignored atomic.Int32
	var exitMu sync.Mutex
	var exitErrs []error
	p := start(t, cancelConfig("cancel", clk, func(c *engine.Config) {
		c.Hooks.CancelIgnored = func(int, string) { ignored.Add(1) }
		c.Hooks.ProcessExited = func(_ int, err error) {
			exitMu.Lock()
			exitErrs = append(exitErrs, err)
			exitMu.Unlock()
		}
	}))
	ign := submit(t, p, item("i/0/0", `"ignore"`))
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 1 }) {
		t.Fatal("the item was not written")
	}
	clk.Advance(30 * time.Second)
	var holds []<-chan engine.Result
	for i := range 3 { // written half a timeout later: they are not late with the first
		holds = append(holds, submit(t, p, item(fmt.Sprintf("i/0/%d", i+1), `"hold"`)))
	}
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 4 }) {
		t.Fatalf("Stats() = %+v; want 4 in flight", p.Stats())
	}
	clk.Advance(30 * time.Second) // the first's timeout: cancelled, and ignored
	if st := p.Stats(); st.Cancels != 1 || st.InFlight != 3 {
		t.Fatalf("Stats() after the timeout = %+v; want 1 cancel, 3 in flight", st)
	}
	if l := p.Loads(); len(l) != 1 || l[0].Held != 4 {
		t.Fatalf("Loads() = %+v; want the cancelled delivery still holding its slot (4)", l)
	}
	clk.Advance(engine.CancelGrace) // no answer: the process is killed
	advanceUntil(t, clk, 5*time.Millisecond, func() bool {
		for _, h := range holds {
			if len(h) == 0 {
				return false
			}
		}
		return len(ign) > 0
	})
	for i, h := range holds {
		if r := wait(t, h); r.Outcome != engine.Done || r.Attempts != 2 {
			t.Errorf("held item %d: %v after %d attempts (%v); want done on its retry", i, r.Outcome, r.Attempts, r.Err)
		}
	}
	// Its retry may go to the process about to be killed, and fail with it once more.
	if r := wait(t, ign); r.Outcome != engine.Done || r.Attempts < 2 {
		t.Errorf("the ignored item: %v after %d attempts (%v); want done on a retry", r.Outcome, r.Attempts, r.Err)
	}
	if st := p.Stats(); st.CancelKills != 1 || ignored.Load() != 1 {
		t.Errorf("Stats() = %+v, CancelIgnored %d; want 1 kill for the ignored cancel", st, ignored.Load())
	}
	exitMu.Lock()
	defer exitMu.Unlock()
	if len(exitErrs) != 1 || exitErrs[0] == nil || !strings.Contains(exitErrs[0].Error(), "ignored its cancel for 5s") {
		t.Errorf("ProcessExited errors = %v; want one naming the cancel ignored for 5s", exitErrs)
	}
}

// TestCancelBadReady: "concurrent" that is no boolean fails the start as a bad field.
func TestCancelBadReady(t *testing.T) {
	_, err := engine.Start(context.Background(), config("cancelbadready"))
	var bad *stdio.ProtocolError
	if !errors.Is(err, engine.ErrStart) || !errors.As(err, &bad) || bad.Rule != stdio.RuleBadField || !strings.Contains(err.Error(), "concurrent") {
		t.Fatalf(`Start with "concurrent":"yes" in ready = %v; want ErrStart and the bad-field violation naming concurrent`, err)
	}
}

// TestConcurrentTimeoutFromWrite: in a process that declared "concurrent": true a delivery's
// item timeout runs from its own write, not from the process's last answer: answers to other
// deliveries do not keep a hung one alive.
func TestConcurrentTimeoutFromWrite(t *testing.T) {
	clk := engine.NewFakeClock()
	p := start(t, cancelConfig("cancel", clk))
	hung := submit(t, p, item("w/0/0", `"hangerr"`))
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 1 }) {
		t.Fatal("the item was not written")
	}
	clk.Advance(30 * time.Second)
	if r := run(t, p, item("w/0/1", `{}`)); r.Outcome != engine.Done { // answered at 30 s
		t.Fatalf("the second item: %v (%v); want done", r.Outcome, r.Err)
	}
	clk.Advance(30 * time.Second) // a minute after the first's write, 30 s after the last answer
	if st := p.Stats(); st.Cancels != 1 {
		t.Fatalf("Stats() a minute after the hung item's write = %+v; want it cancelled", st)
	}
	advanceUntil(t, clk, 5*time.Millisecond, func() bool { return len(hung) > 0 })
	if r := wait(t, hung); r.Outcome != engine.Done || r.Attempts != 2 {
		t.Fatalf("the hung item: %v after %d attempts (%v); want done on its retry", r.Outcome, r.Attempts, r.Err)
	}
}

// TestCancelsInOneEnvelope: deliveries late together in a process that declared envelopes get
// their cancels in one envelope, and each is answered, freed and retried.
func TestCancelsInOneEnvelope(t *testing.T) {
	clk := engine.NewFakeClock()
	rec := newRecorder()
	p := start(t, cancelConfig("cancelbatch", clk, func(c *engine.Config) { c.Logger = slog.New(rec) }))
	a, b := submit(t, p, item("b/0/0", `"hangerr"`)), submit(t, p, item("b/0/1", `"hangerr"`))
	if !testkit.Eventually(30*time.Second, func() bool { return p.Stats().InFlight == 2 }) {
		t.Fatalf("Stats() = %+v; want both items in flight", p.Stats())
	}
	clk.Advance(time.Minute)
	advanceUntil(t, clk, 5*time.Millisecond, func() bool { return len(a) > 0 && len(b) > 0 })
	for i, ch := range []<-chan engine.Result{a, b} {
		if r := wait(t, ch); r.Outcome != engine.Done || r.Attempts != 2 {
			t.Errorf("item %d: %v after %d attempts (%v); want done on its retry", i, r.Outcome, r.Attempts, r.Err)
		}
	}
	if st := p.Stats(); st.Cancels != 2 || st.CancelKills != 0 {
		t.Errorf("Stats() = %+v; want 2 cancels, no kill", st)
	}
	if !testkit.Eventually(10*time.Second, func() bool { return rec.hasLine("2 cancels in one envelope") }) {
		t.Error("the child did not log 2 cancels in one envelope")
	}
}
