package sidecar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestFrozenMemberGetsItsPartitionsBack is issue 34's frozen sidecar (SIGSTOPped past its
// session, then continued), in both delivery modes: its partition is paused at high water
// (the process holds its batch) when its heartbeats stop; the group coordinator expires its
// session; when it continues, its next heartbeat learns UNKNOWN_MEMBER_ID, the partition is
// lost, and the rejoin assigns it back to the same sidecar. The partition must be fetched
// again: the client kept the pause across the loss (a revocation cleared the sidecar's flag
// without resuming the client), and the sidecar owned the partition for good without a record
// to send, logging nothing.
func TestFrozenMemberGetsItsPartitionsBack(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // stopping the heartbeats needs kfake
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			frozenMember(t, d)
		})
	}
}

func frozenMember(t *testing.T, d sidecar.Delivery) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	const n = 20
	b.Produce(t, records(in, 1, n)...)

	held, release := make(chan struct{}, 100), make(chan struct{})
	f := newProcess(t, nil)
	f.Async = true
	f.OnBatch = func(c *call) error {
		held <- struct{}{}
		<-release
		return echo(c)
	}
	e := baseEnv(t, b, f, in, out)
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "1" // high water at 4 records: 20 pause the partition
	e["FLOW_SESSION_TIMEOUT"] = "6s"           // kfake's least
	e["FLOW_DELIVERY"] = string(d)
	group := e["FLOW_CONSUMER_GROUP"]
	r := start(t, e.config(t))
	<-held
	waitFor(t, "the partition paused at high water", func() bool { return len(sidecar.Paused(r.sc, in)) == 1 })

	// The freeze: the member's heartbeats wait (on kfake, without holding its other work)
	// until the coordinator has expired its session.
	thaw := make(chan struct{})
	b.Cluster.ControlKey(int16(kmsg.Heartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-thaw:
			b.Cluster.DropControl()
		default:
			b.Cluster.KeepControl()
			b.Cluster.SleepControl(func() { <-thaw })
		}
		return nil, nil, false // then answered as usual: UNKNOWN_MEMBER_ID, once expired
	})
	adm := kadm.NewClient(b.Admin)
	waitFor(t, "the coordinator to expire the frozen member", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := adm.DescribeGroups(ctx, group)
		return err == nil && gs[group].Err == nil && len(gs[group].Members) == 0
	})
	close(thaw)
	waitFor(t, "the partition lost and assigned again", func() bool {
		return len(r.records.Attrs("partition revoked")) > 0 && len(r.records.Attrs("partition assigned")) > 1
	})
	close(release) // the process answers; the lost batch's answers are dropped

	b.Produce(t, records(in, 1, n)...)
	waitFor(t, "every record committed after the rejoin", func() bool {
		return allCommitted(t, b, group, in, map[int32]int64{0: 2 * n})
	})
	r.stop(t)
	seen := map[string]int{}
	for _, rec := range b.ReadAll(t, out) {
		seen[string(rec.Value)]++
	}
	for i := range n {
		v := fmt.Sprintf("v%d!", i)
		if seen[v] < 2 { // produced twice
			t.Errorf("record %q written %d times; want at least twice", v, seen[v])
		}
		if d == sidecar.ExactlyOnce && seen[v] != 2 {
			t.Errorf("record %q written %d times exactly once; want twice (it was produced twice)", v, seen[v])
		}
	}
}
