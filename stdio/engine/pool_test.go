package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

func TestEcho(t *testing.T) {
	p := start(t, config("echo", func(c *engine.Config) { c.Concurrency = 2 }))
	var chans []<-chan engine.Result
	for i := range 50 {
		payload := fmt.Sprintf(`{"n" : %d, "s":"\u00e9\n"}`, i)
		if i%2 == 0 {
			chans = append(chans, submit(t, p, keyed(strconv.Itoa(i), "k"+strconv.Itoa(i%3), payload)))
		} else {
			chans = append(chans, submit(t, p, item(strconv.Itoa(i), payload)))
		}
	}
	for i, ch := range chans {
		r := wait(t, ch)
		want := fmt.Sprintf(`{"n" : %d, "s":"\u00e9\n"}`, i)
		if r.Outcome != engine.Done || r.Attempts != 1 || len(r.Emits) != 1 || string(r.Emits[0].Payload) != want {
			t.Fatalf("item %d = %v attempts %d emits %+v err %v; want done once with payload %s", i, r.Outcome, r.Attempts, r.Emits, r.Err, want)
		}
		if i%2 == 0 && (r.Emits[0].Key == nil || *r.Emits[0].Key != "k"+strconv.Itoa(i%3)) {
			t.Fatalf("item %d emit key = %v; want k%d", i, r.Emits[0].Key, i%3)
		}
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatalf("Close(drain) = %v", err)
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := p.Submit(context.Background(), item("late", "1"), nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Submit after Close = %v; want ErrClosed", err)
	}
}

// TestAnswersAfterDone: an emit after done, a second done, or noise between deliveries is a
// violation that replaces the process; the finished delivery keeps exactly its own emits and
// later items still complete.
func TestAnswersAfterDone(t *testing.T) {
	for _, mode := range []string{"emitafterdone", "twice", "noise"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			var exitErrs []error
			p := start(t, config(mode, func(c *engine.Config) {
				c.Retries = 5
				c.Hooks.ProcessExited = func(_ int, err error) { mu.Lock(); exitErrs = append(exitErrs, err); mu.Unlock() }
			}))
			for i := range 4 {
				want := fmt.Sprintf(`{"i":%d}`, i)
				r := run(t, p, keyed(strconv.Itoa(i), "same", want))
				if r.Outcome != engine.Done || len(r.Emits) != 1 || string(r.Emits[0].Payload) != want {
					t.Fatalf("item %d = %v, emits %+v, err %v; want done with its one emit", i, r.Outcome, r.Emits, r.Err)
				}
			}
			var first error
			exited := func() bool {
				mu.Lock()
				defer mu.Unlock()
				if len(exitErrs) == 0 {
					return false
				}
				first = exitErrs[0]
				return true
			}
			if !testkit.Eventually(30*time.Second, exited) {
				t.Fatal("no process replaced after a violation")
			}
			if !errors.Is(first, stdio.ErrProtocol) {
				t.Fatalf("process exit = %v; want a protocol violation", first)
			}
		})
	}
}

