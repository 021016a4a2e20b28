package sidecar_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar"
)

// TestMetricsStalledAndPaused fails every batch of partition 0: its stream failures are
// counted by cause, it is paused at high water and then stalled, and its lag still follows
// the records produced to it while it fetches nothing; partition 1 goes on.
func TestMetricsStalledAndPaused(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
	// Partition 1's one batch is answered before partition 0's first Fail ends the stream, so
	// it is committed (the Ack came first); later conversations fail at once.
	p1Answered := make(chan struct{})
	f := newProcess(t, func(c *call) error {
		if c.Batch.Partition == 0 {
			select {
			case <-p1Answered:
			case <-c.Done():
				return nil
			}
			return c.Fail("poison")
		}
		err := echo(c)
		select {
		case <-p1Answered:
		default:
			close(p1Answered)
		}
		return err
	})
	f.Async = true
	e := baseEnv(t, b, f, in, out)
	addr := freeAddr(t)
	e["FLOW_METRICS_ADDR"] = addr
	e["FLOW_STALL_WARNING_AFTER"] = "30ms"
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "2" // high water: 8 records
	group := e["FLOW_CONSUMER_GROUP"]
	produceTo := func(p int32, n int) {
		rs := records(in, 1, n)
		for _, r := range rs {
			r.Partition = p
		}
		b.Produce(t, rs...)
	}
	produceTo(0, 20)
	produceTo(1, 2)
	startTuned(t, e.config(t), func(s *sidecar.Sidecar) { sidecar.SetLagRefresh(s, 20*time.Millisecond) })

	m := waitMetrics(t, addr, "partition 0 stalled and paused, partition 1 committed", func(m exposition) bool {
		return m.v("millrace_sidecar_partition_stalled", "topic", in, "partition", "0") == 1 &&
			m.v("millrace_sidecar_partitions_paused", "topic", in) == 1 &&
			m.v("millrace_sidecar_records_committed_total", "topic", in) == 2
	})
	if got := m.v("millrace_sidecar_partition_stalled", "topic", in, "partition", "1"); got != 0 {
		t.Errorf("partition 1 stalled = %v; want 0", got)
	}
	if got := m.v("millrace_sidecar_stream_failures_total", "cause", "process_failed_batch"); got < 1 {
		t.Errorf("stream failures by process_failed_batch = %v; want at least 1", got)
	}
	for _, cause := range []string{"produce", "commit", "record_too_large", "message_too_large"} {
		if got := m.v("millrace_sidecar_stream_failures_total", "cause", cause); got != 0 {
			t.Errorf("stream failures by %s = %v; want 0 (only the process fails batches here)", cause, got)
		}
	}
	if got := m.v("millrace_sidecar_conversations_total"); got < 2 {
		t.Errorf("conversations = %v; want one more after each failure, at least 2", got)
	}

	// Paused, partition 0 fetches nothing; its lag comes from the offset queries.
	produceTo(0, 5)
	want := brokerLag(t, b, group, in)
	if want[0] != 25 || want[1] != 0 {
		t.Fatalf("the broker's lag = %v; want 25 on partition 0 and 0 on partition 1", want)
	}
	waitMetrics(t, addr, "the stalled partition's lag to follow its new records, 25", func(m exposition) bool {
		return m.v("millrace_sidecar_consumer_lag_records", "topic", in, "partition", "0") == 25 &&
			m.v("millrace_sidecar_consumer_lag_records", "topic", in, "partition", "1") == 0
	})
}

// TestMetricsDiscoveryAndHealth starts the sidecar before its process: discovery attempts go
// unanswered, nothing is live and /readyz says 503 while /healthz says 200; once the process
// is up, the attempt is accepted and /readyz says 200. At the end the listener is closed.
func TestMetricsDiscoveryAndHealth(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	f.Stop()
	e := baseEnv(t, b, f, in, out)
	addr := freeAddr(t)
	e["FLOW_METRICS_ADDR"] = addr
	r := start(t, e.config(t))
	waitMetrics(t, addr, "two unanswered discovery attempts", func(m exposition) bool {
		return m.v("millrace_sidecar_discovery_attempts_total", "result", "unanswered") >= 2
	})
	m, err := scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := m.value("millrace_sidecar_conversation_live"); !ok || got != 0 {
		t.Errorf("conversation live before the process answers = %v (present %v); want 0", got, ok)
	}
	if got := m.v("millrace_sidecar_discovery_attempts_total", "result", "accepted"); got != 0 {
		t.Errorf("accepted discovery attempts before the process answers = %v; want 0", got)
	}
	if code := get(t, addr, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the process answers = %d; want 503", code)
	}
	if code := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz before the process answers = %d; want 200", code)
	}
	f.Restart(t)
	waitMetrics(t, addr, "the discovery accepted and a live conversation", func(m exposition) bool {
		return m.v("millrace_sidecar_discovery_attempts_total", "result", "accepted") == 1 &&
			m.v("millrace_sidecar_conversation_live") == 1
	})
	if code := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz during a conversation = %d; want 200", code)
	}

	// The process goes away: the stream fails as unreachable, and the sidecar is not ready.
	f.Stop()
	waitMetrics(t, addr, "the unreachable process counted, and nothing live", func(m exposition) bool {
		return m.v("millrace_sidecar_stream_failures_total", "cause", "process_unreachable") >= 1 &&
			m.v("millrace_sidecar_conversation_live") == 0
	})
	if code := get(t, addr, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the process gone = %d; want 503", code)
	}
	r.stop(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the metrics address %s still accepts connections after Run returned; want the listener closed", addr)
	}
}

