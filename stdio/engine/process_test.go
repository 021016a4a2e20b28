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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

func TestStartFails(t *testing.T) {
	tests := []struct {
		name  string
		cfg   engine.Config
		want  []string
		isErr error
	}{
		{"never ready", config("neverready", func(c *engine.Config) { c.ReadyTimeout = 500 * time.Millisecond }),
			[]string{"did not answer hello with ready within 500ms (the ready timeout)", "loading a very large model"}, engine.ErrNoReady},
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
			if errors.Is(err, engine.ErrNoReady) && !errors.Is(err, engine.ErrStart) {
				t.Errorf("Start(%s) = %v; a start without ready must be an ErrStart too", tt.name, err)
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
		{"nonewline", stdio.ErrProtocol, []string{"the last line has no newline", `"{\"type\":\"done\"`}, nil},
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

func TestStderr(t *testing.T) {
	rec := newRecorder()
	p := start(t, config("stderrlog", func(c *engine.Config) { c.Logger = slog.New(rec) }))
	r := run(t, p, item("it-s", `1`))
	if r.Outcome != engine.Done {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	var plain, warn record
	var ok1, ok2 bool
	both := func() bool {
		plain, ok1 = rec.find("action stderr")
		warn, ok2 = rec.find("low disk")
		return ok1 && ok2
	}
	if !testkit.Eventually(30*time.Second, both) {
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

// TestStderrFlood: 20 MB of stderr per item never blocks the child. The full case is 100 MB;
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
	gc := grandchild(rec)
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
	if got := engine.Health(p); !errors.Is(got, engine.ErrCrashLoop) {
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

// TestCloseConcurrentDrain: Close called at once from several goroutines while items are in
// flight drains them once; every call returns nil after the pool is closed, and an idle pool
// drains at once.
func TestCloseConcurrentDrain(t *testing.T) {
	p := start(t, config("slowwindow"))
	var chans []<-chan engine.Result
	for i := range 4 {
		chans = append(chans, submit(t, p, item(strconv.Itoa(i), "1")))
	}
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = p.Close(context.Background(), true) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Close(drain) call %d = %v; want nil", i, err)
		}
	}
	for i, ch := range chans {
		if r := wait(t, ch); r.Outcome != engine.Done {
			t.Errorf("item %d = %v %v; want done (drained before Close returned)", i, r.Outcome, r.Err)
		}
	}

	idle := start(t, config("echo"))
	if err := idle.Close(context.Background(), true); err != nil {
		t.Fatalf("Close(drain) of an idle pool = %v; want nil", err)
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

// TestEscapeePipes: a grandchild that left the process group keeps the pipes open after the
// action exited; the pipes are closed after the grace, Close returns, and the exit is clean.
func TestEscapeePipes(t *testing.T) {
	rec := newRecorder()
	exits := make(chan error, 4)
	p := start(t, config("escapee", func(c *engine.Config) {
		c.Logger = slog.New(rec)
		c.Hooks.ProcessExited = func(_ int, err error) { exits <- err }
	}))
	if r := run(t, p, item("e", `1`)); r.Outcome != engine.Done {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	gc := grandchild(rec)
	if gc == 0 {
		t.Fatal("no grandchild pid logged")
	}
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) }) // it left the group: ours to end
	if err := p.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if err := <-exits; err != nil {
		t.Errorf("exit = %v; want a clean exit (the open pipes are no fault of the action)", err)
	}
	if _, ok := rec.find("action pipes still open after exit; closed them (a descendant left the process group)"); !ok {
		t.Errorf("logged %v; want the warning about the open pipes", rec.messages())
	}
}

// grandchild waits, at most 30 s, for the action's stderr line "grandchild PID" and returns
// the PID (0 when none was logged).
func grandchild(rec *recorder) int {
	var gc int
	logged := func() bool {
		for _, m := range rec.messages() {
			if l, ok := m.attrs["line"].(string); ok && strings.HasPrefix(l, "grandchild ") {
				gc, _ = strconv.Atoi(strings.TrimPrefix(l, "grandchild "))
			}
		}
		return gc != 0
	}
	testkit.Eventually(30*time.Second, logged)
	return gc
}
