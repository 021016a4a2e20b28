package sidecar_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestRebalanceRevokesMidBatch runs two sidecars in one group. A takes every partition and
// its process holds every batch; B joins, and the rebalance revokes some of A's partitions
// while their batches are with A's process, which does not answer within the revocation's
// wait (handOverTimeout): they are discarded. When A's process then emits and acknowledges
// everything, the revoked batches' emits and acks are dropped silently: A commits nothing
// for a partition it no longer owns, writes none of their emits, and does not fail its
// stream; B reads those partitions again from the last commit, and no record is lost.
func TestRebalanceRevokesMidBatch(t *testing.T) {
	const parts, n = 4, 40
	b, in, out, group, release, ra, rb := joinWhileHeld(t, parts, n)
	var moved []int32
	waitFor(t, "B to own partitions and commit them", func() bool {
		moved = sidecar.Owned(rb.sc, in)
		if len(moved) == 0 {
			return false
		}
		got := committed(t, b, group, in)
		want := ends(parts, n)
		for _, p := range moved {
			if got[p] != want[p] {
				return false
			}
		}
		return true
	})
	t.Logf("partitions moved from A to B: %v", moved)
	for _, p := range moved {
		if slices.Contains(sidecar.Owned(ra.sc, in), p) {
			t.Fatalf("partition %d owned by both sidecars", p)
		}
	}

	close(release) // A's process now answers every batch it held, revoked ones included
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
	waitFor(t, "A's remaining batches answered", func() bool { return ra.sc.Stats().BatchesCommitted >= parts-len(moved) })
	ra.stop(t)
	rb.stop(t)

	for _, p := range moved {
		if c := sidecar.CommitsFor(ra.sc, in, p); c != 0 {
			t.Errorf("A committed partition %d %d time(s) after it was revoked; want never", p, c)
		}
	}
	if got := ra.failures(""); len(got) > 0 {
		t.Errorf("A failed its stream over answers for revoked batches (%v); want them dropped silently", got)
	}
	if got := ra.sc.Stats().HandOverTimeouts; got == 0 {
		t.Errorf("Stats().HandOverTimeouts = %d; want the revoked partitions' batches discarded after the hand-over's wait", got)
	}
	total := b.Count(t, out)
	got := b.ReadN(t, out, int(total), waitTimeout)
	seen := map[string]bool{}
	for _, r := range got {
		by, part := header(r.Headers, "by"), header(r.Headers, "src")
		if by == "A" && slices.Contains(moved, int32(atoi(part))) {
			t.Errorf("A wrote %q from revoked partition %s", r.Value, part)
		}
		seen[string(r.Value)] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("v%d!", i)] {
			t.Errorf("record %d lost", i)
		}
	}
}

// answer emits every record of the batch, tagged with who processed it and from which
// partition, then acknowledges.
func answer(c *call, by string) error {
	for _, r := range c.Batch.Records {
		out := &flowv1.Record{Key: r.Record.Key, Value: append([]byte(string(r.Record.Value)), '!'), Headers: []*flowv1.Header{
			{Key: "by", Value: []byte(by)}, {Key: "src", Value: []byte(fmt.Sprint(c.Batch.Partition))},
		}}
		if err := c.Emit("out", out); err != nil {
			return err
		}
	}
	return c.Ack()
}

