package bench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/sidecar"
)

// loadParts is how many partitions BenchmarkLoadLatency's input and output topics have.
const loadParts = 8

// loadRow is one row of BenchmarkLoadLatency: the hand-written loop, or an action deployed
// with its line.
type loadRow struct {
	name        string
	loop        bool     // bench/peer/loop.py, not millrace
	argv        []string // the action's command
	native      bool     // the native Go streamlet in the bridge's place (no action process)
	state       bool     // the line keeps state for its inlet (--state in)
	exactlyOnce bool     // measured exactly once too
}

// BenchmarkLoadLatency is the latency users feel under load: the end-to-end latency of each
// record (from just before its produce call until a consumer of the output topic has its
// output: read_committed, so exactly once counts the transaction's commit) at a steady
// offered rate, on 8 partitions, keyed over BENCH_STATE_KEYS keys (1,000). The rate is half
// the row's own peak, measured first in the same deployment (a burst of BENCH_RECORDS
// records), unless BENCH_LOAD_RATE sets it: records/s, or "loop" for the lower of the row's
// half peak and the rate the loop's row was offered in the same run (no row is offered more
// than the loop; a row slower than the loop keeps its own half peak). The steady load lasts
// BENCH_LOAD_SECONDS (10). Rows: the hand-written loop (bench/peer/loop.py, at least once
// only: it commits after each flush), the Python and Node.js SDK echoes, go-echo and the
// running count of bench/statecount (go-echo plus a state per key), each at its defaults
// in the deployed shape, at least once and, for the Python echo, go-echo and the count,
// exactly once; and the native Go streamlet in the bridge's place (no action process: what
// the bridge's hop costs), at least once. It reports p50, p99, p99.9 and the max in ms, the peak and the offered
// rate; the p50 and p99 of the latency's two parts, split at the output's timestamp (its
// producer's produce call, in whole ms): before it, the pipeline from the input's produce
// to the output's; after it, the output through the broker to the consumer; and what the
// steady load cost: the CPU µs a record of the row's own processes (the loop; or the
// sidecar, the bridge and the action's processes) and how many of the machine's cores all
// the processes kept busy (the broker, producer and consumer of this process included).
//
//	go test -run '^$' -bench 'BenchmarkLoadLatency' -benchtime 1x ./bench/
func BenchmarkLoadLatency(b *testing.B) {
	_, goEcho := binaries(b)
	abs := func(rel string) string {
		p, err := filepath.Abs(rel)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	var rows []loadRow
	if python := peerPython(); exec.Command(python, "-c", "import confluent_kafka").Run() == nil {
		rows = append(rows, loadRow{name: "loop", loop: true, argv: []string{python, abs("peer/loop.py")}})
	} else {
		b.Logf("%s cannot import confluent_kafka: the loop's row is left out (scripts/bench installs it and sets %s)", python, envPeerPython)
	}
	for _, r := range []loadRow{
		{name: "python-sdk", argv: []string{"python3", abs("../sdk/python/examples/echo.py")}, exactlyOnce: true},
		{name: "node-sdk", argv: []string{"node", abs("../sdk/node/examples/echo.js")}},
		{name: "go-echo", argv: []string{goEcho}, exactlyOnce: true},
		{name: "statecount", argv: []string{bins.stateCount}, state: true, exactlyOnce: true},
		{name: "native", argv: []string{"native"}, native: true},
	} {
		if _, err := exec.LookPath(r.argv[0]); err != nil && !r.native {
			b.Logf("no %s: the %s row is left out (scripts/setup installs it): %v", r.argv[0], r.name, err)
			continue
		}
		rows = append(rows, r)
	}
	keys := envInt("BENCH_STATE_KEYS", defaultStateKeys)
	rate, atLoop := 0.0, false
	switch v := os.Getenv("BENCH_LOAD_RATE"); v {
	case "":
	case "loop":
		atLoop = true
	default:
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("BENCH_LOAD_RATE=%q: want records a second (e.g. 10000), or loop for the loop's own rate", v)
		}
		rate = r
	}
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		for _, r := range rows {
			if d == sidecar.ExactlyOnce && !r.exactlyOnce {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s/p%d", d, r.name, loadParts), func(b *testing.B) {
				br := newBroker(b)
				var in, out string
				var alive func() error
				var cpu func() []procTime // the row's own processes
				if r.loop {
					in, out = br.topic(b, "in", loadParts), br.topic(b, "out", loadParts)
					p := startProc(b, "loop", append(slices.Clone(r.argv), strings.Join(br.Addrs, ","), in, out, br.name("group")), nil)
					alive = func() error {
						if p.Exited() {
							return fmt.Errorf("the loop exited early: %v\n%s", p.Err(), p.Tail(20))
						}
						return nil
					}
					cpu = func() []procTime { return []procTime{{"loop", procCPU(p.Pid())}} }
				} else {
					line := "bench --in in=bench.v1 --out out=bench.v1 "
					if r.state {
						line += "--state in "
					}
					dep := deployment{keys: keys, state: r.state}
					if d != sidecar.AtLeastOnce {
						dep.sidecarEnv = []string{"FLOW_DELIVERY=" + string(d)}
					}
					tag := fmt.Sprintf("load-%s-%s", d, r.name)
					side := "bridge"
					if r.native {
						side = "native"
					}
					pp := deploy(b, br, roleProcs("", b.TempDir(), tag, side), line+"-- "+actionconf.Join(r.argv), loadParts, dep)
					in, out, alive = pp.in, pp.out, pp.check
					cpu = func() []procTime {
						if r.native {
							return []procTime{{"sidecar", procCPU(pp.sidecar.Pid())}, {"native", procCPU(pp.bridge.Pid())}}
						}
						return []procTime{{"sidecar", procCPU(pp.sidecar.Pid())}, {"bridge", procCPU(pp.bridge.Pid())}, {"child", childrenOf(pp.bridge.Pid())}}
					}
				}
				if atLoop && !r.loop && rate == 0 {
					b.Fatal("BENCH_LOAD_RATE=loop: the loop's row did not run first (is confluent_kafka installed?)")
				}
				offered := loadLatency(b, br, in, out, keys, alive, cpu, rate, atLoop)
				if atLoop && r.loop {
					rate = offered
				}
			})
		}
	}
}

