package engine

import (
	"sync"
	"sync/atomic"
)

// The pool's sharing rule. An item goes to a process with room and the least in flight: a
// worker takes the next ready item only when no other serving process that takes items holds
// fewer slots of its window. And it writes ahead at most its share: the items ready and the
// slots held, spread over the serving processes. So a burst is spread over idle processes
// instead of filling the first one's window, and a slow process does not hold items that an
// idle one could run: they wait in the ready queue until a process with the least in flight
// takes them. A pool of one process skips all of it.

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

// myTurn reports whether pr may take the next ready item. It may not when another serving
// process that takes items (not ending, room in its window, not waiting for it to drain)
// clearly holds fewer slots (a quarter fewer: a process holding 1 defers to one holding 0,
// one holding 40 to one holding under 30, so that near-equal loads do not pass items back
// and forth), or holds fewer while pr holds its share already.
func (p *Pool) myTurn(pr *process) bool {
	mine := int(pr.held.Load())
	if mine == 0 || len(p.slots) == 1 {
		return true
	}
	least, n, total := mine, 0, 0
	for i := range p.slots {
		q := p.slots[i].Load()
		if q == nil || q.gone.Load() {
			continue
		}
		h := int(q.held.Load())
		n++
		total += h
		if q != pr && h < least && h < q.window && !q.roomWait.Load() {
			least = h
		}
	}
	if least == mine {
		return true
	}
	return least >= mine-mine/4 && mine < shareOf(len(p.ready)+total, n)
}

// shareOf is work spread over n processes, rounded up, at least 1.
func shareOf(work, n int) int {
	if n == 0 {
		return 1
	}
	return max(1, (work+n-1)/n)
}

// awaitTurn waits until myTurn(pr), pr dies (alive false) or the pool quits (quit true).
func (p *Pool) awaitTurn(pr *process) (alive, quit bool) {
	for !p.myTurn(pr) {
		// Registered before the check below: a change after the check closes ch, one before
		// it is seen by the check.
		p.turn.waiters.Add(1)
		p.turn.mu.Lock()
		if p.turn.ch == nil {
			p.turn.ch = make(chan struct{})
		}
		ch := p.turn.ch
		p.turn.mu.Unlock()
		if p.myTurn(pr) {
			p.turn.waiters.Add(-1)
			break
		}
		select {
		case <-ch:
		case <-pr.dead:
			p.turn.waiters.Add(-1)
			return false, false
		case <-p.lifeCtx.Done():
			p.turn.waiters.Add(-1)
			return true, true
		}
		p.turn.waiters.Add(-1)
	}
	return true, false
}

// share is the most slots one process should hold after a write: the items ready and the
// slots held across the serving processes, spread evenly (rounded up, at least 1).
func (p *Pool) share() int {
	if len(p.slots) == 1 {
		return maxWindow
	}
	n, held := 0, 0
	for i := range p.slots {
		if q := p.slots[i].Load(); q != nil && !q.gone.Load() {
			n++
			held += int(q.held.Load())
		}
	}
	return shareOf(len(p.ready)+held, n)
}
