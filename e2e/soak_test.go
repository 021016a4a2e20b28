package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// The soak (scripts/soak, not in CI): the keyed echo, exactly once, two replicas on the
// three-node cluster, fed near its peak rate for MILLRACE_E2E_SOAK_MINUTES (30), a fault every
// 30-60 s drawn from soakFaults, every process's RSS sampled every 10 s; at the end the
// verifier over everything produced, and the RSS of each process kind at its first and last
// sample (memory flat: the last near the first).

// Environment of the soak.
const (
	envSoakMinutes = "MILLRACE_E2E_SOAK_MINUTES" // how long records flow (30)
	envSoakRate    = "MILLRACE_E2E_SOAK_RATE"    // records/s; unset: 80% of the peak measured first
)

// soakFaults are the faults the soak draws from.
var soakFaults = []string{
	"sidecar SIGKILL", "sidecar SIGSTOP past its session", "bridge SIGKILL", "bridge SIGSTOP",
	"action SIGKILL", "action SIGSTOP past --timeout", "broker SIGKILL", "broker SIGTERM", "broker SIGSTOP",
}

// soakSession is the sidecars' session timeout in the soak.
const soakSession = 10 * time.Second

// BenchmarkSoak is the soak; run once (-benchtime 1x) on the cluster scripts/soak starts.
func BenchmarkSoak(b *testing.B) {
	if clusterHome() == "" {
		b.Fatalf("the soak runs on scripts/kafka-cluster's three nodes: use scripts/soak (%s and %s unset)", envCluster, testkit.EnvBrokers)
	}
	minutes := 30.0
	if v, err := strconv.ParseFloat(os.Getenv(envSoakMinutes), 64); err == nil && v > 0 {
		minutes = v
	}
	for b.Loop() {
		soakOnce(b, time.Duration(minutes*float64(time.Minute)))
	}
}

func soakOnce(b *testing.B, length time.Duration) {
	br := openBroker(b, false)
	pl := newPipeline(b, br, keyedEcho("--timeout", actionTimeout.String()), 6,
		deliveryEnv("exactly-once"), "FLOW_SESSION_TIMEOUT="+soakSession.String())
	rs := []*replica{pl.start(0), pl.start(1)}
	pl.waitOwners(b, rs)

	rate := 0.0
	if v, err := strconv.ParseFloat(os.Getenv(envSoakRate), 64); err == nil && v > 0 {
		rate = v
	} else {
		rate = 0.8 * soakPeak(b, pl)
		if most := soakRateCap(length); rate > most {
			b.Logf("soak: %.0f records/s (80%% of the peak) would hold more records than half this machine's available memory at the end; %.0f records/s instead", rate, most)
			rate = most
		}
	}
	b.Logf("soak: %s at %.0f records/s, a fault every 30-60 s; load average %s", length, rate, loadAverage())

	rss := newRSSSampler(pl, rs, br)
	stopRSS := every(1, 10*time.Second, 10*time.Second+time.Millisecond, rss.sample)
	rss.sample()
	m := pl.meterStalls()
	produced := pl.produceAt(b, rate, length)
	s := seed(b)
	rng := rand.New(rand.NewPCG(s, s^0x50a6))
	var did []string
	end := time.Now().Add(length)
	for {
		wait := 30*time.Second + time.Duration(rng.Int64N(int64(30*time.Second)))
		if time.Until(end) < wait {
			break
		}
		time.Sleep(wait) // the fault schedule
		f := soakFaults[rng.IntN(len(soakFaults))]
		r := rs[rng.IntN(len(rs))]
		at := time.Since(m.start).Round(time.Second)
		what := soakStrike(b, pl, br, r, f)
		did = append(did, fmt.Sprintf("%s: %s", at, what))
		b.Logf("soak fault at %s: %s", at, what)
	}
	n := produced()
	stopped := ""
	pl.mu.Lock()
	total := len(pl.produced) // with the peak's backlog
	pl.mu.Unlock()
	if !pl.waitCommitted(total, idleFault) {
		// Still verified and reported: the records left behind count as uncommitted.
		c, commits := pl.committedCount()
		stopped = fmt.Sprintf("STOPPED at %d of %d committed (commits %v, ends %v); ", c, total, commits, pl.ends())
		b.Errorf("the pipeline stopped: %d of %d records committed and no progress for %s (commits %v, ends %v)\n%s", c, total, idleFault, commits, pl.ends(), pl.logTails(10))
	}
	st := m.stop()
	stopRSS()
	rss.sample()
	tl := pl.tally()
	tl.check(b)
	b.Logf("soak: %s%d records in %s (%.0f/s), %d faults; %s; %s", stopped, n, length, float64(n)/length.Seconds(), len(did), tl, st)
	b.Logf("soak faults: %s", strings.Join(did, "; "))
	b.Logf("soak RSS (first sample → last, max), MiB: %s", rss)
	b.Logf("load average at the end: %s", loadAverage())
	writeReport("soak", fmt.Sprintf("| %s | %.0f | %d | %d | %d | %d | %d | %s%s | %s |", length, rate, n, len(did), tl.lost, tl.dup, tl.uncommitted, stopped, st, rss))
}

