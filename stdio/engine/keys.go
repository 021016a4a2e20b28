package engine

// keyQueue holds the items waiting behind the active item of one key, in Submit order.
type keyQueue struct {
	items []*task
	head  int
}

func (q *keyQueue) pop() *task {
	if q == nil || q.head == len(q.items) {
		return nil
	}
	t := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	return t
}

// final hands t its result, lets the next item of its key run and frees its queue slot.
func (p *Pool) final(t *task, res Result) {
	switch {
	case t.done != nil:
		t.done(res)
	case t.each != nil:
		t.each(t.index, res)
	}
	p.mu.Lock()
	if t.keyed {
		if q, ok := p.keys[t.key]; ok {
			if next := q.pop(); next != nil {
				p.ready <- next
			} else {
				delete(p.keys, t.key)
			}
		}
	}
	p.outstanding--
	if p.space != nil && p.outstanding <= p.lowWater {
		close(p.space)
		p.space = nil
	}
	if p.outstanding == 0 && p.isClosed() {
		close(p.drained)
	}
	p.mu.Unlock()
}
