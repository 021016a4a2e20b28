package bench_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/codec"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

// version is the version both sides announce: the sidecar's deployed descriptor and the
// bridge's discovery must agree on it.
const version = "bench"

// valueSize is the size of every record's value in the throughput and latency benchmarks.
const valueSize = 200

// value returns a JSON object of exactly size bytes (at least 96) for record i. Its padding is
// pseudo-random text, so that it compresses about as well as real JSON does (a padding of one
// repeated byte would shrink the producer's snappy batches tenfold and make every fetch hold
// ten times the records a real one does).
func value(i, size int) []byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	v := fmt.Appendf(make([]byte, 0, size), `{"id":%d,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon","pad":"`, i)
	x := uint32(i)*2654435761 + 1
	for len(v) < size-2 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v = append(v, letters[x%uint32(len(letters))])
	}
	return append(v, `"}`...)
}

// bins are the binaries the benchmarks build once per run: millrace, the Go echo action, the
// idle-measuring echo of BenchmarkGap, the running count of BenchmarkState and the waiting
// action of BenchmarkWaiting.
var bins struct {
	once       sync.Once
	dir        string
	millrace   string
	goEcho     string
	gapEcho    string
	stateCount string
	waitGo     string
	err        error
}

// binaries builds cmd/millrace, actions/go-echo, gapecho, statecount and waitgo once, into a folder
// TestMain removes.
func binaries(b testing.TB) (millrace, goEcho string) {
	b.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "millrace-bench-")
		if bins.err != nil {
			return
		}
		bins.millrace, bins.goEcho, bins.gapEcho = filepath.Join(bins.dir, "millrace"), filepath.Join(bins.dir, "go-echo"), filepath.Join(bins.dir, "gapecho")
		bins.stateCount, bins.waitGo = filepath.Join(bins.dir, "statecount"), filepath.Join(bins.dir, "waitgo")
		for bin, pkg := range map[string]string{bins.millrace: "../cmd/millrace", bins.goEcho: "../actions/go-echo", bins.gapEcho: "./gapecho", bins.stateCount: "./statecount", bins.waitGo: "./waitgo"} {
			if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if bins.err != nil {
		b.Fatal(bins.err)
	}
	return bins.millrace, bins.goEcho
}

// child is an echo action: the argv of its process.
type child struct {
	name string
	argv []string
}

// children returns the Go echo action (actions/go-echo, on the SDK, which declares a window of
// 64) and the Python echo loop of the stdio benchmarks (declares nothing).
func children(b testing.TB) []child {
	_, goEcho := binaries(b)
	py, err := filepath.Abs("../stdio/testdata/echo.py")
	if err != nil {
		b.Fatal(err)
	}
	cs := []child{{"go", []string{goEcho}}}
	if _, err := exec.LookPath("python3"); err == nil {
		cs = append(cs, child{"python", []string{"python3", py}})
	} else {
		b.Logf("no python3: the Python echo action is left out (%v)", err)
	}
	return cs
}

// mode is how deliveries go to a process: one at a time (the spec), or written ahead.
type mode struct {
	name   string
	window int
}

// modes: lockstep forces one delivery at a time even on an action that declares a window (the
// config line's --window wins when smaller); window64 lets 64 deliveries be written ahead.
var modes = []mode{{"lockstep", 1}, {"window64", 64}}

// actionLine is the config line of the benchmark streamlet running argv.
func actionLine(argv []string, concurrency, window int) string {
	return fmt.Sprintf("bench --in in=bench.v1 --out out=bench.v1 --concurrency %d --window %d -- %s", concurrency, window, actionconf.Join(argv))
}

