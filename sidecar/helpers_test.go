package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// waitTimeout bounds every wait for the sidecar to reach a state; it is a deadline for a
// failure message, not a timing assertion.
const waitTimeout = 60 * time.Second

// newBroker is the Kafka the tests run against (kfake, or the real broker named by
// MILLRACE_KAFKA_BROKERS); its admin client produces to the partition each record names.
func newBroker(t testing.TB) *testkit.Broker {
	t.Helper()
	return testkit.NewBroker(t, testkit.BrokerOptions{Client: []kgo.Opt{
		kgo.DefaultProduceTopic(""), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}})
}

// committed returns the group's committed offsets of topic, by partition.
func committed(t testing.TB, b *testkit.Broker, group, topic string) map[int32]int64 {
	t.Helper()
	out, err := b.Committed(context.Background(), group, topic)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor polls cond until it holds, failing the test with what after waitTimeout. It is for
// state only visible by asking the broker or the sidecar's counters.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !testkit.Eventually(waitTimeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// testSpec is the streamlet the tests deploy: one inlet "in", one outlet "out", a parameter.
func testSpec() *flowv1.Spec {
	return &flowv1.Spec{
		ProtocolVersion: protocol.Version,
		Sdk:             &flowv1.SdkInfo{Name: "test", Version: "0"},
		Streamlet: &flowv1.StreamletDescriptor{
			Name:    "upper",
			Inlets:  []*flowv1.Port{{Name: "in", Contract: &flowv1.Contract{Format: "json", SchemaName: "text.v1", Fingerprint: protocol.Fingerprint("text.v1")}}},
			Outlets: []*flowv1.Port{{Name: "out", Contract: &flowv1.Contract{Format: "json", SchemaName: "text.v1", Fingerprint: protocol.Fingerprint("text.v1")}}},
			ConfigParameters: []*flowv1.ConfigParameter{
				{Key: "suffix", Type: flowv1.ConfigType_STRING, DefaultValue: "!"},
				{Key: "min-rooms", Type: flowv1.ConfigType_INTEGER},
			},
		},
	}
}

// writeDescriptor writes spec as descriptor.json in a temporary folder and returns its path.
func writeDescriptor(t testing.TB, spec *flowv1.Spec) string {
	t.Helper()
	data, err := protocol.MarshalDescriptor(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "descriptor.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// call is one batch handed to the fake process.
type call struct {
	ctx   context.Context // the stream's
	conv  int             // 1 for the first conversation
	start *flowv1.Start
	batch *flowv1.Batch
	send  func(*flowv1.FromProcess) error
}

// done is closed when the stream ends.
func (c *call) done() <-chan struct{} { return c.ctx.Done() }

func (c *call) emit(outlet string, r *flowv1.Record) error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: c.batch.BatchId, Outlet: outlet, Record: r}}})
}

func (c *call) ack() error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Ack{Ack: &flowv1.Ack{BatchId: c.batch.BatchId}}})
}

func (c *call) fail(msg string) error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Fail{Fail: &flowv1.Fail{BatchId: c.batch.BatchId, Error: &flowv1.Error{Message: msg}}}})
}

// echo is the well-behaved process: each record emitted to "out" with its key and headers,
// the value suffixed with "!", a header naming the conversation, then the Ack.
func echo(c *call) error {
	for _, r := range c.batch.Records {
		out := &flowv1.Record{Key: r.Record.Key, Value: append(bytes.Clone(r.Record.Value), '!')}
		out.Headers = append(out.Headers, r.Record.Headers...)
		out.Headers = append(out.Headers, &flowv1.Header{Key: "conv", Value: []byte(fmt.Sprint(c.conv))})
		if err := c.emit("out", out); err != nil {
			return err
		}
	}
	return c.ack()
}

// errClose, returned by a fake process's onBatch, ends the stream normally without being asked.
var errClose = errors.New("close the stream")

