package sidecar_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// The sweep's tests run the sidecar on a fakeClock that starts at the real time: the states
// the sidecar writes carry the producer's (real) timestamps, the seeded ones are an hour old,
// and the TTL is 10 s, so the sweep comes every second of the fake clock and finds only the
// seeded keys expired.

// sweepTTL is the Open's TTL in these tests; its sweep interval is 1 s.
const sweepTTL = 10 * time.Second

// sweepSetup is a one-partition stateful deployment in mode with the TTL sweepTTL, its
// changelog holding the states of keys, written an hour ago in the order given (the index
// order of the sweep).
func sweepSetup(t *testing.T, mode string, keys []string) *stateSetup {
	st := newStateSetup(t, 1, false)
	st.sb.ttlMs = uint64(sweepTTL.Milliseconds())
	st.e["FLOW_DELIVERY"] = mode
	st.e["FLOW_POD_NAME"] = "pod-a"
	old := time.Now().Add(-time.Hour)
	rs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		rs[i] = &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte(k), Value: []byte("41"), Timestamp: old.Add(time.Duration(i) * time.Millisecond)}
	}
	st.b.Produce(t, rs...)
	return st
}

// startClocked runs the setup's sidecar on clock.
func (st *stateSetup) startClocked(t *testing.T, clock *fakeClock) *running {
	return startTuned(t, st.e.config(t), func(sc *sidecar.Sidecar) { sidecar.SetClock(sc, clock.now, clock.after) })
}

// waitTimerAt waits until a timer of clock is due at at: the loop it will wake has armed it.
func (c *fakeClock) waitTimerAt(t *testing.T, at time.Time) {
	t.Helper()
	waitFor(t, "a timer due at "+at.Format(time.StampMilli), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, tm := range c.timers {
			if tm.at.Equal(at) {
				return true
			}
		}
		return false
	})
}

// writes returns millrace_sidecar_state_writes_total of the setup's changelog for kind.
func (st *stateSetup) writes(t *testing.T, r *running, kind string) float64 {
	v, _ := testkit.Gather(t, r.sc.Registry()).Value("millrace_sidecar_state_writes_total", "topic", st.changelog, "kind", kind)
	return v
}

// tombstones returns the keys of the changelog's tombstones, read committed, in log order.
func tombstones(t *testing.T, b *testkit.Broker, topic string) []string {
	var out []string
	for _, r := range b.ReadAll(t, topic) {
		if r.Value == nil {
			out = append(out, string(r.Key))
		}
	}
	return out
}

// tombstonesOf returns the tombstones of key in rs.
func tombstonesOf(rs []*kgo.Record, key string) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range rs {
		if r.Value == nil && string(r.Key) == key {
			out = append(out, r)
		}
	}
	return out
}

// lastValue is the value of key's last record in rs ("" when none, or a tombstone).
func lastValue(t *testing.T, rs []*kgo.Record, key string) string {
	v := ""
	for _, r := range rs {
		if string(r.Key) == key {
			v = string(r.Value)
		}
	}
	return v
}