// parseAction parses a config line or fails the benchmark.
func parseAction(b testing.TB, line string) *actionconf.Action {
	a, err := actionconf.ParseString(line)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// envBrokers names a real Kafka cluster (host:port,…; scripts/kafka start prints it) the
// benchmarks run against instead of their in-process kfake: BENCH_BROKERS. Unset, the broker
// is kfake whatever MILLRACE_KAFKA_BROKERS says, so that the figures are of this machine
// alone (the state restore's benchmark, in sidecar/internal/state, follows
// MILLRACE_KAFKA_BROKERS).
const envBrokers = "BENCH_BROKERS"

// broker is the benchmark's Kafka: an in-process kfake broker, or the real cluster
// BENCH_BROKERS names, with an admin client.
type broker struct {
	*testkit.Broker
	n atomic.Int64 // topic and group name counter
	// run is, on a real cluster, this benchmark's part of every topic and group name: the
	// cluster outlives the run, and the next run must not find its topics.
	run string
}

// newBroker starts a one-broker kfake cluster, closed when the benchmark ends, or connects to
// the cluster BENCH_BROKERS names.
func newBroker(b testing.TB) *broker {
	b.Helper()
	if seeds := os.Getenv(envBrokers); seeds != "" {
		return &broker{Broker: testkit.NewBroker(b, testkit.BrokerOptions{Brokers: strings.Split(seeds, ",")}),
			run: fmt.Sprintf("bench%d-%d", time.Now().Unix(), rand.IntN(1e6))}
	}
	return &broker{Broker: testkit.NewBroker(b, testkit.BrokerOptions{KfakeOnly: true})}
}

// name returns a fresh name starting with prefix.
func (br *broker) name(prefix string) string {
	if br.run != "" {
		return fmt.Sprintf("%s-%s-%d", prefix, br.run, br.n.Add(1))
	}
	return fmt.Sprintf("%s-%d", prefix, br.n.Add(1))
}

// topic creates a fresh topic of parts partitions and returns its name.
func (br *broker) topic(b testing.TB, prefix string, parts int) string {
	b.Helper()
	name := br.name(prefix)
	br.create(b, name, parts)
	return name
}

// create creates topic name of parts partitions with configs (key, value, …); on a real
// cluster it is deleted when the benchmark ends.
func (br *broker) create(b testing.TB, name string, parts int, configs ...string) {
	b.Helper()
	if err := br.CreateTopic(context.Background(), name, int32(parts), configs...); err != nil {
		b.Fatal(err)
	}
	if br.Real() {
		b.Cleanup(func() {
			if err := br.DeleteTopic(context.Background(), name); err != nil {
				b.Logf("topic %s is left on the cluster: %v", name, err)
			}
		})
	}
}

// producer returns a client producing to explicit partitions (Record.Partition), with no
// linger: what the benchmarks write goes out at once.
func (br *broker) producer(b testing.TB, opts ...kgo.Opt) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(br.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1 << 16)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// counter consumes a topic from its start (no group) and counts the distinct records it
// reads: every benchmark value carries its number ("id"), so a record written twice (a
// redelivery) is counted once, and a run ends only when every record it produced came out.
// It reads as read_committed: an exactly-once sidecar's emits count once their transaction
// commits (outside transactions nothing changes).
type counter struct {
	cl   *kgo.Client
	seen int // distinct records
	dups int // records read again
	ids  []bool
	// onRecord, when set, sees every record polled.
	onRecord func(*kgo.Record)
	// check, when set, is called between polls: its error ends the wait.
	check func() error
}

func (br *broker) counter(b testing.TB, topic string) *counter {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return &counter{cl: cl}
}

// waitFor polls until n distinct records were seen in all, or the timeout passes.
func (c *counter) waitFor(n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for c.seen < n {
		if c.check != nil {
			if err := c.check(); err != nil {
				return err
			}
		}
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d records seen within %s", c.seen, n, timeout)
		}
		if err := c.take(fs); err != nil {
			return err
		}
	}
	return nil
}

