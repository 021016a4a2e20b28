package sidecar_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// eosEnv is baseEnv in exactly-once mode, as pod pod.
func eosEnv(t testing.TB, b *testkit.Broker, f *fakeProcess, in, out, pod string) env {
	e := baseEnv(t, b, f, in, out)
	e["FLOW_DELIVERY"] = "exactly-once"
	e["FLOW_POD_NAME"] = pod
	return e
}

// holdTxnProduce holds the first produce request of transactional id txnID at kfake until
// release is called; held is closed once it is held.
func holdTxnProduce(b *testkit.Broker, txnID string) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p := req.(*kmsg.ProduceRequest)
		if p.TransactionID == nil || *p.TransactionID != txnID {
			return nil, nil, false
		}
		b.Cluster.DropControl()
		close(h)
		b.Cluster.SleepControl(func() { <-r })
		return nil, nil, false
	})
	return h, func() { once.Do(func() { close(r) }) }
}

// exactlyOnce reads out as read_committed and as read_uncommitted, and checks that every
// input value came out exactly once to the read_committed reader.
func exactlyOnce(t *testing.T, b *testkit.Broker, out string, n int) (committed, all []*kgo.Record) {
	t.Helper()
	committed, all = b.ReadAll(t, out), b.ReadAllUncommitted(t, out)
	seen := map[string]int{}
	for _, r := range committed {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%d!", i); seen[v] != 1 {
			t.Errorf("read_committed: %q out %d times; want exactly once", v, seen[v])
		}
	}
	if len(committed) != n {
		t.Errorf("read_committed: %d records; want %d", len(committed), n)
	}
	return committed, all
}

// TestExactlyOnceHappyPath: every record out once to a read_committed reader, and a round
// whose batches emitted nothing (every record skipped) still commits its offsets.
func TestExactlyOnceHappyPath(t *testing.T) {
	b := newBroker(t)
	const parts, n = 4, 200
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	skip := b.Topic(t, "skip", 1)
	f := newProcess(t, echo)
	e := eosEnv(t, b, f, in, out, "pod-0")
	b.Produce(t, records(in, parts, n)...)
	r := start(t, e.config(t))
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(parts, n)) })
	r.stop(t)
	committed, all := exactlyOnce(t, b, out, n)
	if len(all) != len(committed) {
		t.Errorf("read_uncommitted: %d records, read_committed %d; want no aborted write on the happy path", len(all), len(committed))
	}
	for _, rec := range committed {
		if !rec.Attrs.IsTransactional() {
			t.Fatalf("read_committed: %q was not written in a transaction", rec.Value)
		}
	}

	fs := newProcess(t, func(c *call) error { return c.Ack() })
	es := eosEnv(t, b, fs, skip, out, "pod-1")
	b.Produce(t, records(skip, 1, 30)...)
	start(t, es.config(t))
	waitFor(t, "the skipped records committed", func() bool { return allCommitted(t, b, es["FLOW_CONSUMER_GROUP"], skip, map[int32]int64{0: 30}) })
}

// TestExactlyOnceAbortOnStreamFailure fails the stream while the first round's transaction
// is open (its produce held at the broker): the transaction is aborted, a read_committed
// reader never sees its emits, and the next conversation writes every record once.
func TestExactlyOnceAbortOnStreamFailure(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding a request needs kfake
	b := newBroker(t)
	const n = 10
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, nil)
	e := eosEnv(t, b, f, in, out, "pod-0")
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "5"
	cfg := e.config(t)
	held, release := holdTxnProduce(b, cfg.TransactionalID)
	defer release()
	f.OnBatch = func(c *call) error {
		if c.Conv > 1 || c.Batch.Records[0].Offset == 0 {
			return echo(c) // the first batch is acknowledged; its round's produce is held
		}
		<-held
		if err := c.Fail("boom"); err != nil {
			return err
		}
		<-c.Done() // the sidecar ended the stream with the transaction open
		release()
		return nil
	}
	b.Produce(t, records(in, 1, n)...)
	r := start(t, cfg)
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: n}) })
	r.stop(t)

	committed, all := exactlyOnce(t, b, out, n)
	for _, rec := range committed {
		if conv := header(rec.Headers, "conv"); conv == "1" {
			t.Errorf("read_committed: %q from the failed conversation; want it aborted", rec.Value)
		}
	}
	aborted := 0
	for _, rec := range all {
		if header(rec.Headers, "conv") == "1" {
			aborted++
		}
	}
	if aborted != 5 {
		t.Errorf("read_uncommitted: %d records of the failed conversation; want its first batch's 5, written and aborted", aborted)
	}
	if got := r.failures(sidecar.CauseFailedBatch); len(got) == 0 {
		t.Errorf("stream failures = %v; want one of cause %s, which aborted the transaction", r.failures(""), sidecar.CauseFailedBatch)
	}
}

