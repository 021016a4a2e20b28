package sidecar_test

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// fakeClock is a clock the test moves: now stands still until advance, and a timer of after
// fires once the clock has reached its deadline.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.t
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.t.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if c.t.Before(tm.at) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.t
	}
	c.timers = kept
}

// metricCount returns the sample count of histogram name in reg (0 when absent).
func metricCount(t testing.TB, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}

const commitsMetric = "millrace_sidecar_commit_seconds"

// TestCommitInterval runs several rounds within one FLOW_COMMIT_INTERVAL on a clock the test
// moves. At least once, every round's emits are written as soon as it is acknowledged, and its
// offsets wait: one commit covers every round confirmed in the interval, made once the
// interval has passed, and a shutdown commits what is confirmed at once. Exactly once, the
// rounds of the interval are one transaction: their emits are visible to read_committed
// readers, and their offsets committed, only when it ends.
func TestCommitInterval(t *testing.T) {
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			e["FLOW_DELIVERY"] = delivery
			e["FLOW_COMMIT_INTERVAL"] = "1s"
			e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "10"
			group := e["FLOW_CONSUMER_GROUP"]
			clock := newFakeClock()
			r := startTuned(t, e.config(t), func(s *sidecar.Sidecar) { sidecar.SetClock(s, clock.now, clock.after) })
			reg := r.sc.Registry()

			// Nothing was committed before: the first round commits at once.
			all := records(in, 1, 40)
			b.Produce(t, all[:5]...)
			waitFor(t, "the first round committed", func() bool {
				return committed(t, b, group, in)[0] == 5 && metricCount(t, reg, commitsMetric) >= 1
			})

			b.Produce(t, all[5:30]...)
			waitFor(t, "every batch answered", func() bool {
				return metricCount(t, reg, "millrace_sidecar_batch_round_trip_seconds") == uint64(r.sc.Stats().BatchesSent) && seenUpTo(f) == 29
			})
			if delivery == "at-least-once" {
				// Written as soon as acknowledged, committed only once the interval passes.
				if got := b.ReadN(t, out, 30, waitTimeout); len(got) != 30 {
					t.Fatalf("outputs before the interval passed = %d; want 30", len(got))
				}
			}
			if got := committed(t, b, group, in)[0]; got != 5 {
				t.Errorf("committed within the interval = %d; want 5 (the first round only)", got)
			}
			if n := metricCount(t, reg, commitsMetric); n != 1 {
				t.Errorf("commits within the interval = %d; want 1", n)
			}

			clock.advance(time.Second)
			// One commit for the rounds of the interval (the metric moves once its answer is
			// back). A batch acknowledged while the last round was being written is in the
			// next interval's commit.
			waitFor(t, "the interval's rounds committed", func() bool { return metricCount(t, reg, commitsMetric) >= 2 })
			// Polled, without moving the clock: exactly once, Kafka makes a transaction's
			// offsets visible when its coordinator has written the commit markers, which it
			// does after EndTxn has returned.
			var got int64
			if !testkit.Eventually(waitTimeout, func() bool { got = committed(t, b, group, in)[0]; return got > 5 }) {
				t.Errorf("committed after the interval = %d; want more than 5", got)
			}
			waitFor(t, "every round committed", func() bool {
				clock.advance(time.Second)
				return committed(t, b, group, in)[0] == 30
			})
			if n := metricCount(t, reg, commitsMetric); n > 3 {
				t.Errorf("commits = %d; want at most 3 for %d batches (the first, then one or two intervals)", n, r.sc.Stats().BatchesSent)
			}
			if sent := r.sc.Stats().BatchesSent; sent < 4 {
				t.Errorf("batches sent = %d; want at least 4 (several rounds in the interval)", sent)
			}

			// A shutdown commits what is confirmed without waiting for the interval.
			b.Produce(t, all[30:]...)
			waitFor(t, "the last records answered", func() bool {
				return seenUpTo(f) == 39 && metricCount(t, reg, "millrace_sidecar_batch_round_trip_seconds") == uint64(r.sc.Stats().BatchesSent)
			})
			if err := r.stop(t); err != nil {
				t.Fatalf("Run() = %v; want nil", err)
			}
			if got := committed(t, b, group, in)[0]; got != 40 {
				t.Errorf("committed after shutdown = %d; want 40", got)
			}
			if got := b.ReadN(t, out, 40, waitTimeout); len(got) != 40 {
				t.Errorf("outputs = %d; want 40", len(got))
			}
		})
	}
}

