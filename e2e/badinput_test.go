package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// Bad input end to end. Each case runs with and without --dead-letter on a one-partition inlet:
// good records, then the bad ones, then good records again. A case either flows (every record
// out, or dead-lettered with a millrace-error header holding want) or stalls at its first bad
// record (nothing after it committed, want in the sidecar's or bridge's log, the records
// still in Kafka for a fixed version to read). Nothing may be lost either way.

// outcome is what a case must end in.
type outcome int

const (
	flows  outcome = iota // every record committed: out or dead-lettered
	stalls                // committed up to the first bad record, and no further
)

type badCase struct {
	name  string
	mode  string   // the child action's mode
	flags []string // more words of the action config line
	env   []string // more FLOW_* variables of the sidecar
	// bad returns the bad records, numbered from first.
	bad func(first int) []*kgo.Record
	// without and with --dead-letter: the outcome and the text the error must hold.
	noDL, withDL outcome
	wantNoDL     string
	wantDL       string
	// check, when set, checks the output records of a flowing case (e.g. exact bytes).
	check func(t *testing.T, in []*kgo.Record, tl tally)
}

func poison(first int) []*kgo.Record {
	return []*kgo.Record{{Key: fmt.Appendf(nil, "id-%07d", first), Value: fmt.Appendf(nil, `{"id":"id-%07d","poison":true}`, first)}}
}

