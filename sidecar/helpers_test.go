package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
		ProtocolVersion: protocol.BaseVersion,
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

// fakeProcess is the streamlet process of the tests: testkit's fake on a free loopback port,
// keeping what it is sent.
type fakeProcess = testkit.Streamlet

// call is one batch handed to the fake process.
type call = testkit.Call

// echo is the well-behaved process: each record emitted to "out" with its key and headers,
// the value suffixed with "!", a header naming the conversation, then the Ack.
func echo(c *call) error {
	for _, r := range c.Batch.Records {
		out := &flowv1.Record{Key: r.Record.Key, Value: append(bytes.Clone(r.Record.Value), '!')}
		out.Headers = append(out.Headers, r.Record.Headers...)
		out.Headers = append(out.Headers, &flowv1.Header{Key: "conv", Value: []byte(fmt.Sprint(c.Conv))})
		if err := c.Emit("out", out); err != nil {
			return err
		}
	}
	return c.Ack()
}

// errClose, returned by a fake process's OnBatch, ends the stream normally without being asked.
var errClose = testkit.ErrClose

// newProcess serves a fake process deploying testSpec that answers batches with onBatch.
func newProcess(t testing.TB, onBatch func(*call) error) *fakeProcess {
	t.Helper()
	f := &fakeProcess{Spec: testSpec(), OnBatch: onBatch, Record: true, Started: make(chan int, 1000), Reported: make(chan struct{}, 10),
		Options: []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)}}
	f.Listen(t)
	return f
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
		"FLOW_PROCESS_PORT":   f.Port(),
		// Bound when an inlet keeps state: never the default, which tests running at once share.
		"FLOW_SIDECAR_PORT":   strconv.Itoa(testkit.FreePort(t)),
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

// topicID returns topic's id, as requests of newer versions (Produce v13, Fetch v13) name it.
func topicID(t testing.TB, b *testkit.Broker, topic string) kadm.TopicID {
	t.Helper()
	md, err := kadm.NewClient(b.Admin).Metadata(context.Background(), topic)
	if err == nil {
		err = md.Topics[topic].Err
	}
	if err != nil {
		t.Fatalf("the topic id of %s: %v", topic, err)
	}
	return md.Topics[topic].ID
}
