package sidecar_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// exposition is one scrape of the metrics endpoint, parsed, with the queries these tests make.
type exposition testkit.Exposition

// freeAddr returns a free 127.0.0.1 address for the metrics listener.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape GETs http://addr/metrics and parses the text exposition.
func scrape(addr string) (exposition, error) {
	m, err := testkit.Metrics(addr)
	return exposition(m), err
}

// waitMetrics scrapes addr until cond holds of a scrape and returns that scrape.
func waitMetrics(t testing.TB, addr, what string, cond func(exposition) bool) exposition {
	t.Helper()
	var last exposition
	holds := func() bool {
		m, err := scrape(addr)
		if err != nil {
			return false
		}
		last = m
		return cond(m)
	}
	if !testkit.Eventually(waitTimeout, holds) {
		t.Fatalf("timed out waiting for %s; the last scrape:\n%s", what, last)
	}
	return last
}

// value is [testkit.Exposition.Value].
func (e exposition) value(name string, kv ...string) (float64, bool) {
	return testkit.Exposition(e).Value(name, kv...)
}

// v is value, 0 when the series is missing.
func (e exposition) v(name string, kv ...string) float64 { x, _ := e.value(name, kv...); return x }

// partitions returns the partitions of topic that name has a series for, sorted.
func (e exposition) partitions(name, topic string) []int32 {
	var out []int32
	if f := e[name]; f != nil {
		for _, m := range f.Metric {
			if !testkit.HasLabels(m, "topic", topic) {
				continue
			}
			for _, l := range m.Label {
				if l.GetName() == "partition" {
					n, _ := strconv.Atoi(l.GetValue())
					out = append(out, int32(n))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func (e exposition) String() string { return testkit.Exposition(e).String() }

// get GETs a path of the metrics listener and returns its status code.
func get(t testing.TB, addr, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// brokerLag is what the broker says of topic's lag for group: end offset minus committed.
func brokerLag(t testing.TB, b *testkit.Broker, group, topic string) map[int32]int64 {
	t.Helper()
	ends, err := b.EndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	done := committed(t, b, group, topic)
	out := map[int32]int64{}
	for p, end := range ends {
		out[p] = end - done[p]
	}
	return out
}

// TestMetricsCountWhatFlows runs records through an echoing process and checks every counter
// and histogram against what happened: the records in the topics, the batches the process
// saw, the conversations it had; the lag is what the broker says, 0.
func TestMetricsCountWhatFlows(t *testing.T) {
	b := newBroker(t)
	const parts, n = 2, 50
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	addr := freeAddr(t)
	e["FLOW_METRICS_ADDR"] = addr
	b.Produce(t, records(in, parts, n)...)
	r := start(t, e.config(t))
	group := e["FLOW_CONSUMER_GROUP"]
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
	m := waitMetrics(t, addr, "the committed records counted", func(m exposition) bool {
		return m.v("millrace_sidecar_records_committed_total", "topic", in) == n
	})

	st := r.sc.Stats()
	if got := sentRecords(f); got != n {
		t.Errorf("the process received %v records; want %d, each once", got, n)
	}
	written := float64(b.Count(t, out))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"millrace_sidecar_records_fetched_total", []string{"topic", in}, n},
		{"millrace_sidecar_records_sent_total", []string{"topic", in}, sentRecords(f)},
		{"millrace_sidecar_records_emitted_total", []string{"topic", out}, n},
		{"millrace_sidecar_records_produced_total", []string{"topic", out}, written},
		{"millrace_sidecar_conversations_total", nil, float64(f.Conversations())},
		{"millrace_sidecar_discovery_attempts_total", []string{"result", "accepted"}, 1},
		{"millrace_sidecar_batch_round_trip_seconds", nil, float64(len(f.Batches()))},
		{"millrace_sidecar_produce_seconds", nil, written},
		{"millrace_sidecar_partitions_assigned", []string{"topic", in}, parts},
		{"millrace_sidecar_partitions_paused", []string{"topic", in}, 0},
		{"millrace_sidecar_conversation_live", nil, 1},
		{"millrace_sidecar_buffered_bytes", nil, 0},
		{"millrace_sidecar_emit_bytes_held", nil, 0},
	} {
		if got, ok := m.value(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got := m.v("millrace_sidecar_commit_seconds"); got < 1 || got > float64(st.BatchesCommitted) {
		t.Errorf("millrace_sidecar_commit_seconds count = %v; want between 1 and the %d batches committed", got, st.BatchesCommitted)
	}
	if got := len(m["millrace_sidecar_stream_failures_total"].GetMetric()); got != 9 {
		t.Errorf("millrace_sidecar_stream_failures_total has %d series; want one per cause, 9", got)
	}
	if got := m.v("millrace_sidecar_stream_failures_total"); got != 0 {
		t.Errorf("stream failures = %v; want 0", got)
	}
	want := brokerLag(t, b, group, in)
	for p := range int32(parts) {
		part := strconv.Itoa(int(p))
		if got, ok := m.value("millrace_sidecar_consumer_lag_records", "topic", in, "partition", part); !ok || int64(got) != want[p] {
			t.Errorf("lag of partition %d = %v (present %v); the broker says %d", p, got, ok, want[p])
		}
		for _, name := range []string{"millrace_sidecar_partition_stalled", "millrace_sidecar_oldest_uncommitted_record_age_seconds"} {
			if got, ok := m.value(name, "topic", in, "partition", part); !ok || got != 0 {
				t.Errorf("%s of partition %d = %v (present %v); want 0", name, p, got, ok)
			}
		}
	}
	if code := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d; want 200", code)
	}
	if code := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz during a conversation = %d; want 200", code)
	}
	r.stop(t)
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("GET /healthz after Run returned succeeded; want the listener closed")
	}
}

// sentRecords counts the records of every batch the process received.
func sentRecords(f *fakeProcess) float64 {
	n := 0
	for _, b := range f.Batches() {
		n += len(b.Records)
	}
	return float64(n)
}

// TestMetricsLagWhileHeld holds every batch at the process: the lag of each partition is its
// backlog as the broker counts it, follows new records, and falls to 0 once the batches are
// acknowledged; the oldest record's age is its Kafka timestamp's, and the emits of the held
// batches are counted as held.
func TestMetricsLagWhileHeld(t *testing.T) {
	b := newBroker(t)
	const parts, n = 3, 30
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	old := time.Now().Add(-time.Hour)
	backlog := records(in, parts, n)
	for _, r := range backlog {
		r.Timestamp = old
	}
	b.Produce(t, backlog...)
	held := make(chan struct{}, 100)
	release := make(chan struct{})
	emit := &flowv1.Record{Key: []byte("k"), Value: []byte("held-emit")} // 10 bytes
	f := newProcess(t, nil)
	f.Async = true
	f.OnBatch = func(c *call) error {
		if err := c.Emit("out", emit); err != nil {
			return err
		}
		held <- struct{}{}
		<-release
		return c.Ack()
	}
	e := baseEnv(t, b, f, in, out)
	addr := freeAddr(t)
	e["FLOW_METRICS_ADDR"] = addr
	start(t, e.config(t))
	group := e["FLOW_CONSUMER_GROUP"]
	for range parts {
		<-held
	}
	lagIs := func(want map[int32]int64) func(exposition) bool {
		return func(m exposition) bool {
			for p, w := range want {
				if got, ok := m.value("millrace_sidecar_consumer_lag_records", "topic", in, "partition", strconv.Itoa(int(p))); !ok || int64(got) != w {
					return false
				}
			}
			return true
		}
	}
	want := brokerLag(t, b, group, in)
	m := waitMetrics(t, addr, fmt.Sprintf("the lag of the held backlog, %v", want), func(m exposition) bool {
		return lagIs(want)(m) && m.v("millrace_sidecar_emit_bytes_held") == parts*10
	})
	for p := range int32(parts) {
		age := m.v("millrace_sidecar_oldest_uncommitted_record_age_seconds", "topic", in, "partition", strconv.Itoa(int(p)))
		if age < time.Hour.Seconds() || age > time.Since(old).Seconds()+1 { // +1: timestamps are in milliseconds
			t.Errorf("the oldest uncommitted record's age on partition %d = %vs; want its timestamp's, about an hour", p, age)
		}
	}
	if got := m.v("millrace_sidecar_buffered_bytes"); got <= 0 {
		t.Errorf("buffered bytes with a held backlog = %v; want more than 0", got)
	}
	if got := m.v("millrace_sidecar_records_committed_total", "topic", in); got != 0 {
		t.Errorf("records committed while held = %v; want 0", got)
	}

	// New records raise the lag by as many, per partition.
	b.Produce(t, records(in, parts, 2*parts)...)
	more := brokerLag(t, b, group, in)
	waitMetrics(t, addr, fmt.Sprintf("the lag to follow the new records, %v", more), lagIs(more))

	close(release)
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(parts, n+2*parts)) })
	zero := map[int32]int64{0: 0, 1: 0, 2: 0}
	m = waitMetrics(t, addr, "the lag to fall to 0", func(m exposition) bool {
		return lagIs(zero)(m) && m.v("millrace_sidecar_emit_bytes_held") == 0
	})
	if got := m.v("millrace_sidecar_oldest_uncommitted_record_age_seconds", "topic", in); got != 0 {
		t.Errorf("the oldest uncommitted record's age with nothing uncommitted = %v; want 0", got)
	}
}