// pollFor polls for d and counts what comes.
func (c *counter) pollFor(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		if err := c.take(c.cl.PollFetches(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// take counts the records of one poll.
func (c *counter) take(fs kgo.Fetches) error {
	if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var bad []byte
	fs.EachRecord(func(r *kgo.Record) {
		id, ok := recordNumber(r.Value)
		if !ok {
			bad = r.Value
			return
		}
		if id >= len(c.ids) {
			c.ids = append(c.ids, make([]bool, id+1-len(c.ids)+len(c.ids)/2)...)
		}
		if c.ids[id] {
			c.dups++
		} else {
			c.ids[id] = true
			c.seen++
		}
		if c.onRecord != nil {
			c.onRecord(r)
		}
	})
	if bad != nil {
		return fmt.Errorf("an output record carries no record number (\"id\":N first, as value writes it): %.80q", bad)
	}
	return nil
}

// recordNumber returns the number of a value written by value, as it came out of an action:
// the integer after its leading {"id": (a JSON encoder may have put spaces around it).
func recordNumber(v []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(v, " "), []byte(`{"id":`))
	if !ok {
		return 0, false
	}
	rest = bytes.TrimLeft(rest, " ")
	n, i := 0, 0
	for ; i < len(rest) && i < 10 && rest[i] >= '0' && rest[i] <= '9'; i++ {
		n = n*10 + int(rest[i]-'0')
	}
	return n, i > 0 && n < 1<<28
}

// produce writes n records of valueSize-byte values round-robin over parts partitions of
// topic, numbered from first, and waits until the broker has them all.
func produce(cl *kgo.Client, topic string, parts, first, n, size int) error {
	return produceKeyed(cl, topic, parts, 0, first, n, size)
}

// recordKey is the key of record i among keys keys ("k" and i modulo keys) and its
// partition among parts: a key's records all go to one partition, as Kafka's partitioner
// sends them, and in the order of their numbers.
func recordKey(i, keys, parts int) ([]byte, int32) {
	k := i % keys
	return strconv.AppendInt([]byte{'k'}, int64(k), 10), int32(k % parts)
}

// produceKeyed is produce with keys keys (0: keyless, round-robin): record i has the key
// recordKey gives it.
func produceKeyed(cl *kgo.Client, topic string, parts, keys, first, n, size int) error {
	var (
		mu   sync.Mutex
		ferr error
	)
	ctx := context.Background()
	for i := first; i < first+n; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i % parts), Value: value(i, size)}
		if keys > 0 {
			r.Key, r.Partition = recordKey(i, keys, parts)
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				ferr = cmp(ferr, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return ferr
}

// cmp returns a when it is not nil, else b.
func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// pipeline is a streamlet process served in this process on a free loopback port, and the
// real sidecar driving it over gRPC from the broker's inlet topic to its outlet topic: what
// `millrace run` runs.
type pipeline struct {
	in, out string
	parts   int
	sc      *sidecar.Sidecar
}

// batchLimits are an inlet's batch limits (zero: the sidecar's defaults).
type batchLimits struct{ records, bytes int }

// startPipeline serves a streamlet with serve (which must return when its context ends),
// starts a sidecar for a with fresh inlet and outlet topics of parts partitions, and stops
// both when the benchmark ends: the sidecar first, as in a pod.
func startPipeline(b testing.TB, br *broker, a *actionconf.Action, parts int, lim batchLimits, serve func(context.Context, net.Listener) error) *pipeline {
	b.Helper()
	return startPipelineAs(b, br, a, parts, lim, serve, sidecar.AtLeastOnce)
}

// startPipelineAs is startPipeline with the sidecar in delivery mode d.
func startPipelineAs(b testing.TB, br *broker, a *actionconf.Action, parts int, lim batchLimits, serve func(context.Context, net.Listener) error, d sidecar.Delivery) *pipeline {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &pipeline{in: br.topic(b, "in", parts), out: br.topic(b, "out", parts), parts: parts}
	procCtx, stopProc := context.WithCancel(context.Background())
	procDone := make(chan error, 1)
	go func() { procDone <- serve(procCtx, lis) }()
	b.Cleanup(func() {
		stopProc()
		if err := <-procDone; err != nil {
			b.Errorf("the streamlet process: %v", err)
		}
	})
	if lim.records == 0 {
		lim.records = sidecar.DefaultBatchMaxRecords
	}
	if lim.bytes == 0 {
		lim.bytes = sidecar.DefaultBatchMaxBytes
	}
	cfg := &sidecar.Config{
		Brokers: br.Addrs, Pipeline: "bench", Streamlet: a.Name, Deployed: a.Spec(version),
		Inlets:        []sidecar.Inlet{{Port: "in", Topic: p.in, MaxRecords: lim.records, MaxBytes: lim.bytes}},
		Outlets:       []sidecar.Outlet{{Port: "out", Topic: p.out}},
		ConsumerGroup: br.name("group"), ProcessPort: lis.Addr().(*net.TCPAddr).Port, SidecarVersion: version,
		DiscoveryBackoff: sidecar.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		FailureBackoff:   sidecar.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second},
		Delivery:         d,
	}
	sc, err := sidecar.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	p.sc = sc
	scCtx, stopSidecar := context.WithCancel(context.Background())
	scDone := make(chan error, 1)
	go func() { scDone <- sc.Run(scCtx) }()
	b.Cleanup(func() { // registered last: runs first
		stopSidecar()
		if err := <-scDone; err != nil {
			b.Errorf("the sidecar: %v", err)
		}
	})
	return p
}

// serveBridge returns the serve function of the real bridge for a.
func serveBridge(b testing.TB, a *actionconf.Action) func(context.Context, net.Listener) error {
	srv, err := bridge.NewServer(bridge.Options{Action: a, Version: version})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Serve
}

// serveNative returns the serve function of the native Go streamlet with a's descriptor: every
// record echoed to "out" in the gRPC handler that receives its batch, then the Ack; no child
// process. It is the ceiling without the bridge: what a streamlet written in Go against the
// protocol costs.
func serveNative(a *actionconf.Action) func(context.Context, net.Listener) error {
	// The bridge's own server options (bridge/server.go): the same codec, buffer pool and
	// message limits, so the two streamlets differ only in what runs behind the stream.
	limit := protocol.MaxMessageBytes + 1<<20
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit), codec.ServerOption(), experimental.BufferPool(codec.Pool)}
	n := &testkit.Streamlet{Spec: a.Spec(version), Options: opts}
	return n.Serve
}

// runs collects one figure per run of a benchmark and reports their median.
type runs []float64

func (r runs) median() float64 {
	if len(r) == 0 {
		return 0
	}
	s := slices.Clone(r)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// envInt returns the integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && n > 0 {
		return n
	}
	return def
}
