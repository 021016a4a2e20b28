package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// config returns a Config whose child is this test binary playing mode.
func config(mode string, mut ...func(*engine.Config)) engine.Config {
	cfg := engine.Config{
		Name:          "test-" + mode,
		Command:       []string{os.Args[0]},
		Env:           []string{childEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"},
		Concurrency:   1,
		ReadyTimeout:  30 * time.Second,
		RetryBackoff:  time.Millisecond,
		RetryMax:      10 * time.Millisecond,
		ShutdownGrace: 5 * time.Second,
	}
	for _, f := range mut {
		f(&cfg)
	}
	return cfg
}

func start(t *testing.T, cfg engine.Config) *engine.Pool {
	t.Helper()
	p, err := engine.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start(%s) = %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.Close(ctx, false)
	})
	return p
}

func item(id string, payload string) stdio.Item {
	return stdio.Item{ID: id, Payload: json.RawMessage(payload), IdempotencyKey: "idem-" + id}
}

func keyed(id, key, payload string) stdio.Item {
	it := item(id, payload)
	it.Key = &key
	return it
}

// submit submits it and returns a channel that receives its result.
func submit(t *testing.T, p *engine.Pool, it stdio.Item) <-chan engine.Result {
	t.Helper()
	ch := make(chan engine.Result, 2)
	if err := p.Submit(context.Background(), it, func(r engine.Result) { ch <- r }); err != nil {
		t.Fatalf("Submit(%s) = %v", it.ID, err)
	}
	return ch
}

func wait(t *testing.T, ch <-chan engine.Result) engine.Result {
	t.Helper()
	select {
	case r := <-ch:
		select {
		case r2 := <-ch:
			t.Fatalf("done called twice: %+v then %+v", r, r2)
		default:
		}
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("no result within 60s")
	}
	return engine.Result{}
}

func run(t *testing.T, p *engine.Pool, it stdio.Item) engine.Result {
	t.Helper()
	return wait(t, submit(t, p, it))
}

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

func TestStartFails(t *testing.T) {
	tests := []struct {
		name  string
		cfg   engine.Config
		want  []string
		isErr error
	}{
		{"never ready", config("neverready", func(c *engine.Config) { c.ReadyTimeout = 500 * time.Millisecond }),
			[]string{"within 500ms", "loading a very large model"}, engine.ErrStart},
		{"exit 1 at start", config("exit1"), []string{"exit status 1", "boom: cannot load model weights", "before ready"}, engine.ErrStart},
		{"banner before ready", config("banner"), []string{"Welcome to my action"}, stdio.ErrProtocol},
		{"no such command", engine.Config{Name: "ghost", Command: []string{"/no/such/millrace-action"}, Concurrency: 1}, []string{"/no/such/millrace-action", "check the command"}, engine.ErrStart},
		{"no command", engine.Config{Name: "empty"}, []string{"no command"}, engine.ErrConfig},
		{"no concurrency", config("echo", func(c *engine.Config) { c.Concurrency = 0 }), []string{"concurrency is 0", "at least 1"}, engine.ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := engine.Start(context.Background(), tt.cfg)
			if err == nil {
				p.Close(context.Background(), false)
				t.Fatalf("Start(%s) = nil error; want one", tt.name)
			}
			if !errors.Is(err, tt.isErr) {
				t.Errorf("Start(%s) = %v; want errors.Is %v", tt.name, err, tt.isErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start(%s) = %q; want it to contain %q", tt.name, err, w)
				}
			}
		})
	}
}