func TestRetryCountsAttempts(t *testing.T) {
	var mu sync.Mutex
	var infos []engine.AttemptInfo
	p := start(t, config("crashonce", func(c *engine.Config) {
		c.Retries = 3
		c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
			mu.Lock()
			infos = append(infos, engine.AttemptInfo{Outcome: a.Outcome, Retry: a.Retry, Err: a.Err, Item: &stdio.Item{Attempt: a.Item.Attempt, Delivery: a.Item.Delivery}})
			mu.Unlock()
		}
	}))
	r := run(t, p, item("it-7", `{}`))
	if r.Outcome != engine.Done || r.Attempts != 2 {
		t.Fatalf("result = %v after %d attempts (%v); want done after 2", r.Outcome, r.Attempts, r.Err)
	}
	if got, want := string(r.Emits[0].Payload), `{"attempt":2,"idem":"idem-it-7"}`; got != want {
		t.Errorf("emit = %s; want %s (attempt counts up, idempotency key unchanged)", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(infos) != 2 || !errors.Is(infos[0].Err, engine.ErrCrashed) || !strings.Contains(infos[0].Err.Error(), "exit status 2") ||
		infos[0].Item.Delivery == infos[1].Item.Delivery || infos[1].Outcome != engine.Done {
		t.Errorf("attempts = %+v; want a crash (exit status 2) then done, with distinct deliveries", infos)
	}
}

// TestTraceSpanPerAttempt: an item with a trace context gets a new span for each attempt,
// sent on the item line as the traceparent's parent-id; the trace-id, the input's span and the
// tracestate stay, and the Result names the last attempt's span.
func TestTraceSpanPerAttempt(t *testing.T) {
	var mu sync.Mutex
	var spans []stdio.TraceContext
	p := start(t, config("crashonce", func(c *engine.Config) {
		c.Retries = 1
		c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
			mu.Lock()
			spans = append(spans, a.Item.Trace)
			mu.Unlock()
		}
	}))
	it := item("it-8", `{}`)
	it.Trace = stdio.TraceContext{TraceID: [16]byte{0xab, 15: 1}, Parent: [8]byte{0xcd, 7: 2}, Flags: 1}
	it.Tracestate = "vendor=1"
	r := run(t, p, it)
	mu.Lock()
	defer mu.Unlock()
	if r.Outcome != engine.Done || len(spans) != 2 {
		t.Fatalf("result = %v after %d attempts, %d spans seen; want done after 2", r.Outcome, r.Attempts, len(spans))
	}
	a, b := spans[0], spans[1]
	if a.SpanID == b.SpanID || a.SpanID == [8]byte{} || a.TraceID != it.Trace.TraceID || b.Parent != it.Trace.Parent || b.Flags != 1 {
		t.Errorf("attempt spans = %+v, %+v; want distinct non-zero spans in trace %x, parent %x", a, b, it.Trace.TraceID, it.Trace.Parent)
	}
	if r.Trace != b {
		t.Errorf("Result.Trace = %+v; want the last attempt's %+v", r.Trace, b)
	}
	want := fmt.Sprintf(`{"attempt":2,"traceparent":"00-ab000000000000000000000000000001-%x-01","tracestate":"vendor=1"}`, b.SpanID)
	if got := string(r.Emits[0].Payload); got != want {
		t.Errorf("the action saw %s; want %s", got, want)
	}
}

func TestActionAnswers(t *testing.T) {
	p := start(t, config("errors", func(c *engine.Config) { c.Retries = 2 }))
	r := run(t, p, item("a", `"retryable"`))
	var ae *engine.ActionError
	if r.Outcome != engine.Failed || r.Attempts != 3 || !errors.As(r.Err, &ae) || !ae.Retryable || ae.Message != "upstream busy" || len(r.Metrics) != 3 {
		t.Errorf("retryable error = %v after %d attempts, %v, %d metrics; want failed after 3 with the action's message and 3 metrics", r.Outcome, r.Attempts, r.Err, len(r.Metrics))
	}
	r = run(t, p, item("b", `"fatal"`))
	if r.Outcome != engine.Failed || r.Attempts != 1 || !errors.Is(r.Err, engine.ErrAction) || !strings.Contains(r.Err.Error(), "bad listing") {
		t.Errorf("non-retryable error = %v after %d attempts, %v; want failed at once", r.Outcome, r.Attempts, r.Err)
	}
	r = run(t, p, item("c", `"abstain"`))
	if r.Outcome != engine.Abstained || r.Reason != "no surface area" || len(r.Emits) != 0 {
		t.Errorf("abstain = %v %q emits %d; want abstained with the reason, no emits", r.Outcome, r.Reason, len(r.Emits))
	}
}

// TestTimeoutRearms: the per-process watchdog, armed for an earlier delivery that was
// answered, re-arms for the next deadline and still catches a later hang. The pool's clock is
// a fake one the test advances.
func TestTimeoutRearms(t *testing.T) {
	clk := engine.NewFakeClock()
	rec := newRecorder()
	p := start(t, config("errors", func(c *engine.Config) {
		c.ItemTimeout = 400 * time.Millisecond
		c.Logger = slog.New(rec)
		engine.UseClock(c, clk)
	}))
	if r := run(t, p, item("a", `"ok"`)); r.Outcome != engine.Done {
		t.Fatalf("a = %v %v", r.Outcome, r.Err)
	}
	clk.Advance(200 * time.Millisecond) // b's deadline falls after the watchdog's first firing
	began := clk.Now()
	ch := submit(t, p, item("b", `"hang"`))
	if !testkit.Eventually(30*time.Second, func() bool { return rec.hasLine("hanging") }) {
		t.Fatal("b never reached the action")
	}
	clk.Advance(200 * time.Millisecond) // the first firing: b has 200ms left, the watchdog re-arms
	select {
	case r := <-ch:
		t.Fatalf("b = %v %v after 200ms of its 400ms; want it still running", r.Outcome, r.Err)
	default:
	}
	clk.Advance(200 * time.Millisecond)
	r := wait(t, ch)
	if r.Outcome != engine.Failed || !errors.Is(r.Err, engine.ErrTimeout) || clk.Now().Sub(began) < 400*time.Millisecond {
		t.Fatalf("b = %v %v after %v; want a timeout after 400ms", r.Outcome, r.Err, clk.Now().Sub(began))
	}
}

