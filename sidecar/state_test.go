package sidecar_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestStateRestoredBeforeFirstBatch: the changelog holds k1=41 before the sidecar starts; the
// first batch's BatchState holds it, so the count goes on from it, and the changelog and the
// store say 43 after two more records. Without a TTL, the store keeps no TTL index.
func TestStateRestoredBeforeFirstBatch(t *testing.T) {
	st := newStateSetup(t, 1, false)
	st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k1"), Value: []byte("41")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: []byte("7")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: nil})
	st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k1"), Value: []byte("x")},
		&kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k0"), Value: []byte("x")},
		&kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k1"), Value: []byte("x")})
	r := st.start(t, nil)
	outs := st.b.ReadN(t, st.out, 3, waitTimeout)
	got := lastCounts(outs)
	if got["k1"] != 43 || got["k0"] != 1 {
		t.Fatalf("counts %v, want k1=43 (from the restored 41) and k0=1 (its state deleted)", got)
	}
	waitFor(t, "the changelog holds the new counts", func() bool {
		v := changelogValues(t, st.b, st.changelog)
		return v["k1"] == "43" && v["k0"] == "1"
	})
	waitFor(t, "the store holds k1=43", func() bool {
		v, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k1")
		return ok && v == "43"
	})
	if sidecar.TTLIndexed(t, r.sc, st.in, 0) {
		t.Fatal("the store of an inlet without a TTL has a TTL index; want none (nobody sweeps it)")
	}
	st.sb.mu.Lock()
	first := st.sb.seen[0]
	st.sb.mu.Unlock()
	if first != "k1=41" {
		t.Fatalf("the first batch saw %s, want k1=41", first)
	}

	// The state metrics: the full restore applied the changelog's 3 records, the batch's
	// 2 states were written, the store holds 2 keys, nothing restores.
	waitFor(t, "the state metrics", func() bool {
		m := testkit.Gather(t, r.sc.Registry())
		restored, _ := m.Value("millrace_sidecar_state_restored_records_total", "topic", st.changelog)
		full, _ := m.Value("millrace_sidecar_state_full_restores_total", "topic", st.changelog, "reason", "empty")
		sets, _ := m.Value("millrace_sidecar_state_writes_total", "topic", st.changelog, "kind", "set")
		keys, _ := m.Value("millrace_sidecar_state_keys", "topic", st.changelog, "partition", "0")
		size, _ := m.Value("millrace_sidecar_state_bytes", "topic", st.changelog, "partition", "0")
		restoring, ok := m.Value("millrace_sidecar_state_restoring", "topic", st.changelog, "partition", "0")
		return restored == 3 && full == 1 && sets == 2 && keys == 2 && size > 0 && ok && restoring == 0
	})
}

// TestStateStagedNotInFlight: a Staged for a batch never sent fails the stream as a protocol
// violation, naming the batch; the records are delivered again and counted once.
func TestStateStagedNotInFlight(t *testing.T) {
	st := newStateSetup(t, 1, false)
	count := st.sb.counter(false)
	var once sync.Once
	st.f.OnBatch = func(c *call) error {
		bad := false
		once.Do(func() { bad = true })
		if bad {
			if _, ok := st.sb.states(c); !ok {
				return nil
			}
			return st.sb.staged(c.Batch.BatchId+1000, map[string]string{"k0": "1"})
		}
		return count(c)
	}
	r := st.start(t, nil)
	st.produceKeys(t, 0, 1, 3)
	outs := st.b.ReadN(t, st.out, 3, waitTimeout)
	checkChains(t, outs)
	fs := r.failures(sidecar.CauseProtocol)
	if len(fs) == 0 || !strings.Contains(fs[0].Error(), "a Staged for batch") {
		t.Fatalf("protocol failures %v; want one naming the Staged's batch", fs)
	}
}