// TestRebalanceHandsOver runs two sidecars in one group at least once. A takes every
// partition and its process holds every batch; B joins, and the cooperative rebalance revokes
// some of A's partitions while their batches are with A's process. The revocation waits: A's
// process answers while it does, A writes those batches' emits and commits them before giving
// the partitions up, and B starts where A stopped. No record is processed twice.
func TestRebalanceHandsOver(t *testing.T) {
	const parts, n = 4, 40
	b, in, out, group, release, ra, rb := joinWhileHeld(t, parts, n)
	var revoking []int32
	waitFor(t, "A's revocation waiting for its batches", func() bool {
		revoking = sidecar.Revoking(ra.sc, in)
		return len(revoking) > 0
	})
	close(release) // A's process answers what it holds while the revocation waits
	waitFor(t, "B to own partitions", func() bool { return len(sidecar.Owned(rb.sc, in)) > 0 })
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
	ra.stop(t)
	rb.stop(t)

	for _, p := range revoking {
		if c := sidecar.CommitsFor(ra.sc, in, p); c == 0 {
			t.Errorf("A never committed partition %d, revoked while its batch was out; want its batch committed before the hand-over", p)
		}
	}
	if got := ra.sc.Stats().HandOverTimeouts; got != 0 {
		t.Errorf("Stats().HandOverTimeouts = %d; want the batches answered while the revocation waited", got)
	}
	got := b.ReadN(t, out, int(b.Count(t, out)), waitTimeout)
	seen := map[string]int{}
	for _, r := range got {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%d!", i); seen[v] != 1 {
			t.Errorf("record %d written %d times; want once", i, seen[v])
		}
	}
}

// TestRebalanceWritesBeforeHandOver: A's batches are acknowledged but their writes are held at
// the broker when B joins and the rebalance revokes some of A's partitions. The revocation
// waits for the writes and commits them before giving the partitions up: B starts after them,
// and no record is written twice (a revocation that gave the partitions up at once left those
// writes uncommitted, and B wrote the records again).
func TestRebalanceWritesBeforeHandOver(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding the writes needs kfake
	b := newBroker(t)
	const parts, n = 4, 40
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	release := make(chan struct{})
	held := holdWrites(t, b, out, release)
	b.Produce(t, records(in, parts, n)...)

	fa := newProcess(t, func(c *call) error { return answer(c, "A") })
	ea := baseEnv(t, b, fa, in, out)
	group := ea["FLOW_CONSUMER_GROUP"]
	ra := start(t, ea.config(t))
	<-held // A's acknowledged batches wait to be written

	fb := newProcess(t, func(c *call) error { return answer(c, "B") })
	eb := baseEnv(t, b, fb, in, out)
	eb["FLOW_CONSUMER_GROUP"] = group
	rb := start(t, eb.config(t))
	waitFor(t, "A's revocation waiting for its writes", func() bool { return len(sidecar.Revoking(ra.sc, in)) > 0 })
	close(release)
	waitFor(t, "B to own partitions", func() bool { return len(sidecar.Owned(rb.sc, in)) > 0 })
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
	ra.stop(t)
	rb.stop(t)

	seen := map[string]int{}
	for _, r := range b.ReadN(t, out, int(b.Count(t, out)), waitTimeout) {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%d!", i); seen[v] != 1 {
			t.Errorf("record %d written %d times; want once", i, seen[v])
		}
	}
}

// joinWhileHeld starts sidecar A on a new group over n records on parts partitions, its
// process holding every batch until release is closed, waits until every partition's first
// batch is with A's process, then starts sidecar B in the same group (its process answers at
// once), so that the rebalance revokes some of A's partitions while their batches are out.
func joinWhileHeld(t *testing.T, parts int32, n int) (b *testkit.Broker, in, out, group string, release chan struct{}, ra, rb *running) {
	t.Helper()
	b = newBroker(t)
	in, out = b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	b.Produce(t, records(in, parts, n)...)

	held := make(chan *call, 100)
	release = make(chan struct{})
	fa := newProcess(t, nil)
	fa.Async = true
	fa.OnBatch = func(c *call) error {
		held <- c
		<-release
		return answer(c, "A")
	}
	ea := baseEnv(t, b, fa, in, out)
	group = ea["FLOW_CONSUMER_GROUP"]
	ra = start(t, ea.config(t))
	for range parts {
		<-held // every partition's first batch is with A's process
	}

	fb := newProcess(t, func(c *call) error { return answer(c, "B") })
	eb := baseEnv(t, b, fb, in, out)
	eb["FLOW_CONSUMER_GROUP"] = group
	rb = start(t, eb.config(t))
	return b, in, out, group, release, ra, rb
}
