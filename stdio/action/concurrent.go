package action

import (
	"context"
	"fmt"
	"sync"

	"github.com/ankka-flow/millrace/stdio"
)

// concurrent runs the calls of a session with Concurrency: each on a goroutine of its own,
// answered as it returns. Calls end in one of two ways, whichever comes first under
// session.mu: the call returns (its messages are packed) or the engine cancels it (a
// retryable error is packed, and what the call returns later is dropped).
type concurrent struct {
	slots    chan struct{} // a token per delivery held: never more than the window
	calls    sync.WaitGroup
	wake     chan struct{} // the writer has answers to write
	written  chan struct{} // closed when the writer has ended
	base     context.Context
	stop     context.CancelFunc
	shutdown bool // the engine sent shutdown: the calls in flight are let finish
	inflight map[string]*delivery
	werr     error // the writer's first error; guarded by session.mu
}

func newConcurrent(n int) *concurrent {
	base, stop := context.WithCancel(context.Background())
	return &concurrent{
		slots: make(chan struct{}, n), wake: make(chan struct{}, 1), written: make(chan struct{}),
		base: base, stop: stop, inflight: make(map[string]*delivery, n),
	}
}

// writer writes the answers packed since it last woke: those of the calls that returned
// meanwhile go out in one write. It ends when close closes wake.
func (s *session[C]) writer() {
	c := s.conc
	defer close(c.written)
	for range c.wake {
		s.mu.Lock()
		if err := s.flushLocked(); err != nil && c.werr == nil {
			c.werr = err
			c.stop() // the engine is gone: the calls in flight are for nobody
		}
		s.mu.Unlock()
	}
}

func (c *concurrent) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close ends the writer and waits for it. Every call has returned.
func (c *concurrent) close() {
	c.stop()
	close(c.wake)
	<-c.written
}

// start copies the item out of the line (the reader reuses its buffer) and runs its call on
// a goroutine of its own, once the window has room.
func (s *session[C]) start(raw []byte, single bool, run func(*delivery)) error {
	c := s.conc
	d := &delivery{single: single}
	decode := stdio.DecodeInBatch
	if single {
		decode = stdio.DecodeMessage
	}
	if err := decode(append([]byte(nil), raw...), &d.item); err != nil {
		return err
	}
	d.c, d.cancel = context.WithCancel(c.base)
	c.slots <- struct{}{}
	s.mu.Lock()
	c.inflight[d.item.Delivery] = d
	s.mu.Unlock()
	c.calls.Go(func() {
		run(d)
		s.finish(d)
	})
	return nil
}

// cancelDelivery answers delivery id with a retryable error at once and cancels its call; a
// delivery the SDK does not hold (already answered: a race the protocol allows) is ignored.
func (s *session[C]) cancelDelivery(id string) {
	c := s.conc
	s.mu.Lock()
	d := c.inflight[id]
	if d == nil || d.answered {
		s.mu.Unlock()
		return
	}
	d.answered = true
	delete(c.inflight, id)
	s.frame(d.single)
	s.out.AppendMessage(&stdio.Message{Type: stdio.TypeError, Delivery: id, Retryable: true,
		Message: fmt.Sprintf("cancelled: the engine cancelled delivery %s (its timeout passed); what its call returns is dropped", id)})
	s.mu.Unlock()
	d.cancel()
	<-c.slots
	c.notify()
}

// finish packs the messages of d's call, which has returned, unless it was cancelled.
func (s *session[C]) finish(d *delivery) {
	c := s.conc
	s.mu.Lock()
	if d.answered {
		s.mu.Unlock()
		s.log.Debug("a cancelled delivery's call returned: its result is dropped", "delivery", d.item.Delivery, "item", d.item.ID)
		return
	}
	d.answered = true
	delete(c.inflight, d.item.Delivery)
	s.frame(d.single)
	for i := range d.msgs {
		s.out.AppendMessage(&d.msgs[i])
	}
	s.mu.Unlock()
	d.cancel()
	<-c.slots
	c.notify()
}

// frame gives the answers packed next the framing of what they answer: those to an envelope's
// items in envelopes, those to an item on a line on lines. s.mu is held.
func (s *session[C]) frame(single bool) {
	if s.out.Single == single {
		return
	}
	s.w.Write(s.out.Bytes())
	s.out.Reset()
	s.out.Single = single
}
