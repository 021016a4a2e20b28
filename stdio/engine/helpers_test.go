package engine_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
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

// hasLine reports whether a plain stderr line was logged.
func (r *recorder) hasLine(line string) bool {
	for _, m := range r.messages() {
		if m.attrs["line"] == line {
			return true
		}
	}
	return false
}

func (r *recorder) find(msg string) (record, bool) {
	for _, m := range r.messages() {
		if m.msg == msg {
			return m, true
		}
	}
	return record{}, false
}