// seenUpTo returns the last offset the process has been sent, -1 if none.
func seenUpTo(f *fakeProcess) int64 {
	last := int64(-1)
	for _, bt := range f.Batches() {
		for _, r := range bt.Records {
			last = max(last, r.Offset)
		}
	}
	return last
}

// TestCommitIntervalCrash SIGKILLs a sidecar mid-interval (FLOW_COMMIT_INTERVAL=1h: only the
// first round is committed, at once): every emit was written, nothing after the first round
// was committed, and the sidecar that takes over redelivers exactly the records after the last
// commit, no more.
func TestCommitIntervalCrash(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_COMMIT_INTERVAL"] = "1h"
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "10"
	e["FLOW_SESSION_TIMEOUT"] = "6s" // the killed member's partitions move after it
	group := e["FLOW_CONSUMER_GROUP"]
	all := records(in, 1, 40)
	b.Produce(t, all[:5]...)
	sc := startChildSidecar(t, e)
	waitFor(t, "the first round committed", func() bool { return committed(t, b, group, in)[0] == 5 })
	b.Produce(t, all[5:]...)
	if got := b.ReadN(t, out, 40, waitTimeout); len(got) != 40 {
		t.Fatalf("outputs before the kill = %d; want 40", len(got))
	}
	if err := sc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sc.done
	if got := committed(t, b, group, in)[0]; got != 5 {
		t.Fatalf("committed at the kill = %d; want 5: nothing after the first round within the interval", got)
	}

	g := newProcess(t, echo)
	e2 := baseEnv(t, b, g, in, out)
	e2["FLOW_CONSUMER_GROUP"] = group
	r := start(t, e2.config(t))
	waitFor(t, "the redelivered records committed", func() bool { return committed(t, b, group, in)[0] == 40 })
	r.stop(t)
	var got []int64
	for _, bt := range g.Batches() {
		for _, rec := range bt.Records {
			got = append(got, rec.Offset)
		}
	}
	if len(got) != 35 || got[0] != 5 || got[len(got)-1] != 39 {
		t.Errorf("redelivered offsets %v; want exactly 5..39, the records after the last commit", got)
	}
	if n := b.Count(t, out); n != 75 {
		t.Errorf("outputs = %d; want 75 (40, then the 35 redelivered)", n)
	}
}

// TestCommitIntervalWaitsForWrites holds every write to the outlet while batches are
// acknowledged and the commit interval passes again and again: nothing of them is committed
// while their emits are unconfirmed, though the earlier, confirmed round was; once the writes
// go through, the next commit covers them.
func TestCommitIntervalWaitsForWrites(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding the writes needs kfake
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_COMMIT_INTERVAL"] = "1s"
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "10"
	group := e["FLOW_CONSUMER_GROUP"]
	clock := newFakeClock()
	r := startTuned(t, e.config(t), func(s *sidecar.Sidecar) { sidecar.SetClock(s, clock.now, clock.after) })
	all := records(in, 1, 30)
	b.Produce(t, all[:5]...)
	waitFor(t, "the first round committed", func() bool { return committed(t, b, group, in)[0] == 5 })

	release := make(chan struct{})
	held := holdWrites(t, b, out, release)
	b.Produce(t, all[5:]...)
	<-held // a write of an acknowledged batch waits at the broker
	waitFor(t, "a batch acknowledged while its writes are held", func() bool {
		return metricCount(t, r.sc.Registry(), "millrace_sidecar_batch_round_trip_seconds") >= 2
	})
	for range 5 {
		clock.advance(time.Second)
	}
	if got := committed(t, b, group, in)[0]; got != 5 {
		t.Errorf("committed while the writes were held = %d; want 5: nothing before its emits are confirmed", got)
	}
	close(release)
	waitFor(t, "every record committed once the writes went through", func() bool {
		clock.advance(time.Second)
		return committed(t, b, group, in)[0] == 30
	})
	if got := b.ReadN(t, out, 30, waitTimeout); len(got) != 30 {
		t.Errorf("outputs = %d; want 30", len(got))
	}
}

// holdWrites holds every produce request to topic, named or by its topic id (Produce v13
// names topics by id), until release is closed. The channel it returns is closed once one is
// held.
func holdWrites(t *testing.T, b *testkit.Broker, topic string, release <-chan struct{}) <-chan struct{} {
	t.Helper()
	id := topicID(t, b, topic)
	held := make(chan struct{})
	var once sync.Once
	b.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topic || tp.TopicID == id {
				once.Do(func() { close(held) })
				b.Cluster.SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})
	return held
}