// TestExactlyOnceRevokeMidTransaction: A's first round is in an open transaction (its produce
// held at the broker) when B joins the group and takes partitions. The transaction is
// aborted; nothing of a revoked batch commits (no offset, no emit to a read_committed
// reader); A writes the batches it still owns again, B reads the moved partitions from the
// last commit, and every record comes out once.
func TestExactlyOnceRevokeMidTransaction(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding a request needs kfake
	b := newBroker(t)
	const parts, n = 4, 40
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	b.Produce(t, records(in, parts, n)...)

	fa := newProcess(t, func(c *call) error { return answer(c, "A") })
	ea := eosEnv(t, b, fa, in, out, "pod-a")
	group := ea["FLOW_CONSUMER_GROUP"]
	cfgA := ea.config(t)
	held, release := holdTxnProduce(b, cfgA.TransactionalID)
	defer release()
	ra := start(t, cfgA)
	<-held

	fb := newProcess(t, func(c *call) error { return answer(c, "B") })
	eb := eosEnv(t, b, fb, in, out, "pod-b")
	eb["FLOW_CONSUMER_GROUP"] = group
	rb := start(t, eb.config(t))
	var moved []int32
	waitFor(t, "B to own partitions and commit them", func() bool {
		moved = sidecar.Owned(rb.sc, in)
		if len(moved) == 0 {
			return false
		}
		got, want := committed(t, b, group, in), ends(parts, n)
		for _, p := range moved {
			if got[p] != want[p] {
				return false
			}
		}
		return true
	})
	t.Logf("partitions moved from A to B: %v", moved)
	release()
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
	ra.stop(t)
	rb.stop(t)

	for _, p := range moved {
		if c := sidecar.CommitsFor(ra.sc, in, p); c != 0 {
			t.Errorf("A committed partition %d %d time(s) after it was revoked; want never", p, c)
		}
	}
	committedRecs, all := exactlyOnce(t, b, out, n)
	for _, rec := range committedRecs {
		if header(rec.Headers, "by") == "A" && slices.Contains(moved, int32(atoi(header(rec.Headers, "src")))) {
			t.Errorf("read_committed: A wrote %q from revoked partition %s", rec.Value, header(rec.Headers, "src"))
		}
	}
	if len(all) <= len(committedRecs) {
		t.Errorf("read_uncommitted: %d records, read_committed %d; want the held transaction's writes aborted", len(all), len(committedRecs))
	}
	if got := ra.failures(""); len(got) > 0 {
		t.Errorf("A failed its stream over the rebalance (%v); want the transaction aborted and retried", got)
	}
}

// TestExactlyOnceZombieFenced runs two sidecars with one transactional id (a pod restarted
// while its predecessor still runs). A holds a batch with its process; B starts, which fences
// A, and processes everything. When A's process then acknowledges, A's transaction is refused
// with a fencing error: A's Run returns ErrFenced, nothing of A reaches a read_committed
// reader and A commits no offset.
func TestExactlyOnceZombieFenced(t *testing.T) {
	b := newBroker(t)
	const n = 20
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	b.Produce(t, records(in, 1, n)...)

	got, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fa := newProcess(t, func(c *call) error {
		once.Do(func() { close(got) })
		select {
		case <-release:
		case <-c.Done():
			return nil
		}
		return answer(c, "A")
	})
	ea := eosEnv(t, b, fa, in, out, "pod-0")
	cfgA := ea.config(t)
	ra := start(t, cfgA)
	<-got

	fb := newProcess(t, func(c *call) error { return answer(c, "B") })
	eb := eosEnv(t, b, fb, in, out, "pod-0")
	eb["FLOW_CONSUMER_GROUP"] = "other-" + ea["FLOW_CONSUMER_GROUP"] // its own group: the fence, not a rebalance
	cfgB := eb.config(t)
	cfgB.TransactionalID = cfgA.TransactionalID
	rb := start(t, cfgB)
	waitFor(t, "B to commit everything", func() bool { return allCommitted(t, b, eb["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: n}) })

	close(release)
	var err error
	select {
	case err = <-ra.done:
		close(ra.done)
	case <-time.After(waitTimeout):
		t.Fatalf("A's Run did not return within %s of its fenced commit\n%s", waitTimeout, ra.logs.String())
	}
	if !errors.Is(err, sidecar.ErrFenced) || !strings.Contains(err.Error(), cfgA.TransactionalID) {
		t.Errorf("A's Run() = %v; want ErrFenced naming transactional id %q", err, cfgA.TransactionalID)
	}
	rb.stop(t)
	if c := committed(t, b, ea["FLOW_CONSUMER_GROUP"], in); c[0] != 0 {
		t.Errorf("A's group committed offset %d; want nothing from a fenced sidecar", c[0])
	}
	committedRecs, _ := exactlyOnce(t, b, out, n)
	for _, rec := range committedRecs {
		if header(rec.Headers, "by") != "B" {
			t.Errorf("read_committed: %q written by %s; want only B's", rec.Value, header(rec.Headers, "by"))
		}
	}
}

// TestExactlyOnceOutletRefuses: an outlet that refuses every write (max.message.bytes below
// any batch of emits) aborts each transaction, stalls the partition with a warning and
// commits nothing; once the outlet accepts the records again, every record comes out once.
// The limit leaves room for a transaction's marker (about 80 bytes): Kafka fails a marker
// over it as fatal and the transaction stays open for good.
func TestExactlyOnceOutletRefuses(t *testing.T) {
	b := newBroker(t)
	const n = 6
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1, "max.message.bytes", "150")
	f := newProcess(t, func(c *call) error {
		for _, r := range c.Batch.Records {
			pad := &flowv1.Header{Key: "pad", Value: []byte(strings.Repeat("x", 200))}
			if err := c.Emit("out", &flowv1.Record{Key: r.Record.Key, Value: append(r.Record.Value, '!'), Headers: []*flowv1.Header{pad}}); err != nil {
				return err
			}
		}
		return c.Ack()
	})
	e := eosEnv(t, b, f, in, out, "pod-0")
	e["FLOW_STALL_WARNING_AFTER"] = "20ms"
	b.Produce(t, records(in, 1, n)...)
	r := start(t, e.config(t))
	waitFor(t, "the stall warned", r.stallWarned)
	if c := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); c[0] != 0 {
		t.Errorf("committed offset %d while the outlet refused every write; want nothing", c[0])
	}
	deleteTopicConfig(t, b, out, "max.message.bytes") // the broker's default again
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: n}) })
	r.stop(t)
	exactlyOnce(t, b, out, n)
}