// TestMetricsAddress: a malformed FLOW_METRICS_ADDR is a configuration problem naming it, and
// an address in use fails Run at start-up naming it, before anything else starts.
func TestMetricsAddress(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	for _, bad := range []string{"9101", "localhost:http-alt", ":70000"} {
		e := baseEnv(t, b, f, in, out)
		e["FLOW_METRICS_ADDR"] = bad
		_, err := sidecar.ConfigFromEnv(e.get, nil)
		if !errors.Is(err, sidecar.ErrConfig) || !strings.Contains(err.Error(), "FLOW_METRICS_ADDR="+bad) {
			t.Errorf("ConfigFromEnv(FLOW_METRICS_ADDR=%s) = %v; want a configuration problem naming it", bad, err)
		}
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	e := baseEnv(t, b, f, in, out)
	e["FLOW_METRICS_ADDR"] = busy.Addr().String()
	sc, err := sidecar.New(e.config(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = sc.Run(ctx)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "FLOW_METRICS_ADDR="+busy.Addr().String()) {
		t.Errorf("Run with FLOW_METRICS_ADDR in use = %v; want EADDRINUSE naming the variable and the address", err)
	}
	if f.Conversations() != 0 {
		t.Errorf("the sidecar talked to the process (%d conversations) although it could not serve its metrics", f.Conversations())
	}
}

// TestMetricsFollowAssignment runs two sidecars in one group: each exports a lag series for
// exactly the partitions it owns, a partition's series leaves with it, and comes back when the
// other sidecar leaves.
func TestMetricsFollowAssignment(t *testing.T) {
	b := newBroker(t)
	const parts, n = 4, 40
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	b.Produce(t, records(in, parts, n)...)
	fast := func(s *sidecar.Sidecar) { sidecar.SetLagRefresh(s, 20*time.Millisecond) }
	fa := newProcess(t, echo)
	ea := baseEnv(t, b, fa, in, out)
	addrA := freeAddr(t)
	ea["FLOW_METRICS_ADDR"] = addrA
	group := ea["FLOW_CONSUMER_GROUP"]
	ra := startTuned(t, ea.config(t), fast)
	all := []int32{0, 1, 2, 3}
	waitMetrics(t, addrA, "A's lag series for every partition", func(m exposition) bool {
		return slices.Equal(m.partitions("millrace_sidecar_consumer_lag_records", in), all)
	})

	fb := newProcess(t, echo)
	eb := baseEnv(t, b, fb, in, out)
	eb["FLOW_CONSUMER_GROUP"] = group
	addrB := freeAddr(t)
	eb["FLOW_METRICS_ADDR"] = addrB
	rb := startTuned(t, eb.config(t), fast)
	var ownedA, ownedB []int32
	waitFor(t, "each sidecar's lag series to be its own partitions", func() bool {
		ownedA, ownedB = sidecar.Owned(ra.sc, in), sidecar.Owned(rb.sc, in)
		slices.Sort(ownedA)
		slices.Sort(ownedB)
		ma, errA := scrape(addrA)
		mb, errB := scrape(addrB)
		return errA == nil && errB == nil && len(ownedA) > 0 && len(ownedB) > 0 && len(ownedA)+len(ownedB) == parts &&
			slices.Equal(ma.partitions("millrace_sidecar_consumer_lag_records", in), ownedA) &&
			slices.Equal(mb.partitions("millrace_sidecar_consumer_lag_records", in), ownedB) &&
			ma.v("millrace_sidecar_partitions_assigned", "topic", in) == float64(len(ownedA)) &&
			mb.v("millrace_sidecar_partitions_assigned", "topic", in) == float64(len(ownedB))
	})
	for _, p := range ownedB {
		if slices.Contains(ownedA, p) {
			t.Fatalf("partition %d owned by both sidecars (A %v, B %v)", p, ownedA, ownedB)
		}
	}

	rb.stop(t)
	waitMetrics(t, addrA, "A's lag series for every partition again", func(m exposition) bool {
		return slices.Equal(m.partitions("millrace_sidecar_consumer_lag_records", in), all) &&
			m.v("millrace_sidecar_partitions_assigned", "topic", in) == parts
	})
}

// TestMetricsRefused: a process refused at discovery is counted as refused, in the registry
// the sidecar hands to a caller that serves it (the listener is closed once Run returns).
func TestMetricsRefused(t *testing.T) {
	f := newProcess(t, echo)
	f.Spec.ProtocolVersion = "9.0"
	e := baseEnv(t, noBroker, f, "in-topic", "out-topic")
	r := start(t, e.config(t))
	if err := <-r.done; !errors.Is(err, sidecar.ErrRefused) {
		t.Fatalf("Run() = %v; want an error wrapping ErrRefused", err)
	}
	close(r.done)
	fams, err := r.sc.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := exposition{}
	for _, f := range fams {
		m[f.GetName()] = f
	}
	for result, want := range map[string]float64{"refused": 1, "accepted": 0, "unanswered": 0} {
		if got := m.v("millrace_sidecar_discovery_attempts_total", "result", result); got != want {
			t.Errorf("discovery attempts %s = %v; want %v", result, got, want)
		}
	}
	if got := m.v("millrace_sidecar_conversations_total"); got != 0 {
		t.Errorf("conversations = %v; want 0", got)
	}
}
