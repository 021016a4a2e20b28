package sidecar_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/sidecar"
)

// TestWatchdogRecoversAStuckPartition strands a partition on purpose (its first batch counts as
// sent but never goes: nothing in flight, records waiting) while the other flows. On the
// sidecar's clock, FLOW_STUCK_AFTER later the watchdog logs it once with its state, counts it
// in millrace_sidecar_stuck_partitions_total, and sends its records again: every record is
// committed. Both delivery modes.
func TestWatchdogRecoversAStuckPartition(t *testing.T) {
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
			const n = 20
			b.Produce(t, records(in, 2, n)...)
			e := baseEnv(t, b, newProcess(t, echo), in, out)
			e["FLOW_DELIVERY"] = string(d)
			e["FLOW_COMMIT_INTERVAL"] = "0" // a commit after every round: no commit waits on the clock
			e["FLOW_STUCK_AFTER"] = "10s"
			addr := freeAddr(t)
			e["FLOW_METRICS_ADDR"] = addr
			group := e["FLOW_CONSUMER_GROUP"]
			clock := newFakeClock()
			var dropped atomic.Bool
			r := startTuned(t, e.config(t), func(s *sidecar.Sidecar) {
				sidecar.SetClock(s, clock.now, clock.after)
				sidecar.SetDropBatch(s, func(topic string, p int32) bool { return topic == in && p == 1 && dropped.CompareAndSwap(false, true) })
			})
			end := ends(2, n)
			waitFor(t, "partition 0 committed and partition 1's batch dropped", func() bool {
				return dropped.Load() && committed(t, b, group, in)[0] == end[0]
			})
			if got := committed(t, b, group, in)[1]; got != 0 {
				t.Fatalf("partition 1 committed at %d with its only batch dropped; want nothing", got)
			}
			if got := r.records.Attrs(sidecar.MsgStuck); len(got) != 0 {
				t.Fatalf("stuck before FLOW_STUCK_AFTER: %v", got)
			}
			// The watchdog checks four times per FLOW_STUCK_AFTER on the sidecar's clock.
			waitFor(t, "the watchdog to recover partition 1", func() bool {
				clock.advance(2500 * time.Millisecond)
				return allCommitted(t, b, group, in, end)
			})
			reports := r.records.Attrs(sidecar.MsgStuck)
			if len(reports) != 1 {
				t.Fatalf("the stuck partition was logged %d times; want once: %v", len(reports), reports)
			}
			if a := reports[0]; a["topic"] != in || a["partition"] != int64(1) || a["queued"] != int64(n/2) || a["sent"] != int64(n/2) || a["in_flight"] != false {
				t.Errorf("the stuck partition's log says %v; want topic %s partition 1, %d queued and sent, none in flight", a, in, n/2)
			}
			waitMetrics(t, addr, "the stuck partition counted", func(m exposition) bool {
				return m.v("millrace_sidecar_stuck_partitions_total", "topic", in) == 1
			})
			seen := map[string]int{}
			for _, rec := range b.ReadAll(t, out) {
				seen[string(rec.Value)]++
			}
			for i := range n {
				if v := string(records(in, 2, n)[i].Value) + "!"; seen[v] != 1 {
					t.Errorf("record %d written %d times; want once", i, seen[v])
				}
			}
		})
	}
}