// TestStateBatchTrimmed: the states of a batch's keys count with its records against the
// inlet's batch.max-bytes: with 150-byte states and a 200-byte limit, a batch holds one key
// (several records of it fit) until the counts' states are small again, and the counts are
// right.
func TestStateBatchTrimmed(t *testing.T) {
	st := newStateSetup(t, 1, false)
	st.e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = "200"
	big := func(n int) []byte { return fmt.Appendf(nil, "%0150d", n) }
	for k := range 4 {
		st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: fmt.Appendf(nil, "p0-k%d", k), Value: big(10)})
	}
	count := st.sb.counter(false)
	var mu sync.Mutex
	var sizes [][2]int // per batch: its keys, its records and states' bytes
	st.f.OnBatch = func(c *call) error {
		states, ok := st.sb.states(c)
		if !ok {
			return nil
		}
		n, keys := 0, map[string]bool{}
		for _, r := range c.Batch.Records {
			n += len(r.Record.Key) + len(r.Record.Value)
			keys[string(r.Record.Key)] = true
		}
		for k, v := range states {
			n += len(k) + len(v)
		}
		mu.Lock()
		sizes = append(sizes, [2]int{len(keys), n})
		mu.Unlock()
		return count(c)
	}
	st.start(t, nil)
	st.produceKeys(t, 0, 4, 12)
	outs := st.b.ReadN(t, st.out, 12, waitTimeout)
	for _, o := range outs {
		n, _ := strconv.Atoi(string(o.Value))
		if n < 11 || n > 13 {
			t.Fatalf("key %s counted %d, want 11 to 13 (from the restored 10)", o.Key, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if sizes[0][0] != 1 {
		t.Fatalf("the first batch holds %d keys with their 150-byte states; want one", sizes[0][0])
	}
	for _, s := range sizes {
		if s[0] > 1 && s[1] > 200 {
			t.Fatalf("a batch of %d keys holds %d bytes of records and states, over the 200-byte limit", s[0], s[1])
		}
	}
}

// TestStateJoinBothOrders counts 3 keys in each of 2 partitions, 60 records, with the Staged before
// the Ack and after it: every key's outputs count 1, 2, 3... with no gap nor repeat, and the
// changelog's last values are the totals.
func TestStateJoinBothOrders(t *testing.T) {
	for _, ackFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("ackFirst=%v", ackFirst), func(t *testing.T) {
			st := newStateSetup(t, 2, ackFirst)
			st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "4"
			st.start(t, nil)
			st.produceKeys(t, 0, 3, 30)
			st.produceKeys(t, 1, 3, 30)
			outs := st.b.ReadN(t, st.out, 60, waitTimeout)
			checkChains(t, outs)
			waitFor(t, "the changelog holds every total", func() bool {
				v := changelogValues(t, st.b, st.changelog)
				return len(v) == 6 && v["p0-k0"] == "10" && v["p1-k2"] == "10" && v["p0-k1"] == "10"
			})
		})
	}
}

// checkChains checks that each key's outputs, in order, count 1, 2, 3...
func checkChains(t *testing.T, outs []*kgo.Record) {
	t.Helper()
	next := map[string]int{}
	for _, r := range outs {
		k := string(r.Key)
		n, _ := strconv.Atoi(string(r.Value))
		if n != next[k]+1 {
			t.Fatalf("key %s: output %d after %d", k, n, next[k])
		}
		next[k] = n
	}
}

// failOnce wraps a process's answer: its nth batch (of every conversation together) is failed
// once, with nothing staged, which fails the stream.
func failOnce(n int, answer func(*call) error) func(*call) error {
	var mu sync.Mutex
	calls := 0
	return func(c *call) error {
		mu.Lock()
		calls++
		fail := calls == n
		mu.Unlock()
		if fail {
			return c.Fail("the test fails this batch once")
		}
		return answer(c)
	}
}

// TestStateNewConversationCatchesUp fails the stream once mid-run (at least once): the next
// conversation drops the overlay and catches up from the changelog, so no key's count starts
// over; as stated for at least once, a redelivered record may count again, and the changelog,
// the store and the outputs agree on each key's last count.
func TestStateNewConversationCatchesUp(t *testing.T) {
	st := newStateSetup(t, 2, false)
	st.f.OnBatch = failOnce(4, st.sb.counter(false))
	st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
	r := st.start(t, nil)
	st.produceKeys(t, 0, 2, 20)
	st.produceKeys(t, 1, 2, 20)
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, st.b, st.e["FLOW_CONSUMER_GROUP"], st.in, map[int32]int64{0: 20, 1: 20})
	})
	if r.sc.Conversations() < 2 {
		t.Fatalf("%d conversations, want the failure to start a second", r.sc.Conversations())
	}
	outs := st.b.ReadAll(t, st.out)
	ones := map[string]int{}
	for _, o := range outs {
		if string(o.Value) == "1" {
			ones[string(o.Key)]++
		}
	}
	for k, n := range ones {
		if n > 1 {
			t.Errorf("key %s counted from 1 %d times: the new conversation did not catch up its state", k, n)
		}
	}
	last := lastCounts(outs)
	v := changelogValues(t, st.b, st.changelog)
	for k, n := range last {
		if n < 10 || v[k] != strconv.Itoa(n) {
			t.Errorf("key %s: last output %d, changelog %q; want them equal, at least 10", k, n, v[k])
		}
		p := int32(0)
		if k[1] == '1' {
			p = 1
		}
		waitFor(t, "the store holds the changelog's count of "+k, func() bool {
			got, _ := sidecar.StateOf(t, r.sc, st.in, p, k)
			return got == v[k]
		})
		if n := sidecar.Overlay(r.sc, st.in, p); n != 0 {
			t.Errorf("partition %d holds %d states in its overlay after every commit; want none", p, n)
		}
	}
}

