package sidecar_test

import (
	"testing"

	"github.com/ankka-flow/millrace/sidecar"
)

// TestOutletRecreated deletes the outlet topic mid-run: the writes fail, nothing is
// committed, and once the topic exists again the sidecar resumes (a fresh producer learns the
// new topic) and commits everything.
func TestOutletRecreated(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	group := e["FLOW_CONSUMER_GROUP"]
	r := start(t, e.config(t))
	b.Produce(t, records(in, 1, 5)...)
	waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, map[int32]int64{0: 5}) })

	deleteTopic(t, b, out)
	b.Produce(t, records(in, 1, 5)...)
	waitFor(t, "a produce failure", func() bool { return len(r.failures(sidecar.CauseProduce)) > 0 })
	if got := committed(t, b, group, in); got[0] != 5 {
		t.Fatalf("committed while the outlet was gone = %v; want still 5", got)
	}
	createTopicNamed(t, b, out, 1)
	waitFor(t, "the rest committed once the outlet is back", func() bool { return allCommitted(t, b, group, in, map[int32]int64{0: 10}) })
}