// TestWatchdogRecoversAPartitionTheClientStopped is issue 34's stranding itself, made on
// purpose: after a fetch, the Kafka client pauses the partition behind the sidecar's back,
// so records produced after it are never fetched. The watchdog sees them waiting in Kafka
// (the end beyond the fetch position), reports the client's pause, and recovers: the client
// resumes the partition and fetches it from the last commit.
func TestWatchdogRecoversAPartitionTheClientStopped(t *testing.T) {
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			const n = 10
			b.Produce(t, records(in, 1, n)...)
			e := baseEnv(t, b, newProcess(t, echo), in, out)
			e["FLOW_DELIVERY"] = string(d)
			e["FLOW_COMMIT_INTERVAL"] = "0"
			e["FLOW_STUCK_AFTER"] = "10s"
			group := e["FLOW_CONSUMER_GROUP"]
			clock := newFakeClock()
			var paused atomic.Bool
			r := startTuned(t, e.config(t), func(s *sidecar.Sidecar) {
				sidecar.SetClock(s, clock.now, clock.after)
				sidecar.SetLagRefresh(s, 20*time.Millisecond)
				sidecar.SetPauseBehind(s, func(string, int32) bool { return paused.CompareAndSwap(false, true) })
			})
			waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, map[int32]int64{0: n}) })
			b.Produce(t, records(in, 1, n)...)
			waitFor(t, "the sidecar to see the new records in Kafka", func() bool { return sidecar.End(r.sc, in, 0) == 2*n })
			waitFor(t, "the watchdog to recover the partition", func() bool {
				clock.advance(2500 * time.Millisecond)
				return allCommitted(t, b, group, in, map[int32]int64{0: 2 * n})
			})
			reports := r.records.Attrs(sidecar.MsgStuck)
			if len(reports) != 1 {
				t.Fatalf("the stuck partition was logged %d times; want once: %v", len(reports), reports)
			}
			if a := reports[0]; a["client_paused"] != true || a["paused"] != false || a["position"] != int64(n) || a["end"] != int64(2*n) {
				t.Errorf("the stuck partition's log says %v; want the client paused, the sidecar not, position %d, end %d", a, n, 2*n)
			}
			if got := len(b.ReadAll(t, out)); got < 2*n {
				t.Errorf("%d records written; want at least %d", got, 2*n)
			}
		})
	}
}

// TestWatchdogIdleAfterTransactions: an inlet written in transactions ends in a commit
// marker, past the last record and the group's commit, and holds an aborted transaction's
// records too. Neither is a record waiting: an idle partition there is never stuck, however
// long the sidecar's clock runs.
func TestWatchdogIdleAfterTransactions(t *testing.T) {
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			const n = 10
			txn, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.TransactionalID("upstream-"+in),
				kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			ctx := context.Background()
			for _, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
				if err := txn.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := txn.ProduceSync(ctx, records(in, 1, n)...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := txn.EndTransaction(ctx, commit); err != nil {
					t.Fatal(err)
				}
			}
			// Each transaction is its records and its marker; the broker writes the markers
			// after EndTransaction returns.
			end := int64(2 * (n + 1))
			waitFor(t, "both markers written", func() bool {
				ends, err := b.EndOffsets(ctx, in)
				return err == nil && ends[0] == end
			})
			e := baseEnv(t, b, newProcess(t, echo), in, out)
			e["FLOW_DELIVERY"] = string(d)
			e["FLOW_COMMIT_INTERVAL"] = "0"
			e["FLOW_STUCK_AFTER"] = "10s"
			group := e["FLOW_CONSUMER_GROUP"]
			clock := newFakeClock()
			r := startTuned(t, e.config(t), func(s *sidecar.Sidecar) {
				sidecar.SetClock(s, clock.now, clock.after)
				sidecar.SetLagRefresh(s, 20*time.Millisecond)
			})
			// The last record is one before the commit marker, the partition's last offset.
			waitFor(t, "the committed transaction's records committed", func() bool {
				return allCommitted(t, b, group, in, map[int32]int64{0: end - 1})
			})
			waitFor(t, "the sidecar to see the partition's end", func() bool { return sidecar.End(r.sc, in, 0) == end })
			steps := 0
			waitFor(t, "the sidecar's clock to run 10 FLOW_STUCK_AFTER", func() bool {
				clock.advance(2500 * time.Millisecond)
				steps++
				return steps >= 40
			})
			if got := r.records.Attrs(sidecar.MsgStuck); len(got) != 0 {
				t.Errorf("an idle partition after transactions reported stuck: %v", got)
			}
		})
	}
}