// peerPython is the Python that runs the loop: BENCH_PEER_PYTHON, else python3.
func peerPython() string {
	if p := os.Getenv(envPeerPython); p != "" {
		return p
	}
	return "python3"
}

// loadLatency measures one row: a warm-up, a burst for the peak rate, then the steady load at
// rate records a second, or half the peak when rate is 0 (or, when atMost, when half the peak
// is less), each record's latency taken as its output is read; cpu reads the CPU time of each
// of the row's own processes. It returns the rate offered.
func loadLatency(b *testing.B, br *broker, in, out string, keys int, alive func() error, cpu func() []procTime, rate float64, atMost bool) float64 {
	prod := br.producer(b)
	cnt := br.counter(b, out)
	cnt.check = alive
	warm, burst := 2000, envInt("BENCH_RECORDS", defaultRecords)
	if err := produceKeyed(prod, in, loadParts, keys, 0, warm, valueSize); err != nil {
		b.Fatal(err)
	}
	if err := cnt.waitFor(warm, 2*time.Minute); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	start := time.Now()
	if err := produceKeyed(prod, in, loadParts, keys, warm, burst, valueSize); err != nil {
		b.Fatal(err)
	}
	if err := cnt.waitFor(warm+burst, 5*time.Minute); err != nil {
		b.Fatalf("burst: %v", err)
	}
	peak := float64(burst) / time.Since(start).Seconds()
	if rate == 0 || atMost && peak/2 < rate {
		rate = peak / 2
	}
	secs := envInt("BENCH_LOAD_SECONDS", 10)
	n := int(rate * float64(secs))
	first := warm + burst
	sentAt := make([]atomic.Int64, first+n)
	// Each record's latency, and its two parts split at the output's timestamp.
	total, before, after := make([]time.Duration, 0, n), make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	cnt.onRecord = func(r *kgo.Record) {
		now := time.Now().UnixNano()
		if id, ok := recordNumber(r.Value); ok && id >= first && id < len(sentAt) {
			if t := sentAt[id].Load(); t > 0 { // its first reading only
				sentAt[id].Store(-1)
				total = append(total, time.Duration(now-t))
				at := r.Timestamp.UnixNano() // whole ms: before is short of the truth by < 1 ms, after over it
				before = append(before, time.Duration(max(at-t, 0)))
				after = append(after, time.Duration(max(now-at, 0)))
			}
		}
	}
	var wall, self time.Duration
	var own []procTime // CPU during the steady load: the row's processes; this one's
	for b.Loop() {
		own0, self0, began := cpu(), procCPU(os.Getpid()), time.Now()
		errc := make(chan error, 1)
		go func() { errc <- produceSteady(prod, in, keys, first, n, rate, sentAt) }()
		err := cnt.waitFor(first+n, time.Duration(secs)*time.Second+2*time.Minute)
		if perr := <-errc; perr != nil {
			b.Fatalf("producing: %v", perr)
		}
		if err != nil {
			b.Fatal(err)
		}
		wall, self, own = time.Since(began), procCPU(os.Getpid())-self0, cpu()
		for i := range own {
			own[i].cpu -= own0[i].cpu
		}
	}
	for _, l := range [][]time.Duration{total, before, after} {
		slices.Sort(l)
	}
	q := func(l []time.Duration, p float64) float64 {
		if len(l) == 0 {
			return 0
		}
		return float64(l[min(len(l)-1, int(p*float64(len(l))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(peak, "peak-rec/s")
	b.ReportMetric(rate, "offered-rec/s")
	b.ReportMetric(q(total, 0.50), "p50-ms")
	b.ReportMetric(q(total, 0.99), "p99-ms")
	b.ReportMetric(q(total, 0.999), "p99.9-ms")
	b.ReportMetric(q(total, 1), "max-ms")
	b.ReportMetric(q(before, 0.50), "p50-before-produce-ms")
	b.ReportMetric(q(before, 0.99), "p99-before-produce-ms")
	b.ReportMetric(q(after, 0.50), "p50-after-produce-ms")
	b.ReportMetric(q(after, 0.99), "p99-after-produce-ms")
	b.ReportMetric(float64(len(total)), "samples")
	if n > 0 && wall > 0 {
		var sum time.Duration
		for _, p := range own {
			b.ReportMetric(micros(p.cpu)/float64(n), p.name+"-cpu-µs/rec")
			sum += p.cpu
		}
		b.ReportMetric(micros(sum)/float64(n), "cpu-µs/rec")
		b.ReportMetric((self+sum).Seconds()/wall.Seconds(), "busy-cores")
	}
	return rate
}

// procTime is the CPU time a process (or a process's children) has used.
type procTime struct {
	name string
	cpu  time.Duration
}

// produceSteady writes records first … first+n-1 at rate records a second, paced every
// millisecond, keyed as produceKeyed keys them over loadParts partitions, each one's send
// time (ns) in sentAt; then it waits until the broker has them all.
func produceSteady(cl *kgo.Client, topic string, keys, first, n int, rate float64, sentAt []atomic.Int64) error {
	ctx := context.Background()
	var ferr atomic.Pointer[error]
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := first; i < first+n; {
		due := first + min(n, int(rate*time.Since(start).Seconds()))
		for ; i < due; i++ {
			r := &kgo.Record{Topic: topic, Value: value(i, valueSize)}
			r.Key, r.Partition = recordKey(i, keys, loadParts)
			sentAt[i].Store(time.Now().UnixNano())
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					ferr.CompareAndSwap(nil, &err)
				}
			})
		}
		<-tick.C
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err := ferr.Load(); err != nil {
		return *err
	}
	return nil
}