// TestEmitFields: every field of emit and metric lines reaches the Result as sent, in order.
func TestEmitFields(t *testing.T) {
	var hooked []stdio.Metric
	var mu sync.Mutex
	p := start(t, config("rich", func(c *engine.Config) {
		c.Hooks.Metric = func(it *stdio.Item, m stdio.Metric) { mu.Lock(); hooked = append(hooked, m); mu.Unlock() }
	}))
	it := item("r", `{"in":1}`)
	it.KeyBase64 = "/w=="
	r := run(t, p, it)
	if r.Outcome != engine.Done || len(r.Emits) != 3 {
		t.Fatalf("result = %v with %d emits (%v); want done with 3", r.Outcome, len(r.Emits), r.Err)
	}
	e := r.Emits[0]
	if e.Outlet != "scores" || e.Key == nil || *e.Key != "out-key" || string(e.Payload) != `{"score": 81}` || len(e.Headers) != 3 ||
		e.Headers[0].Key != "h1" || *e.Headers[0].Value != "v1" || e.Headers[1].ValueBase64 != "AAE=" || e.Headers[2].Value != nil {
		t.Errorf("emit 1 = %+v; want outlet, key, raw payload and the three headers as sent", e)
	}
	if e := r.Emits[1]; e.Outlet != "rejects" || e.Key != nil || e.KeyBase64 != "/w==" || string(e.Payload) != `{"in":1}` {
		t.Errorf("emit 2 = %+v; want outlet rejects, keyBase64 /w==, the input payload", e)
	}
	if e := r.Emits[2]; e.Outlet != "" || e.Key != nil || e.KeyBase64 != "" || string(e.Payload) != "null" {
		t.Errorf("emit 3 = %+v; want no outlet, no key, null", e)
	}
	if len(r.Metrics) != 1 || r.Metrics[0].Name != "rooms" || r.Metrics[0].Value != 3.5 || r.Metrics[0].Labels["city"] != "Lyon" {
		t.Errorf("metrics = %+v; want rooms=3.5 {city=Lyon}", r.Metrics)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 1 {
		t.Errorf("Metric hook saw %v; want the one metric", hooked)
	}
}

func TestKeyAffinity(t *testing.T) {
	dir := t.TempDir()
	p := start(t, config("keys", func(c *engine.Config) {
		c.Concurrency = 3
		c.Env = append(c.Env, "STDIO_TEST_MARKER="+dir)
	}))
	var mu sync.Mutex
	order := map[string][]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		k := "k" + strconv.Itoa(i%3)
		wg.Add(1)
		err := p.Submit(context.Background(), keyed(strconv.Itoa(i), k, strconv.Itoa(i)), func(r engine.Result) {
			defer wg.Done()
			if r.Outcome != engine.Done {
				t.Errorf("item %d = %v %v; want done", i, r.Outcome, r.Err)
			}
			mu.Lock()
			order[k] = append(order[k], i)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for k, got := range order {
		for j := 1; j < len(got); j++ {
			if got[j] < got[j-1] {
				t.Fatalf("key %s finished in order %v; want Submit order", k, got)
			}
		}
	}
}

func TestParallel(t *testing.T) {
	dir := t.TempDir()
	p := start(t, config("rendezvous", func(c *engine.Config) {
		c.Concurrency = 2
		c.Env = append(c.Env, "STDIO_TEST_MARKER="+dir)
	}))
	a := submit(t, p, keyed("a", "one", "1"))
	b := submit(t, p, keyed("b", "two", "2"))
	for _, ch := range []<-chan engine.Result{a, b} {
		if r := wait(t, ch); r.Outcome != engine.Done {
			t.Fatalf("result = %v %v; want done (both keys in flight at once)", r.Outcome, r.Err)
		}
	}
}

func TestBackPressure(t *testing.T) {
	p := start(t, config("hang", func(c *engine.Config) { c.QueueSize = 2; c.ShutdownGrace = 100 * time.Millisecond }))
	submit(t, p, item("1", "1"))
	submit(t, p, item("2", "2"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Submit(ctx, item("3", "3"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit over a full queue = %v; want it to block until ctx ends", err)
	}
}

func TestBadItem(t *testing.T) {
	p := start(t, config("echo"))
	if err := p.Submit(context.Background(), item("x", `{"a":`), nil); !errors.Is(err, engine.ErrBadItem) || !strings.Contains(err.Error(), "item x") {
		t.Fatalf("Submit(invalid payload) = %v; want ErrBadItem naming the item", err)
	}
	if err := p.Submit(context.Background(), item("y", `"`+strings.Repeat("z", stdio.MaxLineBytes)+`"`), nil); !errors.Is(err, engine.ErrBadItem) {
		t.Fatalf("Submit(9 MiB payload) = %v; want ErrBadItem", err)
	}
	if r := run(t, p, item("n", "")); r.Outcome != engine.Done || string(r.Emits[0].Payload) != "null" {
		t.Fatalf("empty payload = %v %s; want done with null", r.Outcome, r.Emits[0].Payload)
	}
}

func TestWindow(t *testing.T) {
	p := start(t, config("window"))
	if p.Window() != 4 {
		t.Fatalf("Window() = %d; want the 4 declared in ready", p.Window())
	}
	var chans []<-chan engine.Result
	for i := range 9 {
		payload := strconv.Itoa(i)
		if i == 8 {
			payload = `"last"`
		}
		chans = append(chans, submit(t, p, item(strconv.Itoa(i), payload)))
	}
	for i, ch := range chans {
		r := wait(t, ch)
		want := strconv.Itoa(i)
		if i == 8 {
			want = `"last"`
		}
		if r.Outcome != engine.Done || r.Attempts != 1 || string(r.Emits[0].Payload) != want {
			t.Fatalf("item %d = %v %+v %v; want done with %s (answers matched by delivery)", i, r.Outcome, r.Emits, r.Err, want)
		}
	}
}

func TestWindowCrash(t *testing.T) {
	var mu sync.Mutex
	crashed := 0
	p := start(t, config("windowcrash", func(c *engine.Config) {
		c.Retries = 2
		c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
			if errors.Is(a.Err, engine.ErrCrashed) {
				mu.Lock()
				crashed++
				mu.Unlock()
			}
		}
	}))
	var chans []<-chan engine.Result
	for i, payload := range []string{"1", "2", "3", `"last"`} {
		chans = append(chans, submit(t, p, item(strconv.Itoa(i), payload)))
	}
	for i, ch := range chans {
		if r := wait(t, ch); r.Outcome != engine.Done || len(r.Emits) != 1 {
			t.Fatalf("item %d = %v %v; want done after a retry", i, r.Outcome, r.Err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if crashed < 3 {
		t.Fatalf("deliveries failed by the crash = %d; want every one in the window (>= 3)", crashed)
	}
}

// TestWindowTimeoutTakesTurns: eight items written ahead to a sequential action taking 150ms
// each all finish on their first attempt under a 400ms item timeout: a delivery's clock starts
// at its turn, not at its write.
func TestWindowTimeoutTakesTurns(t *testing.T) {
	p := start(t, config("slowwindow", func(c *engine.Config) { c.ItemTimeout = 400 * time.Millisecond }))
	var chans []<-chan engine.Result
	for i := range 8 {
		chans = append(chans, submit(t, p, item(strconv.Itoa(i), "1")))
	}
	for i, ch := range chans {
		if r := wait(t, ch); r.Outcome != engine.Done || r.Attempts != 1 {
			t.Fatalf("item %d = %v after %d attempts (%v); want done at once", i, r.Outcome, r.Attempts, r.Err)
		}
	}
}

func TestConfigWindow(t *testing.T) {
	p := start(t, config("echo", func(c *engine.Config) { c.Window = 8 }))
	if p.Window() != 8 {
		t.Fatalf("Window() = %d; want Config.Window 8 for a silent action", p.Window())
	}
	p2 := start(t, config("window", func(c *engine.Config) { c.Window = 16 }))
	if p2.Window() != 4 {
		t.Fatalf("Window() = %d; want the smaller declared 4", p2.Window())
	}
}
