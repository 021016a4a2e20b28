package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// concurrentItems is how many items the concurrent check writes at once.
const concurrentItems = 32

// concurrentCheck: for an action that declares "concurrent": true in ready, items of distinct
// keys written at once, each carrying a marker of its own: every one answered exactly once, in
// any order, and no delivery's outputs carry another item's marker (a concurrent handler that
// mixes up its deliveries' messages). Out-of-order answers and interleaved messages are
// counted, not required: the action is free to answer as its work completes.
func (r *runner) concurrentCheck() {
	if r.a.PerItem {
		r.passed(checkConcurrent, "does not apply with --per-item (one process per item)", 0)
		return
	}
	t0 := time.Now()
	s := r.open(checkConcurrent, r.a.Config, "")
	if !r.awaitMain(checkConcurrent, s, false) || !s.ok() {
		return
	}
	if !s.concurrent {
		s.finish()
		r.passed(checkConcurrent, `does not apply: the action does not declare "concurrent": true in ready`, time.Since(t0))
		return
	}
	ex := r.exemplar()
	marks := make([]string, concurrentItems)
	var sent []*delivery
	for i := range marks {
		it := r.variant(ex, 50000+i)
		marks[i] = fmt.Sprintf("%sconcurrent-%d", marker, i)
		if it.Key != nil || it.KeyBase64 != "" { // the engine never has two of one key in flight
			k := marks[i]
			it.Key, it.KeyBase64 = &k, ""
		}
		it.Payload = withField(it.Payload, "x-conformance-concurrent", marks[i])
		sent = append(sent, s.send(-1, it, checkConcurrent))
	}
	s.await()
	s.finish()
	if len(s.order) < len(sent) {
		return
	}
	echoed := 0
	for i, d := range sent {
		for j, e := range d.emits {
			var v any
			if json.Unmarshal(e.Payload, &v) != nil {
				continue
			}
			walkStrings(v, fmt.Sprintf("emits[%d].payload", j), func(where, str string) {
				if !strings.HasPrefix(str, marker+"concurrent-") {
					return
				}
				if str == marks[i] {
					echoed++
					return
				}
				r.fail(checkConcurrent, fmt.Sprintf("delivery %s (written with %s) has %s in %s, the text of another item written with it: answer each delivery with its own item's result (keep what belongs to a delivery with its task: contextvars, AsyncLocalStorage, a closure), and name the delivery it belongs to in every message", d.item.Delivery, marks[i], str, where))
			})
		}
	}
	reordered := 0
	for i, d := range s.order {
		if d != sent[i] {
			reordered++
		}
	}
	what := "none of the markers came back in the outputs, so only the answers were checked"
	if echoed > 0 {
		what = fmt.Sprintf("%d outputs carried their own item's marker, none another's", echoed)
	}
	r.passed(checkConcurrent, fmt.Sprintf("%d items of distinct keys written at once, each answered once (%d out of arrival order, %d deliveries' messages interleaved with another's); %s", len(sent), reordered, s.interleaved, what), time.Since(t0))
}

// cancelCheck: for an action that declares "cancel": true in ready, a cancel for a delivery it
// never had (ignored), then an item and its cancel written together (in one envelope to an
// action that declared batch): the item must get a final answer within the engine's cancel
// grace, and the items after it are still answered.
func (r *runner) cancelCheck() {
	if r.a.PerItem {
		r.passed(checkCancel, "does not apply with --per-item (one process per item)", 0)
		return
	}
	t0 := time.Now()
	s := r.open(checkCancel, r.a.Config, "")
	if !r.awaitMain(checkCancel, s, false) || !s.ok() {
		return
	}
	if !s.cancel {
		s.finish()
		r.passed(checkCancel, `does not apply: the action does not declare "cancel": true in ready`, time.Since(t0))
		return
	}
	ex := r.exemplar()
	s.p.write(stdio.AppendMessage(nil, &stdio.Message{Type: stdio.TypeCancel, Delivery: "dl-cancel-never-given"}))
	it := r.variant(ex, 40000)
	s.number(&it)
	line := appendItem(nil, &it)
	d := s.track(-1, it, checkCancel, line)
	cancel := stdio.AppendMessage(nil, &stdio.Message{Type: stdio.TypeCancel, Delivery: it.Delivery})
	out := stdio.Packer{Single: !s.batch}
	out.AppendLine(bytes.TrimSuffix(line, []byte("\n")))
	out.AppendLine(bytes.TrimSuffix(cancel, []byte("\n")))
	s.p.write(bytes.Clone(out.Bytes()))
	s.cancelled = d
	s.await()
	s.cancelled = nil
	if !s.ok() || d.answer == nil {
		return
	}
	later := 0
	for i := range 2 {
		if ld := s.deliver(-1, r.variant(ex, 40001+i), checkCancel); ld == nil || ld.answer == nil {
			return
		}
		later++
	}
	s.finish()
	how := "on lines of their own"
	if s.batch {
		how = "in one envelope"
	}
	r.passed(checkCancel, fmt.Sprintf("an item and its cancel written together (%s) answered %s in %s, within the %s cancel grace; a cancel for a delivery never given ignored; %d later items answered", how, d.outcome(), roundDur(d.latency), engine.CancelGrace, later), time.Since(t0))
}

// cancelWait is how long the cancel check waits for a cancelled delivery's final answer: the
// engine's grace, or the run's answer wait when shorter.
func (r *runner) cancelWait() time.Duration {
	if r.wait > 0 && r.wait < engine.CancelGrace {
		return r.wait
	}
	return engine.CancelGrace
}

// noteInterleave counts a message of delivery id that comes while another delivery's messages
// are under way (that one in flight, its last message not its answer).
func (s *session) noteInterleave(id string, terminal bool) {
	if s.open != "" && s.open != id {
		if _, ok := s.inflight[s.open]; ok && !slices.Contains(s.mixed, s.open) {
			s.mixed = append(s.mixed, s.open)
			s.interleaved++
		}
	}
	s.open = id
	if terminal {
		s.open = ""
	}
}
