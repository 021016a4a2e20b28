package engine

import (
	"slices"
	"sync"
	"time"
)

// FakeClock is a clock the test advances: AfterFunc's functions run inside Advance, in the
// order of their deadlines.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *FakeClock
	at      time.Time
	f       func()
	pending bool
}

// NewFakeClock returns a clock at an arbitrary fixed instant.
func NewFakeClock() *FakeClock { return &FakeClock{now: time.Unix(1_700_000_000, 0)} }

// UseClock makes the pool started with cfg read the time from c.
func UseClock(cfg *Config, c *FakeClock) { cfg.clock = c }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) AfterFunc(d time.Duration, f func()) timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock on by d and runs the functions of the timers now due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if t.pending && !t.at.After(c.now) {
			t.pending = false
			due = append(due, t)
		}
	}
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return !t.pending })
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		t.f()
	}
}

// Timers returns how many timers are pending.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.pending = false
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *fakeTimer) bool { return x == t })
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.at = t.c.now.Add(d)
	if !was {
		t.pending = true
		t.c.timers = append(t.c.timers, t)
	}
	return was
}

// Health returns the pool's health: nil, or an error wrapping ErrCrashLoop.
func Health(p *Pool) error { return p.healthErr() }

// UndoTeardown lets processes start again after a test's Teardown.
func UndoTeardown() {
	live.Lock()
	live.down = false
	live.Unlock()
}
