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
	state       bool     // the line keeps state for its inlet (--state in)
	exactlyOnce bool     // measured exactly once too
}

// BenchmarkLoadLatency is the latency users feel under load: the end-to-end latency of each
// record (from just before its produce call until a consumer of the output topic has its
// output: read_committed, so exactly once counts the transaction's commit) at a steady
// offered rate, on 8 partitions, keyed over BENCH_STATE_KEYS keys (1,000). The rate is half
// the row's own peak, measured first in the same deployment (a burst of BENCH_RECORDS
// records), unless BENCH_LOAD_RATE sets it (records/s); the steady load lasts
// BENCH_LOAD_SECONDS (10). Rows: the hand-written loop (bench/peer/loop.py, at least once
// only: it commits after each flush), the Python and Node.js SDK echoes, go-echo and the
// running count of bench/statecount (go-echo plus a state per key), each at its defaults
// in the deployed shape, at least once and, for the Python echo, go-echo and the count,
// exactly once. It reports p50, p99, p99.9 and the max in ms, the peak and the offered
// rate.
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
	} {
		if _, err := exec.LookPath(r.argv[0]); err != nil {
			b.Logf("no %s: the %s row is left out (scripts/setup installs it): %v", r.argv[0], r.name, err)
			continue
		}
		rows = append(rows, r)
	}
	keys := envInt("BENCH_STATE_KEYS", defaultStateKeys)
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		for _, r := range rows {
			if d == sidecar.ExactlyOnce && !r.exactlyOnce {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s/p%d", d, r.name, loadParts), func(b *testing.B) {
				br := newBroker(b)
				var in, out string
				var alive func() error
				if r.loop {
					in, out = br.topic(b, "in", loadParts), br.topic(b, "out", loadParts)
					p := startProc(b, "loop", append(slices.Clone(r.argv), strings.Join(br.Addrs, ","), in, out, br.name("group")), nil)
					alive = func() error {
						if p.Exited() {
							return fmt.Errorf("the loop exited early: %v\n%s", p.Err(), p.Tail(20))
						}
						return nil
					}
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
					pp := deploy(b, br, roleProcs("", b.TempDir(), tag, "bridge"), line+"-- "+actionconf.Join(r.argv), loadParts, dep)
					in, out, alive = pp.in, pp.out, pp.check
				}
				loadLatency(b, br, in, out, keys, alive)
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
// half of it (or BENCH_LOAD_RATE), each record's latency taken as its output is read.
func loadLatency(b *testing.B, br *broker, in, out string, keys int, alive func() error) {
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
	rate := peak / 2
	if v := os.Getenv("BENCH_LOAD_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("BENCH_LOAD_RATE=%q: want records a second, e.g. 10000", v)
		}
		rate = r
	}
	secs := envInt("BENCH_LOAD_SECONDS", 10)
	n := int(rate * float64(secs))
	first := warm + burst
	sentAt := make([]atomic.Int64, first+n)
	lat := make([]time.Duration, 0, n)
	cnt.onRecord = func(r *kgo.Record) {
		now := time.Now().UnixNano()
		if id, ok := recordNumber(r.Value); ok && id >= first && id < len(sentAt) {
			if t := sentAt[id].Load(); t > 0 { // its first reading only
				sentAt[id].Store(-1)
				lat = append(lat, time.Duration(now-t))
			}
		}
	}
	for b.Loop() {
		errc := make(chan error, 1)
		go func() { errc <- produceSteady(prod, in, keys, first, n, rate, sentAt) }()
		err := cnt.waitFor(first+n, time.Duration(secs)*time.Second+2*time.Minute)
		if perr := <-errc; perr != nil {
			b.Fatalf("producing: %v", perr)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(peak, "peak-rec/s")
	b.ReportMetric(rate, "offered-rec/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(len(lat)), "samples")
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
