package e2e_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// errorsOf records what a check reports instead of failing the test.
type errorsOf struct {
	testing.TB
	errs []string
}

func (e *errorsOf) Helper() {}
func (e *errorsOf) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// TestVerifierCatches runs the verifier's checks on small hand-made outlets, right and broken
// each way: each broken one is caught by the check that names it, with its first offending id.
func TestVerifierCatches(t *testing.T) {
	inputs := map[string]produced{}
	for i, id := range []string{"a1", "a2", "a3", "b1"} {
		key := id[:1]
		inputs[id] = produced{id: id, key: key, partition: 0, offset: int64(i)}
	}
	out := func(ids ...string) []outRecord {
		var rs []outRecord
		for i, id := range ids {
			rs = append(rs, outRecord{&kgo.Record{Topic: "out", Offset: int64(i)}, id})
		}
		return rs
	}
	order := []struct {
		name     string
		ids      []string
		disorder int
	}{
		{"in order", []string{"a1", "b1", "a2", "a3"}, 0},
		{"redelivered", []string{"a1", "a2", "a1", "a2", "a3"}, 0},
		{"swapped", []string{"a1", "a3", "a2"}, 1},
		{"other keys interleaved", []string{"b1", "a2", "a1"}, 1},
	}
	for _, c := range order {
		var tl tally
		tl.checkOrder(out(c.ids...), inputs)
		if tl.disorder != c.disorder {
			t.Errorf("checkOrder(%v): disorder %d; want %d (%s)", c.ids, tl.disorder, c.disorder, tl.firstOf("disorder"))
		}
	}

	data := func(o int64) logEntry { return logEntry{o: o, producer: 7, transactional: true} }
	marker := func(o int64, abort bool) logEntry { return logEntry{o: o, producer: 7, control: true, abort: abort} }
	log := []logEntry{data(0), data(1), marker(2, true), data(3), marker(4, false), {o: 5, producer: 9}}
	read := func(offsets ...int64) []*kgo.Record {
		var rs []*kgo.Record
		for _, o := range offsets {
			rs = append(rs, &kgo.Record{Topic: "out", Offset: o})
		}
		return rs
	}
	var tl tally
	tl.checkAborted(log, read(3, 5))
	if tl.aborted != 2 || tl.abortedSeen != 0 {
		t.Errorf("checkAborted: aborted %d, seen %d; want 2 and 0", tl.aborted, tl.abortedSeen)
	}
	tl = tally{}
	tl.checkAborted(log, read(1, 3, 5))
	if tl.abortedSeen != 1 || !strings.Contains(tl.firstOf("aborted"), "@1") {
		t.Errorf("checkAborted with an aborted record read: seen %d (%s); want 1, offset 1", tl.abortedSeen, tl.firstOf("aborted"))
	}

	checks := []struct {
		name string
		tl   tally
		want string
	}{
		{"clean", tally{in: 3, out: 3}, ""},
		{"lost", tally{in: 3, out: 2, lost: 1}, "want lost 0"},
		{"unexpected", tally{in: 3, out: 3, unexpected: 1}, "want unexpected 0"},
		{"duplicated exactly once", tally{in: 3, out: 3, dup: 1, exactlyOnce: true}, "want duplicated 0"},
		{"duplicated at least once", tally{in: 3, out: 3, dup: 1}, ""},
		{"aborted read", tally{in: 3, out: 3, abortedSeen: 1, exactlyOnce: true}, "aborted transaction visible"},
		{"out of order", tally{in: 3, out: 3, disorder: 1}, "inputs' order"},
	}
	for _, c := range checks {
		c.tl.offend("lost", "id-0000042 (0@42)")
		rec := &errorsOf{TB: t}
		c.tl.check(rec)
		got := strings.Join(rec.errs, "\n")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("check(%s) = %q; want a failure holding %q", c.name, got, c.want)
		}
		if c.name == "lost" && !strings.Contains(got, "id-0000042") {
			t.Errorf("check(lost) = %q; want the first lost id named", got)
		}
	}
}

// TestDupSpans checks what a failed duplicate check says of where the copies are: the
// duplicated inputs summed by inlet partition and number of copies, with their offsets; and
// that checkDup fails past its bound and prints it.
func TestDupSpans(t *testing.T) {
	ps := []produced{
		{id: "a", partition: 0, offset: 0}, {id: "b", partition: 0, offset: 1}, {id: "c", partition: 0, offset: 2},
		{id: "d", partition: 0, offset: 3}, {id: "e", partition: 1, offset: 0}, {id: "f", partition: 1, offset: 1},
	}
	copies := map[string]int{"a": 1, "b": 3, "c": 3, "d": 2, "e": 1, "f": 3}
	got := formatSpans(dupSpans(ps, func(id string) int { return copies[id] }))
	want := "partition 0: 1 ×2 (offsets 3–3); partition 0: 2 ×3 (offsets 1–2); partition 1: 1 ×3 (offsets 1–1)"
	if got != want {
		t.Errorf("formatSpans = %q; want %q", got, want)
	}

	tl := tally{in: 6, out: 6, dup: 6, explain: func() string { return "copies by inlet partition: " + got }}
	rec := &errorsOf{TB: t}
	tl.checkDup(rec, 6)
	if len(rec.errs) != 0 {
		t.Errorf("checkDup(6) with 6 duplicates = %q; want no failure", rec.errs)
	}
	tl.checkDup(rec, 5)
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], want) {
		t.Errorf("checkDup(5) with 6 duplicates = %q; want one failure holding the copies' spans", rec.errs)
	}
}
