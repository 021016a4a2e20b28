package conformance

import (
	"bytes"
	"fmt"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// Sizes of the batch check: the items of its first envelope, and of the envelope that fills
// the line limit.
const (
	batchItems = 16
	limitItems = 4
)

// batchCheck: for an action that declares "batch": true in ready, items as the engine writes
// them to it: several in one envelope, then one on a line of its own, then an envelope that
// fills the line limit exactly; every one must be answered, in envelopes or single lines. The
// action's own envelopes are judged wherever they come (framing: a malformed one, or one from
// an action that did not declare them).
func (r *runner) batchCheck() {
	if r.a.PerItem {
		r.passed(checkBatch, "does not apply with --per-item (one process per item)", 0)
		return
	}
	t0 := time.Now()
	s := r.open(checkBatch, r.a.Config, "")
	if !r.awaitMain(checkBatch, s, false) || !s.ok() {
		return
	}
	if !s.batch {
		s.finish()
		r.passed(checkBatch, `does not apply: the action does not declare "batch": true in ready`, time.Since(t0))
		return
	}
	ex := r.exemplar()
	items := make([]stdio.Item, batchItems)
	for i := range items {
		items[i] = r.variant(ex, 20000+i)
	}
	s.sendBatch(items, stdio.MaxLineBytes)
	s.await()
	s.deliver(-1, r.variant(ex, 20000+batchItems), checkBatch)
	if !s.ok() {
		return
	}
	s.sendBatch(s.fill(r.variant(ex, 30000), limitItems, stdio.MaxLineBytes), stdio.MaxLineBytes)
	s.await()
	s.finish()
	if len(s.answered) < batchItems+1+limitItems {
		return
	}
	r.mu.Lock()
	envelopes := r.envelopes
	r.mu.Unlock()
	r.passed(checkBatch, fmt.Sprintf("%d items in one envelope, one on its own line and %d in an envelope of %s (the line limit) all answered (%d answer envelopes read in the run)", batchItems, limitItems, sizeName(stdio.MaxLineBytes), envelopes), time.Since(t0))
}

// variant is ex as the record at offset off.
func (r *runner) variant(ex stdio.Item, off int) stdio.Item {
	it := ex
	it.Offset = int64(off)
	it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
	it.IdempotencyKey = r.a.idempotencyKey(&it)
	return it
}

// sendBatch writes items as the engine does to an action that declared envelopes: packed into
// envelopes of at most max bytes, one too large for any on a line of its own.
func (s *session) sendBatch(items []stdio.Item, max int) {
	p := stdio.Packer{Max: max}
	for _, it := range items {
		if it.Delivery == "" {
			s.number(&it)
		}
		line := stdio.AppendItem(nil, &it)
		s.track(-1, it, checkBatch, line)
		p.AppendLine(bytes.TrimSuffix(line, []byte("\n")))
	}
	s.p.write(bytes.Clone(p.Bytes()))
}

// fill returns n variants of ex, numbered as the session's next deliveries, padded so that
// one envelope of them is exactly limit bytes long (its newline not counted).
func (s *session) fill(ex stdio.Item, n, limit int) []stdio.Item {
	items := make([]stdio.Item, n)
	size := stdio.BatchOverhead + n - 1 // the envelope and the commas between its messages
	for i := range items {
		items[i] = s.r.variant(ex, int(ex.Offset)+i)
		s.number(&items[i])
		items[i].Payload = withField(ex.Payload, "x-conformance-padding", "")
		size += len(stdio.AppendItem(nil, &items[i])) - 1
	}
	room := limit - size // ASCII padding: each byte of it one byte of the line
	for i := range items {
		pad := room / n
		if i == n-1 {
			pad = room - (n-1)*(room/n)
		}
		items[i].Payload = withField(ex.Payload, "x-conformance-padding", padding(pad))
	}
	return items
}