func badCases() []badCase {
	binaryKey := func(i int) []byte { return []byte{0xff, 0xfe, 0x00, byte(i), 0x80, 'k'} }
	return []badCase{
		{
			name: "value-not-json", mode: childEcho,
			bad: func(first int) []*kgo.Record {
				return []*kgo.Record{
					{Key: fmt.Appendf(nil, "id-%07d", first), Value: []byte("{not json")},
					{Key: fmt.Appendf(nil, "id-%07d", first+1), Value: []byte("plain text, é")},
				}
			},
			noDL: stalls, withDL: flows,
			wantNoDL: "produce JSON values to the inlet", wantDL: "produce JSON values to the inlet",
		},
		{
			name: "empty-value", mode: childEcho,
			bad: func(first int) []*kgo.Record {
				return []*kgo.Record{{Key: fmt.Appendf(nil, "id-%07d", first), Value: nil}}
			},
			noDL: flows, withDL: flows,
			check: func(t *testing.T, in []*kgo.Record, tl tally) {
				for _, r := range in {
					if len(r.Value) == 0 {
						out := tl.outRecords[string(r.Key)]
						if len(out) != 1 || string(out[0].Value) != "null" {
							t.Errorf("empty value in = %d output records %q; want one with the value null (the payload of an empty value)", len(out), values(out))
						}
					}
				}
			},
		},
		{
			name: "record-over-message-limit", mode: childEcho,
			env: []string{"FLOW_MAX_MESSAGE_BYTES=64Ki", "FLOW_INLET_IN_BATCH_MAX_BYTES=32Ki"},
			bad: func(first int) []*kgo.Record {
				return []*kgo.Record{{Key: fmt.Appendf(nil, "id-%07d", first), Value: fmt.Appendf(nil, `{"id":"id-%07d","pad":"%s"}`, first, strings.Repeat("p", 100<<10))}}
			},
			noDL: stalls, withDL: stalls,
			wantNoDL: "larger than the message limit", wantDL: "larger than the message limit",
		},
		{
			name: "binary-key-and-headers", mode: childEcho,
			bad: func(first int) []*kgo.Record {
				var rs []*kgo.Record
				for i := range 3 {
					rs = append(rs, &kgo.Record{Key: binaryKey(first + i), Value: fmt.Appendf(nil, `{"n":%d}`, first+i),
						Headers: []kgo.RecordHeader{{Key: "bin", Value: []byte{0x00, 0xc3, 0x28, 0xff}}, {Key: "text", Value: []byte("ok")}, {Key: "empty", Value: nil}}})
				}
				return rs
			},
			noDL: flows, withDL: flows,
			check: checkExact,
		},
		{
			name: "non-ascii", mode: childEcho,
			bad: func(first int) []*kgo.Record {
				return []*kgo.Record{{Key: fmt.Appendf(nil, "ключ-é-日本-%d", first), Value: []byte(`{"text":"héllo ✓ 日本 🚀","ﬁ":"\u00e9"}`),
					Headers: []kgo.RecordHeader{{Key: "città", Value: []byte("Zürich ✓")}}}}
			},
			noDL: flows, withDL: flows,
			check: checkExact,
		},
		{
			name: "action-never-ready", mode: childNeverReady, flags: []string{"--ready-timeout", "2s"},
			bad:  func(int) []*kgo.Record { return nil },
			noDL: stalls, withDL: stalls,
			wantNoDL: "ready timeout", wantDL: "ready timeout",
		},
		{
			name: "action-exits-at-start", mode: childExitAtStart,
			bad:  func(int) []*kgo.Record { return nil },
			noDL: stalls, withDL: stalls,
			wantNoDL: childExitMessage, wantDL: childExitMessage,
		},
		{
			name: "action-floods-stderr", mode: childFloodStderr,
			bad:  func(int) []*kgo.Record { return nil },
			noDL: flows, withDL: flows,
			wantNoDL: childFloodLine, wantDL: childFloodLine,
		},
		{
			name: "action-garbage-on-stdout", mode: childGarbage,
			bad:  poison,
			noDL: stalls, withDL: flows,
			wantNoDL: "not a JSON object", wantDL: "not a JSON object",
		},
		{
			name: "action-9MiB-line", mode: childHugeLine,
			bad:  poison,
			noDL: stalls, withDL: flows,
			wantNoDL: "8 MiB", wantDL: "8 MiB",
		},
		{
			name: "action-emits-to-undeclared-outlet", mode: childUndeclared,
			bad:  poison,
			noDL: stalls, withDL: flows,
			wantNoDL: `names outlet \"nowhere\", which the action config does not declare`, wantDL: `names outlet "nowhere", which the action config does not declare`,
		},
		{
			name: "action-emit-over-max-message-bytes", mode: childOverMax,
			bad:  poison,
			noDL: stalls, withDL: flows,
			wantNoDL: "max_message_bytes", wantDL: "max_message_bytes",
		},
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	for _, c := range badCases() {
		for _, dead := range []bool{false, true} {
			name := c.name + "/no-dead-letter"
			if dead {
				name = c.name + "/dead-letter"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				runBad(t, b, c, dead)
			})
		}
	}
}