// TestStateExactlyOnce fails the stream once mid-run in exactly-once mode, while the open
// transaction holds states: its outputs and states are aborted together, the batches are
// delivered again with the committed states, and a read_committed reader sees every key count
// 1, 2, 3... to its exact total, in the outputs and in the changelog.
//
// The sidecar runs on a clock the test moves, so the transaction holding the states cannot
// end before the failure: the clock stands still from the first half's last commit on. Each
// move is half the commit interval and the test checks for that commit before each, so the
// one move that may follow it leaves the next commit not yet due.
func TestStateExactlyOnce(t *testing.T) {
	st := newStateSetup(t, 2, true)
	count := st.sb.counter(true)
	// Once armed, the second batch fails, when the states of the first are in the open
	// transaction.
	var armed, calls atomic.Int32
	var sc atomic.Pointer[sidecar.Sidecar]
	st.f.OnBatch = func(c *call) error {
		if armed.Load() == 1 && calls.Add(1) == 2 {
			waitFor(t, "states in the open transaction", func() bool { return sidecar.TxnStates(sc.Load()) > 0 })
			return c.Fail("the test fails this batch once")
		}
		return count(c)
	}
	st.e["FLOW_DELIVERY"] = "exactly-once"
	st.e["FLOW_POD_NAME"] = "pod-a"
	st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
	st.e["FLOW_COMMIT_INTERVAL"] = "2s"
	clock := newFakeClock()
	r := startTuned(t, st.e.config(t), func(s *sidecar.Sidecar) { sidecar.SetClock(s, clock.now, clock.after) })
	sc.Store(r.sc)
	// committedOnClock moves the clock until the sidecar has committed n records, checking
	// before each move. The conversation's Open is waited for first: its 10 s clock is this
	// one too.
	committedOnClock := func(what string, conversations int, n int64) {
		waitFor(t, "the process's Open", func() bool { return st.sb.opened() >= conversations })
		waitFor(t, what, func() bool {
			if r.sc.Stats().RecordsCommitted >= n {
				return true
			}
			clock.advance(time.Second)
			return false
		})
	}
	group := st.e["FLOW_CONSUMER_GROUP"]
	st.produceKeys(t, 0, 2, 10)
	st.produceKeys(t, 1, 2, 10)
	committedOnClock("the first half committed", 1, 20)
	waitFor(t, "the first half's offsets", func() bool {
		return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 10, 1: 10})
	})
	armed.Store(1)
	st.produceKeys(t, 0, 2, 10)
	st.produceKeys(t, 1, 2, 10)
	committedOnClock("every record committed", 2, 40)
	waitFor(t, "every offset committed", func() bool {
		return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 20, 1: 20})
	})
	if r.sc.Conversations() < 2 {
		t.Fatalf("%d conversations, want the failure to start a second", r.sc.Conversations())
	}
	aborted := r.records.Attrs("stream failed: the open transaction is aborted; its batches are delivered again")
	if len(aborted) == 0 || aborted[0]["batches"].(int64) == 0 {
		t.Fatalf("aborted transactions %v; want the failure to abort one holding batches and their states", aborted)
	}
	outs := st.b.ReadAll(t, st.out)
	if len(outs) != 40 {
		t.Fatalf("read_committed: %d outputs, want exactly 40", len(outs))
	}
	checkChains(t, outs)
	v := changelogValues(t, st.b, st.changelog)
	for _, k := range []string{"p0-k0", "p0-k1", "p1-k0", "p1-k1"} {
		if v[k] != "10" {
			t.Errorf("read_committed changelog: %s=%q, want exactly 10", k, v[k])
		}
	}
}

