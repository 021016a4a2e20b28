package engine

import (
	"sync"
	"sync/atomic"
)

// The pool's sharing rule: the workers' view of each other's load.

// turnSignal wakes the workers waiting for their turn whenever a process's load changes.
// Nothing is done per change while no worker waits.
type turnSignal struct {
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{} // closed at the next change; nil when nobody waits on it
}

// turnChanged tells the workers waiting for their turn that a process's load changed.
func (p *Pool) turnChanged() {
	if p.turn.waiters.Load() == 0 {
		return
	}
	p.turn.mu.Lock()
	if p.turn.ch != nil {
		close(p.turn.ch)
		p.turn.ch = nil
	}
	p.turn.mu.Unlock()
}