// fakeProcess is a streamlet process written for the tests: Discovery and Streamlet on
// 127.0.0.1:0, answering batches with onBatch (one goroutine per batch when async).
type fakeProcess struct {
	flowv1.UnimplementedDiscoveryServer
	flowv1.UnimplementedStreamletServer

	addr  string
	srv   *grpc.Server
	async bool

	mu       sync.Mutex
	spec     *flowv1.Spec
	onBatch  func(*call) error
	onStart  func(conv int, start *flowv1.Start) error // nil: fine
	onDisc   func()
	starts   []*flowv1.Start
	stops    int
	reports  []*flowv1.Problems
	batches  []*flowv1.Batch
	startCh  chan int // conversation numbers, as they start
	reportCh chan struct{}
}

func newProcess(t testing.TB, onBatch func(*call) error) *fakeProcess {
	t.Helper()
	f := &fakeProcess{spec: testSpec(), onBatch: onBatch, startCh: make(chan int, 1000), reportCh: make(chan struct{}, 10)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	f.serve(lis)
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *fakeProcess) serve(lis net.Listener) {
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	flowv1.RegisterDiscoveryServer(srv, f)
	flowv1.RegisterStreamletServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go srv.Serve(lis)
}

// stop ends the server and every stream at once: the process becomes unreachable.
func (f *fakeProcess) stop() {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	srv.Stop()
}

// restart serves again on the same address after stop.
func (f *fakeProcess) restart(t testing.TB) {
	lis, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Errorf("listen again on %s: %v", f.addr, err)
		return
	}
	f.serve(lis)
}

func (f *fakeProcess) port() string { _, p, _ := net.SplitHostPort(f.addr); return p }

func (f *fakeProcess) Discover(context.Context, *flowv1.SidecarInfo) (*flowv1.Spec, error) {
	f.mu.Lock()
	hook := f.onDisc
	spec := f.spec
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return spec, nil
}

func (f *fakeProcess) ReportError(_ context.Context, ps *flowv1.Problems) (*flowv1.Empty, error) {
	f.mu.Lock()
	f.reports = append(f.reports, ps)
	f.mu.Unlock()
	f.reportCh <- struct{}{}
	return &flowv1.Empty{}, nil
}

func (f *fakeProcess) Run(stream flowv1.Streamlet_RunServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return errors.New("fake process: the first message is not Start")
	}
	f.mu.Lock()
	f.starts = append(f.starts, start)
	conv := len(f.starts)
	onStart := f.onStart
	f.mu.Unlock()
	f.startCh <- conv
	if onStart != nil {
		if err := onStart(conv, start); err != nil {
			return err
		}
	}
	var sendMu sync.Mutex
	send := func(m *flowv1.FromProcess) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 1)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			wg.Wait()
			select {
			case err := <-errc:
				return err
			default:
				return nil
			}
		}
		if err != nil {
			return err
		}
		switch m := msg.Message.(type) {
		case *flowv1.ToProcess_Batch:
			f.mu.Lock()
			f.batches = append(f.batches, m.Batch)
			h := f.onBatch
			f.mu.Unlock()
			c := &call{ctx: stream.Context(), conv: conv, start: start, batch: m.Batch, send: send}
			if !f.async {
				if err := h(c); errors.Is(err, errClose) {
					return nil
				} else if err != nil {
					return err
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := h(c); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}()
		case *flowv1.ToProcess_Stop:
			f.mu.Lock()
			f.stops++
			f.mu.Unlock()
		}
		select {
		case err := <-errc:
			return err
		default:
		}
	}
}

func (f *fakeProcess) seen() []*flowv1.Batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*flowv1.Batch(nil), f.batches...)
}

func (f *fakeProcess) conversations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

// env is a deploy environment for the sidecar; tests change entries before calling config.
type env map[string]string

func baseEnv(t testing.TB, b *testkit.Broker, f *fakeProcess, in, out string) env {
	return env{
		"FLOW_BROKERS":        strings.Join(b.Addrs, ","),
		"FLOW_PIPELINE":       "shop",
		"FLOW_STREAMLET":      "upper",
		"FLOW_DESCRIPTOR":     writeDescriptor(t, testSpec()),
		"FLOW_INLETS":         "in=" + in,
		"FLOW_OUTLETS":        "out=" + out,
		"FLOW_CONFIG":         `{"min-rooms": 2}`,
		"FLOW_CONSUMER_GROUP": "group-" + in,
		"FLOW_PROCESS_PORT":   f.port(),
		"FLOW_READINESS_FILE": filepath.Join(t.TempDir(), "ready"),
	}
}