// TestStateSweep seeds 1,200 expired states and one fresh, and counts one expired key (k0000)
// whose new state is still in the overlay when the first sweep comes (exactly once: in the
// open transaction, whose commit is due after the sweep). The first sweep writes the
// tombstones of the 1,000 oldest keys but k0000, in index order (the TTL index it built from
// the restored values first); the second the remaining 199; neither touches the fresh key nor k0000's new state, and the expire counter says 1,199.
func TestStateSweep(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			keys := make([]string, 1200)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%04d", i)
			}
			st := sweepSetup(t, mode, keys)
			st.e["FLOW_COMMIT_INTERVAL"] = "1500ms"
			st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("fresh"), Value: []byte("7")})
			clock := &fakeClock{t: time.Now()}
			t0 := clock.now()
			r := st.startClocked(t, clock)

			// The first transaction commits at once (nothing was committed before); the
			// next one waits for the commit interval on the clock.
			st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("warm"), Value: []byte("x")})
			waitFor(t, "warm committed", func() bool { return r.sc.RecordsCommitted() == 1 })
			st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k0000"), Value: []byte("x")})
			if mode == "exactly-once" {
				waitFor(t, "k0000's new state in the open transaction", func() bool {
					return lastValue(t, st.b.ReadAllUncommitted(t, st.changelog), "k0000") == "1"
				})
			} else {
				waitFor(t, "k0000's new state in the changelog", func() bool { return changelogValues(t, st.b, st.changelog)["k0000"] == "1" })
			}

			clock.waitTimerAt(t, t0.Add(time.Second))
			if sidecar.TTLIndexed(t, r.sc, st.in, 0) {
				t.Fatal("the store has a TTL index before its first sweep; want it built by the sweep")
			}
			clock.advance(time.Second) // the first sweep, which builds the TTL index first
			if mode == "exactly-once" {
				waitFor(t, "the first sweep's tombstones in the open transaction", func() bool { return sidecar.TxnStates(r.sc) == 1001 })
				if n := sidecar.Overlay(r.sc, st.in, 0); n != 1001 {
					t.Fatalf("the overlay holds %d states; want k0000's and the 1,000 tombstones", n)
				}
				clock.advance(500 * time.Millisecond) // the commit
				waitFor(t, "k0000 committed", func() bool { return r.sc.RecordsCommitted() == 2 })
			}
			waitFor(t, "1,000 tombstones written", func() bool { return st.writes(t, r, "expire") == 1000 })
			got := tombstones(t, st.b, st.changelog)
			if len(got) != 1000 || got[0] != "k0001" || got[999] != "k1000" {
				t.Fatalf("the first sweep wrote %d tombstones (first %v); want 1,000, k0001 to k1000 in index order", len(got), got[:min(len(got), 3)])
			}
			if _, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k0500"); ok {
				t.Fatal("the store still holds k0500 after its tombstone was written")
			}
			if _, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k1100"); !ok {
				t.Fatal("the store lost k1100, expired but not yet swept")
			}
			if !sidecar.TTLIndexed(t, r.sc, st.in, 0) {
				t.Fatal("the store has no TTL index after the first sweep")
			}

			clock.waitTimerAt(t, t0.Add(2*time.Second))
			clock.advance(500 * time.Millisecond) // the second sweep, 1 s after the first
			if mode == "exactly-once" {
				waitFor(t, "the second sweep's tombstones in the open transaction", func() bool { return sidecar.TxnStates(r.sc) == 199 })
				clock.advance(time.Second) // its commit, 1.5 s after the last
			} else {
				clock.advance(500 * time.Millisecond)
			}
			waitFor(t, "1,199 tombstones written", func() bool { return st.writes(t, r, "expire") == 1199 })
			got = tombstones(t, st.b, st.changelog)
			if len(got) != 1199 || got[1000] != "k1001" || got[1198] != "k1199" {
				t.Fatalf("%d tombstones after the second sweep; want 1,199, the second sweep's k1001 to k1199", len(got))
			}
			// A sweep commits no offset: exactly once, the last transaction held the second
			// sweep's tombstones only.
			group := st.e["FLOW_CONSUMER_GROUP"]
			if mode == "exactly-once" {
				if c := committed(t, st.b, group, st.in); c[0] != 2 {
					t.Fatalf("committed offset %d after the sweeps; want 2, past the two input records", c[0])
				}
			} else {
				waitFor(t, "the two input records committed", func() bool {
					return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 2})
				})
			}
			v := changelogValues(t, st.b, st.changelog)
			if len(v) != 3 || v["k0000"] != "1" || v["fresh"] != "7" || v["warm"] != "1" {
				t.Fatalf("the changelog's live states are %v; want k0000=1, fresh=7, warm=1", v)
			}
			if d := st.writes(t, r, "delete"); d != 0 {
				t.Fatalf("%v tombstones counted as deletes; want them counted as expire only", d)
			}
			waitFor(t, "the store holds the three live keys", func() bool {
				m := testkit.Gather(t, r.sc.Registry())
				n, _ := m.Value("millrace_sidecar_state_keys", "topic", st.changelog, "partition", "0")
				return n == 3
			})
		})
	}
}

