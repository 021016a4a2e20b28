package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"fmt"
)

// worker owns one process slot: it keeps a process running (replacing one that dies, with the
// crash-loop breaker's backoff) and feeds it items until the pool quits.
func (p *Pool) worker(slot int, pr *process) {
	defer p.wg.Done()
	bo := p.restartBackOff()
	replacing := false // the process before ended other than by a clean shutdown
	for {
		if pr == nil {
			if pr = p.respawn(bo, slot); pr == nil {
				return
			}
			if h := p.cfg.Hooks.ProcessRestarted; h != nil && replacing {
				h(pr.pid)
			}
		}
		if !p.serve(pr) {
			pr.shutdown(p.stopCtx)
			p.forget(pr)
			return
		}
		if p.cfg.PerItem {
			pr.shutdown(p.lifeCtx)
		}
		<-pr.dead
		p.forget(pr)
		replacing = pr.crashed
		pr = nil
	}
}

func (p *Pool) forget(pr *process) {
	p.mu.Lock()
	delete(p.procs, pr)
	p.mu.Unlock()
	if p.slots[pr.slot].CompareAndSwap(pr, nil) {
		p.turnChanged()
	}
}

// serve feeds pr items until it dies (true), has served its one item in per-item mode (true),
// or the pool quits (false).
func (p *Pool) serve(pr *process) bool {
	// With a window, every ready item that fits goes out in the same write: as lines up to
	// writeBatch, or to an action that declared envelopes packed into envelopes, each within
	// the line limit (an item too large for one goes on a line of its own).
	out := stdio.Packer{Single: !pr.batch}
	limit := writeBatch
	if pr.batch {
		limit = stdio.MaxLineBytes
	}
	for {
		if alive, quit := pr.awaitRoom(p.lifeCtx.Done()); !alive || quit {
			return !quit
		}
		if alive, quit := p.awaitBudget(pr); !alive || quit {
			return !quit
		}
		if alive, quit := p.awaitTurn(pr); !alive || quit {
			return !quit
		}
		var t *task
		select {
		case t = <-p.ready:
		case <-pr.dead:
			return true
		case <-p.lifeCtx.Done():
			return false
		}
		if !p.myTurn(pr) {
			// Another process took its turn or freed a slot while this worker waited: the
			// item is that one's (a process with the least in flight takes it).
			p.requeue(t)
			continue
		}
		now := p.clock.Now() // the run's write time
		if !pr.register(t, now) {
			p.requeue(t)
			if p.abandoning.Load() || !pr.isEnded() {
				continue
			}
			select {
			case <-pr.dead:
				return true
			case <-p.lifeCtx.Done():
				return false
			}
		}
		out.AppendItem(t.item)
		share := p.share()
	fill:
		for out.Len() < limit && pr.hasRoom() && int(pr.held.Load()) < share && !p.cfg.Budget.isFull() {
			select {
			case t = <-p.ready:
			default:
				break fill
			}
			if !pr.register(t, now) {
				p.requeue(t)
				break
			}
			out.AppendItem(t.item)
		}
		p.turnChanged() // pr's load grew: a worker waiting behind it may now take its turn
		pr.write(out.Bytes())
		out.Reset()
		if p.cfg.PerItem { // its one item: wait for the answer, then retire the process
			_, quit := pr.awaitRoom(p.lifeCtx.Done())
			return !quit
		}
	}
}

// awaitBudget waits while the budget is full: no item is written until releases bring it
// under its limit, pr dies (alive false) or the pool quits (quit true).
func (p *Pool) awaitBudget(pr *process) (alive, quit bool) {
	for {
		full, room := p.cfg.Budget.full()
		if !full {
			return true, false
		}
		select {
		case <-room:
		case <-pr.dead:
			return false, false
		case <-p.lifeCtx.Done():
			return true, true
		}
	}
}

// requeue puts back an item that was taken but not delivered.
func (p *Pool) requeue(t *task) {
	p.mu.Lock()
	if !p.abandoning.Load() {
		p.ready <- t
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.final(t, Result{Outcome: Abandoned, Err: fmt.Errorf("%w: item %s abandoned before delivery", ErrClosed, t.item.ID), Metrics: t.metrics, Attempts: t.attempts})
}