// soakPeak measures the pipeline's peak rate: a backlog of 20,000 records written at once, and
// the records/s from their first commit to their last.
func soakPeak(b *testing.B, pl *pipeline) float64 {
	b.Helper()
	const n = 20_000
	pl.mu.Lock()
	before := len(pl.produced)
	pl.mu.Unlock()
	produceFast(b, pl, n)
	var first time.Time
	for {
		c, _ := pl.committedCount()
		if c > before && first.IsZero() {
			first = time.Now()
		}
		if c >= before+n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	peak := float64(n) / time.Since(first).Seconds()
	b.Logf("soak: peak %.0f records/s (a backlog of %d)", peak, n)
	return peak
}

// produceAt writes records at rate a second for length, in the background, in chunks of a
// tenth of a second; wait returns how many were written once all are.
func (pl *pipeline) produceAt(b *testing.B, rate float64, length time.Duration) (wait func() int) {
	done := make(chan int)
	pl.mu.Lock()
	first := len(pl.produced)
	pl.mu.Unlock()
	go func() {
		i := first
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < length {
			<-tick.C
			due := first + int(rate*time.Since(start).Seconds())
			if due <= i {
				continue
			}
			rs := pl.records(i, due-i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			results := pl.b.Admin.ProduceSync(ctx, rs...)
			cancel()
			pl.mu.Lock()
			for _, r := range results {
				if r.Err == nil {
					pl.produced = append(pl.produced, pl.input(r.Record))
				}
			}
			pl.mu.Unlock()
			if err := results.FirstErr(); err != nil {
				b.Logf("soak: producing to the inlet: %v (those records are not counted)", err)
			}
			i = due
		}
		pl.mu.Lock()
		defer pl.mu.Unlock()
		done <- len(pl.produced) - first
	}()
	return func() int { return <-done }
}

// soakStrike strikes replica r (or the broker) with fault f and returns what it did.
func soakStrike(b *testing.B, pl *pipeline, br *broker, r *replica, f string) string {
	b.Helper()
	switch f {
	case "sidecar SIGKILL":
		pl.mu.Lock() // the RSS sampler reads r's processes under it
		r.sidecar.Kill()
		pl.startSidecar(r)
		pl.mu.Unlock()
	case "sidecar SIGSTOP past its session":
		pauseFor(b, soakSession+5*time.Second, r.sidecar.Pid())
	case "bridge SIGKILL":
		pl.mu.Lock()
		r.bridge.Kill()
		pl.startBridge(r)
		pl.mu.Unlock()
	case "bridge SIGSTOP":
		pauseFor(b, soakSession+5*time.Second, r.bridge.Pid())
	case "action SIGKILL":
		for _, pid := range testkit.Children(r.bridge.Pid()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	case "action SIGSTOP past --timeout":
		if kids := testkit.Children(r.bridge.Pid()); len(kids) > 0 {
			pauseFor(b, 2*actionTimeout, kids...)
		}
	default: // a broker node, drawn from the three
		node := strconv.Itoa(1 + rand.IntN(3))
		switch f {
		case "broker SIGKILL":
			br.kafkaScript(b, "kill", node)
			time.Sleep(clusterDown)
			br.kafkaScript(b, "start-node", node)
		case "broker SIGTERM":
			br.kafkaScript(b, "term", node)
			br.kafkaScript(b, "start-node", node)
		case "broker SIGSTOP":
			br.kafkaScript(b, "pause", node)
			time.Sleep(brokerPause)
			br.kafkaScript(b, "continue", node)
		}
		return fmt.Sprintf("%s of node %s", f, node)
	}
	return fmt.Sprintf("%s of replica %d", f, r.idx)
}

// rssSampler keeps each process kind's RSS: the first sample, the last, the largest.
type rssSampler struct {
	pl *pipeline
	rs []*replica
	br *broker

	mu                  sync.Mutex
	first, last, maxRSS map[string]int64
}

func newRSSSampler(pl *pipeline, rs []*replica, br *broker) *rssSampler {
	return &rssSampler{pl: pl, rs: rs, br: br, first: map[string]int64{}, last: map[string]int64{}, maxRSS: map[string]int64{}}
}

// sample reads every process's VmRSS, the largest of each kind (replicas' sidecars, bridges,
// actions; the broker nodes).
func (s *rssSampler) sample() {
	now := map[string]int64{}
	take := func(kind string, pid int) {
		if v := testkit.ProcStatus(pid, "VmRSS"); v > now[kind] {
			now[kind] = v
		}
	}
	s.pl.mu.Lock()
	for _, r := range s.rs {
		take("sidecar", r.sidecar.Pid())
		take("bridge", r.bridge.Pid())
		for _, c := range testkit.Children(r.bridge.Pid()) {
			take("action", c)
		}
	}
	s.pl.mu.Unlock()
	for n := 1; n <= 3; n++ {
		bs, err := os.ReadFile(fmt.Sprintf("%s/node-%d/broker.pid", clusterHome(), n))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(bs))); err == nil && perr == nil {
			take("broker", pid)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range now {
		if _, ok := s.first[k]; !ok {
			s.first[k] = v
		}
		s.last[k] = v
		s.maxRSS[k] = max(s.maxRSS[k], v)
	}
}

func (s *rssSampler) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s.first)) {
		out = append(out, fmt.Sprintf("%s %d → %d (max %d)", k, s.first[k]>>20, s.last[k]>>20, s.maxRSS[k]>>20))
	}
	return strings.Join(out, ", ")
}

// soakBytesPerRecord is what the verifier holds a record at the end: its input, its output and
// their index (a soak of 32 million records held 22 GB).
const soakBytesPerRecord = 700

// soakRateCap is the highest rate whose records the verifier can hold at the end in half the
// machine's available memory (MemAvailable), for a soak of length; no cap when it cannot tell.
func soakRateCap(length time.Duration) float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return math.Inf(1)
	}
	for line := range strings.Lines(string(b)) {
		if kb, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 64)
			if err != nil {
				break
			}
			return n * 1024 / 2 / soakBytesPerRecord / length.Seconds()
		}
	}
	return math.Inf(1)
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
