package sidecar_test

import (
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStallOnProduceFailure: an outlet that keeps refusing writes stalls the partitions of
// its acknowledged batches, and the stall is warned about.
func TestStallOnProduceFailure(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // the fault needs kfake
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	h := b.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: out, Err: kerr.TopicAuthorizationFailed, Count: -1})
	defer h.Remove()
	b.Produce(t, records(in, 1, 3)...)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_STALL_WARNING_AFTER"] = "20ms"
	r := start(t, e.config(t))
	waitFor(t, "the stall warned", func() bool { return r.stalled(in, 0, 0) })
}

// TestBrokerRefusals makes the broker itself refuse a write or a commit once. These faults
// need the in-process broker, so this test always runs on kfake: the sidecar fails the stream,
// commits nothing for the batch, and redelivers it.
func TestBrokerRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(in, out string) kfake.Fault
		cause string
	}{
		{name: "produce refused", cause: sidecar.CauseProduce, fault: func(_, out string) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: out, Err: kerr.TopicAuthorizationFailed}
		}},
		{name: "commit refused", cause: sidecar.CauseCommit, fault: func(in, _ string) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Topic: in, Err: kerr.TopicAuthorizationFailed}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testkit.EnvBrokers, "") // the fault needs kfake
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			h := b.Cluster.Fault(tc.fault(in, out))
			defer h.Remove()
			b.Produce(t, records(in, 1, 10)...)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			r := start(t, e.config(t))
			waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: 10}) })
			r.stop(t)
			if h.Hits() != 1 {
				t.Errorf("fault hits = %d; want 1", h.Hits())
			}
			if got := r.failures(tc.cause); len(got) == 0 {
				t.Errorf("stream failures = %v; want one of cause %s", r.failures(""), tc.cause)
			}
			var firsts []uint64
			for _, bt := range f.Batches() {
				if bt.Records[0].Offset == 0 {
					firsts = append(firsts, bt.BatchId)
				}
			}
			if len(firsts) < 2 || f.Conversations() < 2 {
				t.Errorf("offset 0 sent %d time(s) over %d conversation(s); want it redelivered by a second conversation", len(firsts), f.Conversations())
			}
		})
	}
}