func runBad(t *testing.T, b *broker, c badCase, dead bool) {
	a := child(c.mode, dead, c.flags...)
	pl := newPipeline(t, b, a, 1, c.env...)
	r := pl.start(0)
	const good = 10
	in := pl.records(0, good)
	badRecs := c.bad(good)
	in = append(in, badRecs...)
	in = append(in, pl.records(good+len(badRecs), good)...)
	pl.produce(in...)

	want, oc := c.wantNoDL, c.noDL
	if dead {
		want, oc = c.wantDL, c.withDL
	}
	stallSeen := ""
	switch oc {
	case flows:
		pl.waitDone(90 * time.Second)
	case stalls:
		firstBad := good
		if len(badRecs) == 0 {
			firstBad = 0 // the action itself is bad: nothing can pass
		}
		// Outside a cluster the stall warning goes to the log: its line there is the product.
		if !testkit.Eventually(60*time.Second, func() bool { return r.sidecar.LogHas(`"partition stalled"`) }) {
			t.Errorf("no PartitionStalled warning in the sidecar's log within 60 s (FLOW_STALL_WARNING_AFTER=3s; the sidecar checks stalls when a stream fails, so the warning comes with the first failure after 3 s)")
		} else {
			stallSeen = "; stall warning logged"
		}
		// The batch is the unit: a batch holding the bad record fails whole, so the commit
		// may stop before the good records ahead of it, never after the bad one.
		if n, _ := pl.committedCount(); n > firstBad {
			t.Errorf("committed %d records; want at most %d (nothing past the first bad record)", n, firstBad)
		}
	}
	tl := pl.tally()
	tl.check(t)

	seen := ""
	switch {
	case oc == flows && dead && want != "" && c.mode != childFloodStderr:
		if len(tl.deadRecords) == 0 {
			t.Errorf("no record was dead-lettered; want the bad ones with millrace-error holding %q", want)
		}
		for _, r := range tl.deadRecords {
			h := header(r, "millrace-error")
			if !strings.Contains(h, want) {
				t.Errorf("dead letter %q: millrace-error = %q; want it to hold %q", r.Key, h, want)
			}
			if header(r, "millrace-source-offset") == "" || header(r, "millrace-source-topic") != pl.inTopic {
				t.Errorf("dead letter %q: source headers %v; want millrace-source-topic %s and an offset", r.Key, r.Headers, pl.inTopic)
			}
			seen = "dead letter millrace-error: " + h
		}
		if tl.dead != len(badRecs) {
			t.Errorf("dead-lettered %d records; want %d (the bad ones)", tl.dead, len(badRecs))
		}
	case want != "":
		// Bad input must be named where the operator looks, the two containers' logs: the
		// words are the product.
		line := firstLine(r.sidecar.LogLines(want, 1))
		if line == "" {
			line = firstLine(r.bridge.LogLines(want, 1))
		}
		if line == "" {
			t.Errorf("neither the sidecar's nor the bridge's log holds %q\n%s", want, pl.logTails(15))
		}
		seen = "log: " + logMessage(line)
	}
	if oc == flows && c.check != nil {
		c.check(t, in, tl)
	}
	if oc == flows && tl.out+tl.dead != tl.in {
		t.Errorf("tally = %s; want every record out or dead-lettered", tl)
	}
	pl.report("bad input: "+c.name, tl, seen+stallSeen)
}

// checkExact checks that every input record came out once with the same key, value and
// headers, byte for byte.
func checkExact(t *testing.T, in []*kgo.Record, tl tally) {
	for _, r := range in {
		out := tl.outRecords[string(r.Key)]
		if len(out) != 1 {
			t.Errorf("key %q: %d output records; want 1", r.Key, len(out))
			continue
		}
		o := out[0]
		if !bytes.Equal(o.Value, r.Value) {
			t.Errorf("key %q: value out = %q; want %q", r.Key, o.Value, r.Value)
		}
		// The bridge adds a traceparent to every output (a child of the attempt's span): the
		// input's headers come before it, unchanged.
		hs := o.Headers
		if n := len(hs); n == 0 || hs[n-1].Key != "traceparent" || len(hs[n-1].Value) != 55 {
			t.Errorf("key %q: headers out = %q; want the input's, then the bridge's traceparent", r.Key, headerPairs(hs))
		} else {
			hs = hs[:n-1]
		}
		if fmt.Sprint(headerPairs(hs)) != fmt.Sprint(headerPairs(r.Headers)) {
			t.Errorf("key %q: headers out = %q; want %q", r.Key, headerPairs(hs), headerPairs(r.Headers))
		}
	}
}

func headerPairs(hs []kgo.RecordHeader) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Key+"="+string(h.Value))
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func values(rs []*kgo.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.Value))
	}
	return out
}

// logMessage returns the telling part of a JSON log line: its error, or its message and the
// action's line; anything else as it is.
func logMessage(line string) string {
	var l struct {
		Msg   string `json:"msg"`
		Error string `json:"error"`
		Line  string `json:"line"`
	}
	if json.Unmarshal([]byte(line), &l) != nil {
		return line
	}
	if l.Error != "" {
		return l.Msg + ": " + l.Error
	}
	return strings.TrimSpace(l.Msg + " " + l.Line)
}
