// Package lifetime holds what a part's lifetime needs beyond the sync package: an Event that
// fires once and is waited on by many, so "stop may be called twice" holds by construction
// rather than by a bool, a channel and a sync.Once kept in step by hand. The bridge and the
// sidecar share it without importing each other; the engine under stdio/ imports nothing of
// ours and keeps to the sync package.
package lifetime

import "sync"

// Event is a one-time event: it has not happened until the first Fire, and has happened ever
// after. The zero value is ready to use; an Event must not be copied after first use. Every
// method is safe to call concurrently and any number of times.
type Event struct {
	init sync.Once // makes c
	fire sync.Once // closes c
	c    chan struct{}
}

func (e *Event) ch() chan struct{} {
	e.init.Do(func() { e.c = make(chan struct{}) })
	return e.c
}

// Fire makes the event happen. It reports whether this call did so: exactly one call returns
// true however many there are, so its caller is the one to do what follows the event once.
func (e *Event) Fire() bool {
	c := e.ch()
	fired := false
	e.fire.Do(func() {
		close(c)
		fired = true
	})
	return fired
}

// Done returns a channel that is closed once Fire has been called; always the same channel.
func (e *Event) Done() <-chan struct{} { return e.ch() }

// HasFired reports whether Fire has been called.
func (e *Event) HasFired() bool {
	select {
	case <-e.ch():
		return true
	default:
		return false
	}
}
