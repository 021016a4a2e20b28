package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"errors"
	"fmt"
	"time"
)

// CancelGrace is how long an action that declared "cancel": true has to give a final answer
// for a delivery the engine cancelled (its item timeout passed) before the engine kills the
// process, failing its other deliveries (retryable), as it does at once to an action that
// did not declare cancel.
const CancelGrace = 5 * time.Second

// errCancelIgnored is the cause of a process killed because it gave no final answer to a
// cancelled delivery within CancelGrace.
var errCancelIgnored = errors.New("ignored its cancel")

// cancelEntry is a cancelled delivery whose slot the process still holds.
type cancelEntry struct {
	item    string    // the item's id, for errors
	written time.Time // of the delivery, for Hooks.DeliveryAnswered
	grace   timer     // kills the process at CancelGrace
}

// cancelLocked cancels t, whose item timeout passed, in a process that declared cancel: t
// leaves flight but keeps its slot until the action's final answer for it, and a grace timer
// starts. The caller fails t's attempt and writes the cancel. pr.mu is held.
func (pr *process) cancelLocked(t *task, now time.Time) {
	id := t.item.Delivery
	delete(pr.inflight, id)
	if pr.cancelled == nil {
		pr.cancelled = make(map[string]*cancelEntry)
	}
	ce := &cancelEntry{item: t.item.ID, written: t.written}
	pr.pending.Add(1) // the grace's firing; reap waits for it
	ce.grace = pr.pool.clock.AfterFunc(CancelGrace, func() { pr.graceExpired(id) })
	pr.cancelled[id] = ce
	if !pr.concurrent {
		// A sequential action starts its next delivery once it drops this one: the next
		// delivery's clock starts now, not at the last answer.
		pr.answered = now
	}
}

// writeCancels tells the action to stop the deliveries ids: one cancel line each, or
// envelopes for an action that declared them.
func (pr *process) writeCancels(ids []string) {
	out := stdio.Packer{Single: !pr.batch}
	for _, id := range ids {
		out.AppendMessage(&stdio.Message{Type: stdio.TypeCancel, Delivery: id})
	}
	pr.write(out.Bytes())
}

// graceExpired kills the process when the cancelled delivery id is still unanswered.
func (pr *process) graceExpired(id string) {
	defer pr.pending.Done()
	pr.mu.Lock()
	ce, ok := pr.cancelled[id]
	if !ok || pr.ended {
		pr.mu.Unlock()
		return
	}
	ce.grace = nil // fired: nothing to stop
	pr.mu.Unlock()
	pr.pool.cancelKills.Add(1)
	if h := pr.pool.cfg.Hooks.CancelIgnored; h != nil {
		h(pr.pid, id)
	}
	pr.fail(fmt.Errorf("%w: killed: delivery %s (item %s) %w for %v", ErrTimeout, id, ce.item, errCancelIgnored, CancelGrace))
}

// cancelledAnswerLocked takes a message of type typ for delivery id, which is not in flight:
// for a cancelled delivery it is dropped (a final answer frees its slot) and handled is true;
// pr.mu is then released. Otherwise handled is false and pr.mu still held.
func (pr *process) cancelledAnswerLocked(typ, id string) (handled bool) {
	ce, ok := pr.cancelled[id]
	if !ok {
		return false
	}
	pr.pool.droppedAfterCancel.Add(1)
	switch typ {
	case stdio.TypeDone, stdio.TypeError, stdio.TypeAbstain:
	default:
		pr.mu.Unlock()
		pr.log.Debug("dropped a message for a cancelled delivery", "type", typ, "delivery", id)
		return true
	}
	delete(pr.cancelled, id)
	if ce.grace != nil && ce.grace.Stop() {
		pr.pending.Done()
	}
	pr.log.Debug("a cancelled delivery answered; its slot is free", "type", typ, "delivery", id)
	if h := pr.pool.cfg.Hooks.DeliveryAnswered; h != nil {
		h(pr.slot, pr.pool.clock.Now().Sub(ce.written))
	}
	pr.releasedLocked()
	return true
}

// dropCancelledLocked forgets the cancelled deliveries, stopping their graces: the process is
// ending. pr.mu is held.
func (pr *process) dropCancelledLocked() {
	for id, ce := range pr.cancelled {
		if ce.grace != nil && ce.grace.Stop() {
			pr.pending.Done()
		}
		delete(pr.cancelled, id)
	}
}