// TestStateMovesWithRebalance runs sidecar A on 4 partitions, then B joins the group: the
// partitions that move are restored by B before its first batch of them, so every key's
// outputs count on without a restart, and the totals are exact, in both delivery modes. A
// keeps the files of the partitions it gave up (FLOW_STATE_KEEP_REVOKED).
func TestStateMovesWithRebalance(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			const parts = 4
			st := newStateSetup(t, parts, false)
			st.e["FLOW_DELIVERY"] = mode
			st.e["FLOW_POD_NAME"] = "pod-a"
			st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
			group := st.e["FLOW_CONSUMER_GROUP"]
			ra := st.start(t, nil)
			for p := range int32(parts) {
				st.produceKeys(t, p, 2, 10)
			}
			waitFor(t, "A commits the first half", func() bool {
				return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10})
			})

			rb, sbB := st.startPeer(t, "pod-b")
			var moved []int32
			waitFor(t, "B owns partitions", func() bool {
				moved = sidecar.Owned(rb.sc, st.in)
				return len(moved) > 0 && len(moved) < parts
			})
			waitFor(t, "the rebalance settles", func() bool {
				return len(sidecar.Owned(ra.sc, st.in))+len(sidecar.Owned(rb.sc, st.in)) == parts
			})
			for p := range int32(parts) {
				st.produceKeys(t, p, 2, 10)
			}
			waitFor(t, "every record committed", func() bool {
				return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 20, 1: 20, 2: 20, 3: 20})
			})
			outs := st.b.ReadAll(t, st.out)
			if len(outs) != 80 {
				t.Fatalf("%d outputs, want 80 (no fault: each record once)", len(outs))
			}
			checkChains(t, outs)
			sbB.mu.Lock()
			seen := append([]string(nil), sbB.seen...)
			sbB.mu.Unlock()
			for _, s := range seen {
				if s[len(s)-1] == '=' {
					t.Errorf("B's first batch of %s saw no state: the moved partition was not restored", s)
				}
			}
			if len(seen) == 0 {
				t.Fatalf("B saw no batch of the moved partitions %v", moved)
			}
			for _, p := range moved {
				if _, ok := sidecar.StateOf(t, ra.sc, st.in, p, fmt.Sprintf("p%d-k0", p)); ok {
					t.Errorf("A still serves the state of partition %d it gave up", p)
				}
				if !sidecar.KeptFile(ra.sc, st.in, p) {
					t.Errorf("A did not keep the file of partition %d it gave up", p)
				}
			}

			// B leaves: A takes the moved partitions back and catches their kept files up
			// with what B wrote, without a full restore.
			rb.stop(t)
			v := changelogValues(t, st.b, st.changelog)
			for _, p := range moved {
				k := fmt.Sprintf("p%d-k0", p)
				waitFor(t, "A serves "+k+" as B left it", func() bool {
					got, ok := sidecar.StateOf(t, ra.sc, st.in, p, k)
					return ok && got == v[k] && !sidecar.Restoring(ra.sc, st.in, p)
				})
			}
			m := testkit.Gather(t, ra.sc.Registry())
			if full, _ := m.Value("millrace_sidecar_state_full_restores_total", "topic", st.changelog, "reason", "empty"); full != parts {
				t.Errorf("A made %v full restores of new files; want %d, the partitions given back caught up from their kept files", full, parts)
			}
		})
	}
}

// TestStateExpiredOnRead: with a TTL of 1 h in the Open and the sidecar's clock 2 h ahead of
// the changelog's timestamps, the restored k1=41 has expired: the batch's BatchState leaves it
// out and the count starts over.
func TestStateExpiredOnRead(t *testing.T) {
	st := newStateSetup(t, 1, false)
	st.sb.ttlMs = uint64(time.Hour.Milliseconds())
	st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k1"), Value: []byte("41")})
	st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k1"), Value: []byte("x")})
	startTuned(t, st.e.config(t), func(sc *sidecar.Sidecar) {
		sidecar.SetClock(sc, func() time.Time { return time.Now().Add(2 * time.Hour) }, time.After)
	})
	outs := st.b.ReadN(t, st.out, 1, waitTimeout)
	if string(outs[0].Value) != "1" {
		t.Fatalf("k1 counted %s; want 1, its restored state past the TTL", outs[0].Value)
	}
}

