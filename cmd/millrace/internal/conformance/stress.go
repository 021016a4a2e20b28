package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio"
)

// padding returns an ASCII text of about n bytes that starts with the marker (non-ASCII text
// is the non-ascii check's: a fault there should fail that check alone).
func padding(n int) string {
	unit := "lorem ipsum dolor sit amet, consectetur adipiscing elit "
	var b strings.Builder
	b.Grow(n + len(unit))
	b.WriteString(marker + "padding ")
	for b.Len() < n {
		b.WriteString(unit)
	}
	s := b.String()
	if n >= len(s) { // the units ended exactly at n
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// large: the exemplar with a payload of about 1 MiB.
func (r *runner) large() {
	t0 := time.Now()
	s := r.open(checkLarge, r.a.Config, "")
	if !r.awaitMain(checkLarge, s, false) {
		return
	}
	it := r.exemplar()
	pad := padding(r.opts.PayloadSize)
	it.Payload = withField(it.Payload, "x-conformance-padding", pad)
	d := s.single(it)
	if d == nil {
		return
	}
	echoed := roundTrip(r, d, checkLarge, []string{pad})
	what := ""
	if echoed > 0 {
		what = ", and it came back unchanged"
	}
	r.passed(checkLarge, fmt.Sprintf("a %s payload answered %s in %s%s", sizeName(len(it.Payload)), d.outcome(), roundDur(d.latency), what), time.Since(t0))
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// burst: many copies of the exemplar written at once; every one answered, in order unless the
// action declared "concurrent": true in ready.
func (r *runner) burst() {
	if r.a.PerItem {
		r.passed(checkBurst, "does not apply with --per-item (one process per item)", 0)
		return
	}
	t0 := time.Now()
	s := r.open(checkBurst, r.a.Config, "")
	if !r.awaitMain(checkBurst, s, false) || !s.ok() {
		return
	}
	ex := r.exemplar()
	var sent []*delivery
	tw := time.Now()
	for i := range r.burstSize() {
		it := ex
		it.Offset = int64(10000 + i)
		it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
		it.IdempotencyKey = r.a.idempotencyKey(&it)
		sent = append(sent, s.send(-1, it, checkBurst))
	}
	s.await()
	took := time.Since(tw)
	s.finish()
	if len(s.order) < len(sent) {
		return
	}
	if s.concurrent { // it may answer as its work completes
		reordered := 0
		for i, d := range s.order {
			if d != sent[i] {
				reordered++
			}
		}
		r.passed(checkBurst, fmt.Sprintf("%d items written at once, all answered in %s (%.0f items/s), %d out of arrival order, as \"concurrent\": true in ready allows", len(sent), roundDur(took), float64(len(sent))/took.Seconds(), reordered), time.Since(t0))
		return
	}
	for i, d := range s.order {
		if d != sent[i] {
			r.fail(checkBurst, fmt.Sprintf("answers out of order: the answer to item %d of %d came where item %d's was due; answer items in the order they arrive (millrace writes items ahead with --window)", slices.Index(sent, d)+1, len(sent), i+1))
			return
		}
	}
	r.passed(checkBurst, fmt.Sprintf("%d items written at once, all answered in order in %s (%.0f items/s)", len(sent), roundDur(took), float64(len(sent))/took.Seconds()), time.Since(t0))
}

// burstSize is Options.Burst, or defaultBurst cut down for a slow action: about two seconds
// of items at the main conversation's mean answer time, at least minBurst.
func (r *runner) burstSize() int {
	if r.opts.Burst > 0 {
		return r.opts.Burst
	}
	if r.mainItems == 0 || r.mainLatency <= 0 {
		return defaultBurst
	}
	mean := r.mainLatency / time.Duration(r.mainItems)
	return max(minBurst, min(defaultBurst, int(2*time.Second/max(mean, time.Microsecond))))
}

// single delivers it alone in the session (a conversation of the session owner's own) and
// shuts it down; it returns the delivery, or nil when it got no answer (the failure or the
// skip is recorded).
func (s *session) single(it stdio.Item) *delivery {
	d := s.deliver(-1, it, s.owner)
	s.finish()
	if d == nil || d.answer == nil {
		return nil
	}
	return d
}
