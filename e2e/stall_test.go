package e2e_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// keyedEcho is this test binary echoing every record, the records keyed by one of 60 keys (so
// the verifier checks each key's order) and named by the id in their value. flags are more
// words of its config line.
func keyedEcho(flags ...string) action { return keyed(childEcho, flags...) }

// keyed is keyedEcho played in mode (childEcho or childSlow).
func keyed(mode string, flags ...string) action {
	a := child(mode, false, flags...)
	a.keys = 60
	idOfValue := func(r *kgo.Record) string {
		var v struct{ ID string }
		json.Unmarshal(r.Value, &v)
		return v.ID
	}
	a.idOf, a.inID = idOfValue, idOfValue
	return a
}

// stallMeter watches a pipeline's commits, every partition on its own: a partition stalls
// while records wait past its commit and the commit does not move. It keeps the longest stall
// and when it began, the figure the fault cases report (a paused member's partitions wait for
// its session to end; a stranded partition never moves again).
type stallMeter struct {
	pl    *pipeline
	start time.Time
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu        sync.Mutex
	longest   time.Duration
	partition int32
	began     time.Duration // since start
}

// meterStalls starts watching pl's commits (every 200 ms) until stop, or the test's end.
func (pl *pipeline) meterStalls() *stallMeter {
	m := &stallMeter{pl: pl, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	pl.t.Cleanup(func() { m.stop() })
	return m
}

func (m *stallMeter) run() {
	defer close(m.done)
	moved := map[int32]time.Time{}
	last := map[int32]int64{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-tick.C:
		}
		_, commits := m.pl.committedCount()
		if commits == nil {
			// The broker did not answer (its coordinator paused or down): no commit is
			// seen to move, so the stall goes on.
			commits = last
		}
		now := time.Now()
		for p, end := range m.pl.ends() {
			c := commits[p]
			if _, ok := moved[p]; !ok || c >= end || c != last[p] {
				moved[p], last[p] = now, c
				continue
			}
			if d := now.Sub(moved[p]); d > m.stall() {
				m.mu.Lock()
				m.longest, m.partition, m.began = d, p, moved[p].Sub(m.start)
				m.mu.Unlock()
			}
		}
	}
}

func (m *stallMeter) stall() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.longest
}

// since returns how long after the meter started t is.
func (m *stallMeter) since(t time.Time) time.Duration { return t.Sub(m.start) }

// stop ends the watch and returns the longest stall as the reports write it.
// It may be called twice.
func (m *stallMeter) stop() stall {
	m.once.Do(func() { close(m.quit) })
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return stall{m.longest, m.partition, m.began}
}

// stall is the longest time a partition waited with records past its commit.
type stall struct {
	d         time.Duration
	partition int32
	began     time.Duration // since the meter started
}

func (s stall) String() string {
	if s.d == 0 {
		return "no stall"
	}
	return fmt.Sprintf("longest stall %.1f s (partition %d, from %.1f s)", s.d.Seconds(), s.partition, s.began.Seconds())
}

// pauseFor SIGSTOPs the processes pids, keeps them stopped for d (the fault's length, not a
// wait for a state) and SIGCONTs them. A process gone meanwhile is left out. Should the test
// end first, a cleanup continues them.
func pauseFor(t testing.TB, d time.Duration, pids ...int) {
	t.Helper()
	var stopped []int
	for _, pid := range pids {
		if testkit.Alive(pid) && syscall.Kill(pid, syscall.SIGSTOP) == nil {
			stopped = append(stopped, pid)
		}
	}
	if len(stopped) == 0 {
		t.Fatalf("no process of %v to pause: the fault did not happen", pids)
	}
	cont := func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	time.Sleep(d)
	cont()
}