// TestStateStagedForRevokedBatch (exactly once, where a revocation discards at once): A's
// process holds a batch until B has joined and taken partitions; its Staged and Ack then come
// for batches possibly revoked, which are dropped without failing A's stream, and the totals
// are exact.
func TestStateStagedForRevokedBatch(t *testing.T) {
	const parts = 2
	st := newStateSetup(t, parts, false)
	st.e["FLOW_DELIVERY"] = "exactly-once"
	st.e["FLOW_POD_NAME"] = "pod-a"
	group := st.e["FLOW_CONSUMER_GROUP"]
	release := make(chan struct{})
	count := st.sb.counter(false)
	st.f.Async = true
	st.f.OnBatch = func(c *call) error {
		select {
		case <-release:
		case <-c.Done():
			return nil
		}
		return count(c)
	}
	ra := st.start(t, nil)
	for p := range int32(parts) {
		st.produceKeys(t, p, 2, 10)
	}
	waitFor(t, "A sends its batches", func() bool { return ra.sc.Stats().BatchesSent >= parts })

	rb, _ := st.startPeer(t, "pod-b")
	waitFor(t, "B owns a partition", func() bool { return len(sidecar.Owned(rb.sc, st.in)) > 0 })
	close(release)
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 10, 1: 10})
	})
	if fs := ra.failures(""); len(fs) > 0 {
		t.Fatalf("A's stream failed (%v); want the revoked batch's Staged and Ack dropped", fs)
	}
	outs := st.b.ReadAll(t, st.out)
	if len(outs) != 20 {
		t.Fatalf("read_committed: %d outputs, want exactly 20", len(outs))
	}
	checkChains(t, outs)
}

// failWrites fails the produce request that carries topic's nth record (from 1), the topic
// named or given by its id, with INVALID_RECORD, which franz-go does not retry: every record
// of that request fails. It counts records, not requests: the sidecar writes the rounds its
// commit loop takes, and a loop slow to wake takes two batches' states in one round, one
// request (a count of requests then waits for a write that never comes).
func failWrites(t *testing.T, b *testkit.Broker, topic string, nth int) {
	t.Helper()
	id := topicID(t, b, topic)
	var seen atomic.Int32
	b.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		var n int32
		for _, tp := range pr.Topics {
			if tp.Topic == topic || tp.TopicID == id {
				for _, p := range tp.Partitions {
					n += recordsIn(t, p.Records)
				}
			}
		}
		if n == 0 {
			return nil, nil, false
		}
		if after := seen.Add(n); after < int32(nth) || after-n >= int32(nth) {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = pr.Version
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// recordsIn counts the records of a produce request's partition from its record batch's
// header (a produce request carries one batch a partition).
func recordsIn(t *testing.T, raw []byte) int32 {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(raw); err != nil {
		t.Errorf("a produce request's record batch: %v", err)
		return 0
	}
	return rb.NumRecords
}

// TestStateProduceFailureCatchesUp (at least once): the write of a batch's state fails, so the
// stream fails with its state in the overlay and not in Kafka; the next conversation drops
// the overlay and catches up from the changelog, so the batch delivered again counts from the
// state before it, and the key's total is exact.
func TestStateProduceFailureCatchesUp(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // failing a request needs kfake
	st := newStateSetup(t, 1, false)
	st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "2"
	count := st.sb.counter(false)
	// The first conversation's batches after the second wait for the stream's end: the failed
	// write's batch is the last one answered. (Whether the third is sent before the write
	// fails is the sidecar's timing; the second conversation's batches are all answered.)
	var calls atomic.Int32
	st.f.OnBatch = func(c *call) error {
		if c.Conv == 1 && calls.Add(1) > 2 {
			<-c.Done()
			return nil
		}
		return count(c)
	}
	failWrites(t, st.b, st.changelog, 2) // the second batch's state: one record a batch, one key
	r := st.start(t, nil)
	st.produceKeys(t, 0, 1, 10)
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, st.b, st.e["FLOW_CONSUMER_GROUP"], st.in, map[int32]int64{0: 10})
	})
	if len(wrapping(r.failures(""), sidecar.ErrProduce)) == 0 {
		t.Fatalf("no produce failure; want the state write refused")
	}
	if v := changelogValues(t, st.b, st.changelog); v["p0-k0"] != "10" {
		t.Fatalf("changelog: p0-k0=%q, want exactly 10 (the refused state never applied)", v["p0-k0"])
	}
	waitFor(t, "the store holds 10", func() bool {
		got, _ := sidecar.StateOf(t, r.sc, st.in, 0, "p0-k0")
		return got == "10"
	})
}
