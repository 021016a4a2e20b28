package engine

import (
	"fmt"
	"time"
)

// watch runs when the watchdog fires: it handles the deliveries whose deadline passed, then
// re-arms for the next deadline. A delivery's clock starts at its write in an action that
// declared "concurrent": true; otherwise at the later of its write and the process's previous
// answer: with a window, deliveries written ahead wait their turn in a sequential action, and
// only the oldest one can be late. A late delivery ends the process, unless the action
// declared "cancel": true: then the delivery alone fails (retryable), and is cancelled.
func (pr *process) watch() {
	defer pr.pending.Done()
	now := pr.pool.clock.Now()
	pr.mu.Lock()
	pr.armed = false
	var late []*task
	var ids []string
	for !pr.ended {
		oldest := pr.oldestLocked()
		if oldest == nil {
			break
		}
		if deadline := pr.deadlineLocked(oldest); deadline.After(now) {
			pr.armed = true
			pr.pending.Add(1)
			pr.watchdog.Reset(deadline.Sub(now))
			break
		}
		if !pr.cancel {
			if pr.timedOut == nil {
				pr.timedOut = oldest
			}
			pr.mu.Unlock()
			pr.fail(fmt.Errorf("%w: delivery %s (item %s) got no answer within %v", ErrTimeout, oldest.item.Delivery, oldest.item.ID, pr.pool.cfg.ItemTimeout))
			return
		}
		pr.cancelLocked(oldest, now)
		late = append(late, oldest)
		ids = append(ids, oldest.item.Delivery)
	}
	pr.mu.Unlock()
	if len(late) == 0 {
		return
	}
	p := pr.pool
	for _, t := range late { // each fails at once; the ids keep the deliveries the retries replace
		p.cancels.Add(1)
		if h := p.cfg.Hooks.Cancelled; h != nil {
			c := *t.item
			h(pr.pid, &c)
		}
		err := fmt.Errorf("%w: action %q (pid %d) gave no answer to delivery %s (item %s, attempt %d) within %v; it was cancelled, the process goes on",
			ErrTimeout, p.cfg.Name, pr.pid, t.item.Delivery, t.item.ID, t.item.Attempt, p.cfg.ItemTimeout)
		p.attemptEnded(t, Failed, err, "")
	}
	pr.log.Info("cancelled deliveries past their timeout", "deliveries", ids, "timeout", p.cfg.ItemTimeout, "grace", CancelGrace)
	pr.writeCancels(ids)
}

// oldestLocked returns the delivery in flight written first, or nil. pr.mu is held.
func (pr *process) oldestLocked() *task {
	var oldest *task
	for _, t := range pr.inflight {
		if oldest == nil || t.seq < oldest.seq {
			oldest = t
		}
	}
	return oldest
}

// deadlineLocked returns when t's item timeout passes (see watch). pr.mu is held.
func (pr *process) deadlineLocked(t *task) time.Time {
	start := t.written
	if !pr.concurrent && pr.answered.After(start) {
		start = pr.answered
	}
	return start.Add(pr.pool.cfg.ItemTimeout)
}