// TestBadChild: each misbehaviour mid-delivery fails the attempt (retryable), replaces the
// process and retries; with one retry the item fails for good after two attempts, publishing
// nothing.
func TestBadChild(t *testing.T) {
	tests := []struct {
		mode  string
		isErr error
		want  []string
		mut   func(*engine.Config)
	}{
		{"longline", stdio.ErrLineTooLong, []string{"8 MiB", `"{\"type\":\"emit\"`}, nil},
		{"chatty", stdio.ErrProtocol, []string{"staged more than 50000 bytes"}, func(c *engine.Config) { c.MaxStagedBytes = 50000 }},
		{"badutf8", stdio.ErrProtocol, []string{"not valid UTF-8"}, nil},
		{"nonobject", stdio.ErrProtocol, []string{"not a JSON object", `"[1,2,3]"`}, nil},
		{"wrongdelivery", stdio.ErrProtocol, []string{`"dl_someone_else", which is not in flight`}, nil},
		{"hang", engine.ErrTimeout, []string{"no answer", "within 300ms", "thinking very hard"}, func(c *engine.Config) { c.ItemTimeout = 300 * time.Millisecond }},
		{"closestdout", engine.ErrCrashed, []string{"closed its stdout", "closing stdout"}, nil},
		{"crash", engine.ErrCrashed, []string{"exited during delivery", "exit status 3", "panic: index out of range"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			var mu sync.Mutex
			var attempts []engine.AttemptInfo
			var exits int
			p := start(t, config(tt.mode, func(c *engine.Config) {
				c.Retries = 1
				c.Hooks.AttemptFinished = func(a engine.AttemptInfo) {
					mu.Lock()
					a.Item = &stdio.Item{Attempt: a.Item.Attempt, Delivery: a.Item.Delivery}
					attempts = append(attempts, a)
					mu.Unlock()
				}
				c.Hooks.ProcessExited = func(int, error) { mu.Lock(); exits++; mu.Unlock() }
				if tt.mut != nil {
					tt.mut(c)
				}
			}))
			r := run(t, p, keyed("it-1", "k", `{"x":1}`))
			if r.Outcome != engine.Failed || r.Attempts != 2 || len(r.Emits) != 0 {
				t.Fatalf("result = %v after %d attempts, %d emits; want failed after 2, none", r.Outcome, r.Attempts, len(r.Emits))
			}
			if !errors.Is(r.Err, tt.isErr) {
				t.Errorf("err = %v; want errors.Is %v", r.Err, tt.isErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("err = %q; want it to contain %q", r.Err, w)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(attempts) != 2 || !attempts[0].Retry || attempts[1].Retry || attempts[0].Item.Attempt != 1 {
				t.Errorf("attempts = %+v; want attempt 1 retried, attempt 2 final", attempts)
			}
			if exits < 2 {
				t.Errorf("processes exited = %d; want each failed attempt's process replaced", exits)
			}
		})
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
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				n := len(exitErrs)
				var first error
				if n > 0 {
					first = exitErrs[0]
				}
				mu.Unlock()
				if n > 0 {
					if !errors.Is(first, stdio.ErrProtocol) {
						t.Fatalf("process exit = %v; want a protocol violation", first)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no process replaced after a violation")
				}
				time.Sleep(5 * time.Millisecond)
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
// answered, re-arms for the next deadline and still catches a later hang.
func TestTimeoutRearms(t *testing.T) {
	p := start(t, config("errors", func(c *engine.Config) { c.ItemTimeout = 400 * time.Millisecond }))
	if r := run(t, p, item("a", `"ok"`)); r.Outcome != engine.Done {
		t.Fatalf("a = %v %v", r.Outcome, r.Err)
	}
	time.Sleep(200 * time.Millisecond) // b's deadline falls after the watchdog's first firing
	began := time.Now()
	r := run(t, p, item("b", `"hang"`))
	if r.Outcome != engine.Failed || !errors.Is(r.Err, engine.ErrTimeout) || time.Since(began) < 400*time.Millisecond {
		t.Fatalf("b = %v %v after %v; want a timeout after 400ms", r.Outcome, r.Err, time.Since(began))
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

func TestStderr(t *testing.T) {
	rec := newRecorder()
	p := start(t, config("stderrlog", func(c *engine.Config) { c.Logger = slog.New(rec) }))
	r := run(t, p, item("it-s", `1`))
	if r.Outcome != engine.Done {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	var plain, warn record
	var ok1, ok2 bool
	for deadline := time.Now().Add(30 * time.Second); !(ok1 && ok2) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		plain, ok1 = rec.find("action stderr")
		warn, ok2 = rec.find("low disk")
	}
	if !ok1 || !ok2 {
		t.Fatalf("logged %v; want the plain line and the JSON line", rec.messages())
	}
	for _, want := range []string{"action", "pid", "delivery", "item", "attempt"} {
		if _, ok := plain.attrs[want]; !ok {
			t.Errorf("stderr line logged with %v; want %q", plain.attrs, want)
		}
	}
	if plain.attrs["line"] != "plain words" || plain.attrs["item"] != "it-s" {
		t.Errorf("plain line attrs = %v", plain.attrs)
	}
	if warn.level != slog.LevelWarn || fmt.Sprint(warn.attrs["free_mb"]) != "12" {
		t.Errorf("JSON line logged at %v with %v; want warn with free_mb=12", warn.level, warn.attrs)
	}
}

// TestStderrFlood: 20 MB of stderr per item never blocks the child. The issue says 100 MB;
// 20 MB keeps the -race run short and still overflows every pipe and buffer many times;
// STDIO_TEST_FLOOD_MB=100 runs the full size.
func TestStderrFlood(t *testing.T) {
	p := start(t, config("flood", func(c *engine.Config) {
		c.Env = append(c.Env, "STDIO_TEST_FLOOD_MB="+os.Getenv("STDIO_TEST_FLOOD_MB"))
	}))
	for i := range 2 {
		if r := run(t, p, item(strconv.Itoa(i), `"x"`)); r.Outcome != engine.Done {
			t.Fatalf("result = %v %v; want done", r.Outcome, r.Err)
		}
	}
}

// alive reports whether pid runs: a zombie waiting for an init that does not reap it counts
// as dead, and a process just sent SIGKILL gets a moment to go.
func alive(pid int) bool {
	for range 200 {
		if !running(pid) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) == 0 || f[0] != "Z"
}

func TestGrandchildKilled(t *testing.T) {
	rec := newRecorder()
	p := start(t, config("grandchild", func(c *engine.Config) { c.Logger = slog.New(rec) }))
	if r := run(t, p, item("g", `1`)); r.Outcome != engine.Done {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	var gc int
	for deadline := time.Now().Add(30 * time.Second); gc == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, m := range rec.messages() {
			if l, ok := m.attrs["line"].(string); ok && strings.HasPrefix(l, "grandchild ") {
				gc, _ = strconv.Atoi(strings.TrimPrefix(l, "grandchild "))
			}
		}
	}
	if gc == 0 || !running(gc) {
		t.Fatalf("grandchild pid %d not running before Close", gc)
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if alive(gc) {
		t.Fatalf("grandchild %d outlived its action after Close", gc)
	}
}

func TestIgnoresShutdown(t *testing.T) {
	var pid int
	var exitErr error
	p := start(t, config("ignoreshutdown", func(c *engine.Config) {
		c.ShutdownGrace = 200 * time.Millisecond
		c.Hooks.ProcessStarted = func(p int) { pid = p }
		c.Hooks.ProcessExited = func(_ int, err error) { exitErr = err }
	}))
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("action %d alive after Close", pid)
	}
	if exitErr == nil || !strings.Contains(exitErr.Error(), "did not exit after shutdown") || !strings.Contains(exitErr.Error(), "signal: killed") {
		t.Errorf("exit = %v; want it to say the action ignored shutdown and was killed", exitErr)
	}
}

func TestCrashLoop(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "broken")
	health := make(chan error, 10)
	p := start(t, config("crashloop", func(c *engine.Config) {
		c.Retries = 1
		c.RestartBackoff = time.Millisecond
		c.RestartMax = 20 * time.Millisecond
		c.Env = append(c.Env, "STDIO_TEST_MARKER="+marker)
		c.Hooks.Health = func(err error) { health <- err }
	}))
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := submit(t, p, item("c", `1`)) // attempt 1 crashes; every restart then fails
	err := <-health
	if !errors.Is(err, engine.ErrCrashLoop) || !strings.Contains(err.Error(), "fatal: config file missing") || !strings.Contains(err.Error(), os.Args[0]) {
		t.Fatalf("health = %v; want a crash loop naming the command and its stderr", err)
	}
	if got := p.Health(); !errors.Is(got, engine.ErrCrashLoop) {
		t.Fatalf("Health() = %v; want ErrCrashLoop", got)
	}
	os.Remove(marker)
	if err := <-health; err != nil {
		t.Fatalf("health after the fix = %v; want nil", err)
	}
	if r := wait(t, ch); r.Outcome != engine.Done || r.Attempts != 2 {
		t.Fatalf("result = %v after %d attempts (%v); want done on attempt 2, nothing lost while unhealthy", r.Outcome, r.Attempts, r.Err)
	}
}

func TestCloseAbandons(t *testing.T) {
	p := start(t, config("hang", func(c *engine.Config) { c.ShutdownGrace = 100 * time.Millisecond }))
	var chans []<-chan engine.Result
	for i := range 3 {
		chans = append(chans, submit(t, p, keyed(strconv.Itoa(i), "k", "1")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close(drain, 300ms) over a hung action = %v; want DeadlineExceeded", err)
	}
	for i, ch := range chans {
		if r := wait(t, ch); r.Outcome != engine.Abandoned || !errors.Is(r.Err, engine.ErrClosed) {
			t.Errorf("item %d = %v %v; want abandoned", i, r.Outcome, r.Err)
		}
	}
}

// TestAbandonBlockedWrite: a child that stops reading stdin blocks the engine's write of a
// large item; with no item timeout, Close(abandon) still ends it and returns.
func TestAbandonBlockedWrite(t *testing.T) {
	p := start(t, config("deaf", func(c *engine.Config) { c.ItemTimeout = -1; c.ShutdownGrace = 100 * time.Millisecond }))
	ch := submit(t, p, item("big", `"`+strings.Repeat("b", 4<<20)+`"`))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Close(ctx, false); err != nil {
		t.Fatalf("Close(abandon) = %v", err)
	}
	if r := wait(t, ch); r.Outcome != engine.Abandoned {
		t.Fatalf("result = %v %v; want abandoned", r.Outcome, r.Err)
	}
}

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

// TestNoZombies: after Close, no child of the engine is left, running or unreaped, whatever
// the children did.
func TestNoZombies(t *testing.T) {
	p := start(t, config("crashonce", func(c *engine.Config) { c.Concurrency = 3; c.Retries = 2 }))
	var chans []<-chan engine.Result
	for i := range 6 {
		chans = append(chans, submit(t, p, item(strconv.Itoa(i), "1")))
	}
	for _, ch := range chans {
		if r := wait(t, ch); r.Outcome != engine.Done {
			t.Fatalf("result = %v %v", r.Outcome, r.Err)
		}
	}
	if len(children()) == 0 {
		t.Fatal("no children listed while the pool runs; is /proc/self/task/*/children readable?")
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if kids := children(); len(kids) > 0 {
		t.Fatalf("children of the engine after Close: %v; want none", kids)
	}
}

// children lists the engine's child processes, zombies included.
func children() []string {
	var kids []string
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
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

func TestPerItem(t *testing.T) {
	p := start(t, config("pid", func(c *engine.Config) { c.PerItem = true }))
	seen := map[string]bool{}
	for i := range 3 {
		r := run(t, p, item(strconv.Itoa(i), "1"))
		if r.Outcome != engine.Done {
			t.Fatalf("item %d = %v %v", i, r.Outcome, r.Err)
		}
		seen[string(r.Emits[0].Payload)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("per-item pids = %v; want 3 distinct processes", seen)
	}
}

func TestWorkdir(t *testing.T) {
	p := start(t, config("workdir"))
	r := run(t, p, item("w", "1"))
	var dir string
	if r.Outcome != engine.Done || json.Unmarshal(r.Emits[0].Payload, &dir) != nil || dir == "" {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	if _, err := os.Stat(filepath.Join(dir, "scratch")); err != nil {
		t.Fatalf("workdir file while running: %v", err)
	}
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("MILLSTREAM_WORKDIR %s after exit: %v; want it removed", dir, err)
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

// recorder is a slog.Handler keeping every record, for assertions.
type recorder struct {
	attrs []slog.Attr
	store *recStore
}

type recStore struct {
	mu   sync.Mutex
	recs []record
}

type record struct {
	msg   string
	level slog.Level
	attrs map[string]any
}

func newRecorder() *recorder { return &recorder{store: &recStore{}} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	m := record{msg: rec.Message, level: rec.Level, attrs: map[string]any{}}
	for _, a := range r.attrs {
		m.attrs[a.Key] = a.Value.Any()
	}
	rec.Attrs(func(a slog.Attr) bool { m.attrs[a.Key] = a.Value.Any(); return true })
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	r.store.recs = append(r.store.recs, m)
	return nil
}
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{attrs: append(append([]slog.Attr{}, r.attrs...), as...), store: r.store}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }
func (r *recorder) messages() []record {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	return append([]record(nil), r.store.recs...)
}
func (r *recorder) find(msg string) (record, bool) {
	for _, m := range r.messages() {
		if m.msg == msg {
			return m, true
		}
	}
	return record{}, false
}
