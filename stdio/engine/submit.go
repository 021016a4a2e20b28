package engine

import (
	"context"
	"fmt"

	"github.com/ankka-flow/millrace/stdio"
)

// SubmitBatch is Submit for each item of items, in order, with one callback for them all:
// done(i, res) receives item i's final Result, exactly once, for every item accepted. The
// pool takes the items over (it sets their Delivery and Attempt, and may compact their
// payload): the caller must not touch them until every accepted one is done. Their tasks are
// allocated together and queued in one go, so a process's worker finds a run of them to
// write at once. It returns nil when every item was accepted, else one
// error per item (nil for those accepted): an error wrapping ErrBadItem, ErrClosed, or ctx's
// error when the wait for room in the queue ended. done may run before SubmitBatch returns.
// WithState gives the items their state as each attempt is written.
func (p *Pool) SubmitBatch(ctx context.Context, items []stdio.Item, done func(int, Result), opts ...SubmitOption) []error {
	var o submitOptions
	for _, opt := range opts {
		opt(&o)
	}
	tasks := make([]task, len(items))
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(items))
		}
		errs[i] = err
	}
	for i := range items {
		t := &tasks[i]
		t.item, t.each, t.index, t.stateOf = &items[i], done, i, o.stateOf
		payload, err := framePayload(t.item)
		if err != nil {
			fail(i, err)
			continue
		}
		t.item.Payload = payload
	}
	for i := range tasks {
		if errs != nil && errs[i] != nil {
			continue
		}
		if err := p.enqueue(ctx, &tasks[i]); err != nil {
			fail(i, err)
		}
	}
	return errs
}

// enqueue queues t, waiting while the queue is full (see Submit).
func (p *Pool) enqueue(ctx context.Context, t *task) error {
	switch {
	case t.item.Key != nil:
		t.key, t.keyed = *t.item.Key, true
	case t.item.KeyBase64 != "":
		t.key, t.keyed = "\x00base64:"+t.item.KeyBase64, true
	}
	p.mu.Lock()
	for p.outstanding >= p.queueSize && !p.isClosed() {
		if p.space == nil {
			p.space = make(chan struct{})
		}
		space := p.space
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closed:
		}
		p.mu.Lock()
	}
	if p.isClosed() {
		p.mu.Unlock()
		return fmt.Errorf("%w: item %s not accepted", ErrClosed, t.item.ID)
	}
	p.outstanding++
	if t.keyed {
		if q, active := p.keys[t.key]; active {
			if q == nil {
				q = &keyQueue{}
				p.keys[t.key] = q
			}
			q.items = append(q.items, t)
			p.mu.Unlock()
			return nil
		}
		p.keys[t.key] = nil
	}
	p.ready <- t
	p.mu.Unlock()
	return nil
}
