package e2e_test

import (
	"fmt"
	"strings"
	"testing"
)

// errRecorder is a testing.TB that records Errorf instead of failing, so the count checks
// can be shown to fail.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Helper() {}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestStateChecksCatch feeds the count checks a small run, right and then broken each way a
// sidecar could break it, and wants each broken one caught by the check that names it.
func TestStateChecksCatch(t *testing.T) {
	t.Parallel()
	// Key a: partition 0 offsets 0-2; key b: partition 1 offsets 0-1.
	tr := countTruth{index: map[at]int{}, keyOf: map[at]string{}, count: map[string]int{"a": 3, "b": 2}, part: map[string]int32{"a": 0, "b": 1}}
	for i := range 3 {
		tr.index[at{0, int64(i)}], tr.keyOf[at{0, int64(i)}] = i+1, "a"
	}
	for i := range 2 {
		tr.index[at{1, int64(i)}], tr.keyOf[at{1, int64(i)}] = i+1, "b"
	}
	out := func(p int32, o int64, k string, saw int) countOut {
		return countOut{P: p, O: o, K: k, Saw: saw, N: saw + 1}
	}
	good := func() map[at][]countOut {
		return map[at][]countOut{
			{0, 0}: {out(0, 0, "a", 0)}, {0, 1}: {out(0, 1, "a", 1)}, {0, 2}: {out(0, 2, "a", 2)},
			{1, 0}: {out(1, 0, "b", 0)}, {1, 1}: {out(1, 1, "b", 1)},
		}
	}
	goodLog := func() map[string][]changelogEntry {
		return map[string][]changelogEntry{
			"a": {{0, 0, 2}, {0, 2, 3}}, // a batch writes a key's last count only
			"b": {{1, 1, 2}},
		}
	}
	cases := []struct {
		name  string
		exact bool
		outs  func(map[at][]countOut)
		log   func(map[string][]changelogEntry)
		want  string // in the errors; "" for none
	}{
		{name: "exactly once, right", exact: true},
		{name: "at least once, right"},
		{name: "at least once, a record delivered again", outs: func(o map[at][]countOut) {
			o[at{0, 2}] = append(o[at{0, 2}], out(0, 2, "a", 3))
		}, log: func(l map[string][]changelogEntry) { l["a"] = append(l["a"], changelogEntry{0, 3, 4}) }},
		{name: "exactly once, a duplicate", exact: true, outs: func(o map[at][]countOut) {
			o[at{0, 2}] = append(o[at{0, 2}], out(0, 2, "a", 2))
		}, want: "2 outputs, want 1"},
		{name: "exactly once, a stale state", exact: true, outs: func(o map[at][]countOut) {
			o[at{0, 1}] = []countOut{out(0, 1, "a", 0)}
		}, want: "saw 0 and made 1, want 1 and 2"},
		{name: "exactly once, a total off", exact: true, log: func(l map[string][]changelogEntry) {
			l["b"] = append(l["b"], changelogEntry{1, 2, 3})
		}, want: "last count 3, want exactly 2"},
		{name: "a lost output", outs: func(o map[at][]countOut) { delete(o, at{1, 0}) }, want: "no output"},
		{name: "a count going down", log: func(l map[string][]changelogEntry) {
			l["a"] = []changelogEntry{{0, 0, 2}, {0, 1, 1}, {0, 2, 3}}
		}, want: "changelog count 1 at 0@1 after 2"},
		{name: "a state in the wrong partition", log: func(l map[string][]changelogEntry) {
			l["b"] = []changelogEntry{{0, 5, 2}}
		}, want: "but its input is in partition 1"},
		{name: "at least once, over the redeliveries", log: func(l map[string][]changelogEntry) {
			l["a"] = append(l["a"], changelogEntry{0, 3, 4})
		}, want: "want 3 to 3"},
		{name: "at least once, a count no delivery made", outs: func(o map[at][]countOut) {
			o[at{1, 1}] = append(o[at{1, 1}], out(1, 1, "b", 3))
		}, log: func(l map[string][]changelogEntry) { l["b"] = []changelogEntry{{1, 1, 2}, {1, 4, 4}} }, want: "no delivery made 3"},
	}
	for _, c := range cases {
		o, l := good(), goodLog()
		if c.outs != nil {
			c.outs(o)
		}
		if c.log != nil {
			c.log(l)
		}
		rec := &errRecorder{TB: t}
		if c.exact {
			checkCountsExact(rec, tr, o, l)
		} else {
			checkAtLeastOnce(rec, tr, o, l)
		}
		got := strings.Join(rec.errs, "\n")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: the checks failed it:\n%s", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: the checks said %q; want an error holding %q", c.name, got, c.want)
		}
	}
}