func (e env) get(k string) string { return e[k] }

// config reads e as the sidecar would, with the tests' short backoffs.
func (e env) config(t testing.TB) *sidecar.Config {
	t.Helper()
	cfg, err := sidecar.ConfigFromEnv(e.get, nil)
	if err != nil {
		t.Fatalf("ConfigFromEnv: %v", err)
	}
	cfg.DiscoveryBackoff = sidecar.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	cfg.FailureBackoff = sidecar.Backoff{Initial: 5 * time.Millisecond, Max: 40 * time.Millisecond}
	cfg.SidecarVersion = "test"
	return cfg
}

// running is a sidecar running in the test.
type running struct {
	sc     *sidecar.Sidecar
	cancel context.CancelFunc
	done   chan error
	logs   *testkit.SyncBuffer
	// records are the same logs as typed records, for errors.Is on a logged error
	records *testkit.Logs
}

func start(t testing.TB, cfg *sidecar.Config) *running {
	t.Helper()
	return startTuned(t, cfg, nil)
}

// startTuned is start, with tune applied to the sidecar before it runs.
func startTuned(t testing.TB, cfg *sidecar.Config, tune func(*sidecar.Sidecar)) *running {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	records := testkit.NewLogs(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	logger := slog.New(records)
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	if tune != nil {
		tune(sc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sc: sc, cancel: cancel, done: make(chan error, 1), logs: logs, records: records}
	go func() { r.done <- sc.Run(ctx) }()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("sidecar log:\n%s", logs.String())
		}
	})
	return r
}

// stop shuts the sidecar down and returns Run's error; it may be called twice.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("the sidecar did not stop")
		return nil
	}
}

// failures returns the stream failures the sidecar logged (each wraps ErrStreamFailed), in
// order, those of cause only unless cause is "".
func (r *running) failures(cause string) []error {
	var out []error
	for _, err := range r.records.Errors("") {
		if errors.Is(err, sidecar.ErrStreamFailed) && (cause == "" || sidecar.CauseOf(err) == cause) {
			out = append(out, err)
		}
	}
	return out
}

// wrapping returns the errors of errs that wrap target, in order.
func wrapping(errs []error, target error) []error {
	var out []error
	for _, err := range errs {
		if errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return out
}

// stalled reports whether the sidecar warned, in its log (where the warning goes outside a
// cluster), that topic's partition is stalled at offset.
func (r *running) stalled(topic string, partition int32, offset int64) bool {
	for _, a := range r.records.Attrs("partition stalled") {
		if a["topic"] == topic && a["partition"] == int64(partition) && a["offset"] == offset {
			return true
		}
	}
	return false
}

// stallWarned reports whether the sidecar raised a PartitionStalled warning.
func (r *running) stallWarned() bool { return r.sc.Stats().StallWarnings > 0 }

// records returns n records for topic spread over partitions, keyed k0..k9 except every
// seventh, which has no key.
func records(topic string, partitions int32, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprintf("v%d", i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}}}
		if i%7 != 0 {
			r.Key = []byte(fmt.Sprintf("k%d", i%10))
		}
		out[i] = r
	}
	return out
}

// allCommitted reports whether the group has committed every partition of topic to want.
func allCommitted(t testing.TB, b *testkit.Broker, group, topic string, want map[int32]int64) bool {
	got := committed(t, b, group, topic)
	for p, o := range want {
		if got[p] != o {
			return false
		}
	}
	return true
}

// ends returns the end offset per partition of records written by records().
func ends(partitions int32, n int) map[int32]int64 {
	out := map[int32]int64{}
	for i := range n {
		out[int32(i)%partitions]++
	}
	return out
}

func header(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// deleteTopic deletes topic.
func deleteTopic(t testing.TB, b *testkit.Broker, topic string) {
	t.Helper()
	if err := b.DeleteTopic(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
}

// createTopicNamed creates topic with the given name, retrying while the broker still deletes
// it.
func createTopicNamed(t testing.TB, b *testkit.Broker, name string, partitions int32) {
	t.Helper()
	waitFor(t, "topic "+name+" created again", func() bool {
		return b.CreateTopic(context.Background(), name, partitions) == nil
	})
}