// TestStateStagedAfterSweep holds a batch of key k (its state expired, so it sees none) with
// the process while the sweep writes k's tombstone; then the batch stages k=1. The changelog
// holds the tombstone, then k=1; the store keeps 1, and k's next record counts 2.
func TestStateStagedAfterSweep(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			st := sweepSetup(t, mode, []string{"k"})
			release := make(chan struct{})
			count := st.sb.counter(false)
			var held atomic.Bool
			st.f.Async = true
			st.f.OnBatch = func(c *call) error {
				if held.CompareAndSwap(false, true) {
					select {
					case <-release:
					case <-c.Done():
						return nil
					}
				}
				return count(c)
			}
			clock := &fakeClock{t: time.Now()}
			t0 := clock.now()
			r := st.startClocked(t, clock)
			st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k"), Value: []byte("x")})
			waitFor(t, "k's batch with the process", func() bool { return r.sc.Stats().BatchesSent == 1 })

			clock.waitTimerAt(t, t0.Add(time.Second))
			clock.advance(time.Second) // the sweep, k's batch in flight
			waitFor(t, "k's tombstone written", func() bool { return st.writes(t, r, "expire") == 1 })
			close(release)
			var outs []*kgo.Record
			waitFor(t, "k's first record counted", func() bool {
				if outs = st.b.ReadAll(t, st.out); len(outs) == 1 {
					return true
				}
				clock.advance(10 * time.Millisecond) // exactly once: its commit, due 100 ms after the sweep's
				return false
			})
			if string(outs[0].Value) != "1" {
				t.Fatalf("k counted %s; want 1, its state expired", outs[0].Value)
			}
			waitFor(t, "k=1 in the changelog", func() bool { return changelogValues(t, st.b, st.changelog)["k"] == "1" })
			var log []string
			for _, rec := range st.b.ReadAll(t, st.changelog) {
				log = append(log, fmt.Sprintf("%s=%s", rec.Key, rec.Value))
			}
			if fmt.Sprint(log) != "[k=41 k= k=1]" {
				for _, rec := range st.b.ReadAllUncommitted(t, st.changelog) {
					t.Logf("uncommitted %d %s=%s", rec.Offset, rec.Key, rec.Value)
				}
				t.Fatalf("the changelog holds %v; want k's seed, its tombstone, then the state staged after the sweep", log)
			}
			waitFor(t, "the store holds k=1", func() bool {
				v, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k")
				return ok && v == "1" && sidecar.Overlay(r.sc, st.in, 0) == 0
			})

			st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k"), Value: []byte("x")})
			waitFor(t, "k's second record counted", func() bool {
				clock.advance(10 * time.Millisecond) // exactly once: its commit
				return len(st.b.ReadAll(t, st.out)) == 2
			})
			if outs := st.b.ReadAll(t, st.out); string(outs[1].Value) != "2" {
				t.Fatalf("k's second record counted %s; want 2, from the state staged after the sweep", outs[1].Value)
			}
			if e, s := st.writes(t, r, "expire"), st.writes(t, r, "set"); e != 1 || s != 2 {
				t.Fatalf("writes: %v expire, %v set; want 1 and 2", e, s)
			}
		})
	}
}

// TestStateSweepAborted (exactly once): the sweep's tombstone of k is in the open transaction
// when a failed batch fails the stream; the transaction is aborted, and the next
// conversation's sweep finds k again and writes its tombstone, which commits. Read committed,
// the changelog holds one tombstone of k; read uncommitted, the aborted one too; the expire
// counter counts the committed one only.
func TestStateSweepAborted(t *testing.T) {
	st := sweepSetup(t, "exactly-once", []string{"k"})
	st.e["FLOW_COMMIT_INTERVAL"] = "1500ms"
	st.f.OnBatch = failOnce(2, st.sb.counter(false))
	clock := &fakeClock{t: time.Now()}
	t0 := clock.now()
	r := st.startClocked(t, clock)
	// The first transaction commits at once; the next waits for the interval.
	st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("warm"), Value: []byte("x")})
	waitFor(t, "warm committed", func() bool { return r.sc.RecordsCommitted() == 1 })

	clock.waitTimerAt(t, t0.Add(time.Second))
	clock.advance(time.Second)
	waitFor(t, "k's tombstone in the open transaction", func() bool {
		return sidecar.TxnStates(r.sc) == 1 && len(tombstonesOf(st.b.ReadAllUncommitted(t, st.changelog), "k")) == 1
	})
	// Short of the commit (due at 1.5 s), and so that the next conversation's sweep is due
	// apart from this one's next (at 2 s).
	clock.advance(250 * time.Millisecond)
	st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("x"), Value: []byte("x")})
	waitFor(t, "a second conversation", func() bool { return r.sc.Conversations() == 2 })
	if n := len(r.records.Attrs("stream failed: the open transaction is aborted; its batches are delivered again")); n != 1 {
		t.Fatalf("%d aborted transactions logged; want the failure to abort the one holding the tombstone", n)
	}

	clock.waitTimerAt(t, t0.Add(2250*time.Millisecond))
	clock.advance(time.Second) // the new conversation's sweep
	// Its commit: x's transaction may end first, and the sweep's then waits an interval.
	waitFor(t, "k's tombstone committed", func() bool {
		if st.writes(t, r, "expire") == 1 {
			return true
		}
		clock.advance(100 * time.Millisecond)
		return false
	})
	if got := tombstones(t, st.b, st.changelog); fmt.Sprint(got) != "[k]" {
		t.Fatalf("read committed, the changelog's tombstones are %v; want k's, once", got)
	}
	if all := len(tombstonesOf(st.b.ReadAllUncommitted(t, st.changelog), "k")); all != 2 {
		t.Fatalf("read uncommitted, the changelog holds %d tombstones of k; want 2, the aborted one and the one written again", all)
	}
	if _, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k"); ok {
		t.Fatal("the store still holds k after its tombstone committed")
	}
	var outs []*kgo.Record
	waitFor(t, "x delivered again and committed", func() bool {
		if outs = st.b.ReadAll(t, st.out); len(outs) == 2 {
			return true
		}
		clock.advance(100 * time.Millisecond) // its commit, if its transaction is the last
		return false
	})
	if string(outs[1].Key) != "x" || string(outs[1].Value) != "1" {
		t.Fatalf("outputs %s=%s after warm; want the failed batch's x=1, delivered again", outs[1].Key, outs[1].Value)
	}
}
