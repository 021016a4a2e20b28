package local_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestRunMetrics: Options.Metrics serves both halves of the streamlet, each series labelled
// with it, counting what the run really did; the progress line shows the rate and the lag,
// down to 0 once everything is committed.
func TestRunMetrics(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	in := `{"key": "u1", "payload": {"name": "Ada"}}
{"key": "u2", "payload": {"name": "Zoë"}}
{"payload": {"name": "Grace"}}
`
	var progress testkit.SyncBuffer
	p := actiondir.Single(a)
	opts := local.Options{Input: strings.NewReader(in), Follow: true, Metrics: lis, Progress: &progress, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := local.Run(ctx, p, opts)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run(follow) after cancel = %v", err)
		}
		if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			t.Errorf("the metrics address %s still accepts connections after Run returned", addr)
		}
	}()

	inlet := p.Streamlets[0].Bindings["in"]
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"millrace_sidecar_records_committed_total", []string{"streamlet", "greet", "topic", inlet}, 3},
		{"millrace_sidecar_conversation_live", []string{"streamlet", "greet"}, 1},
		{"millrace_items_total", []string{"outcome", "done", "streamlet", "greet"}, 3},
		{"millrace_pool_processes", []string{"streamlet", "greet"}, 1},
		{"millrace_item_attempt_seconds", []string{"outcome", "done", "streamlet", "greet"}, 3},
	}
	var got testkit.Exposition
	shown := func() bool {
		got = testkit.Scrape(t, addr)
		for _, w := range want {
			if v, found := got.Value(w.name, w.labels...); !found || v != w.value {
				return false
			}
		}
		return true
	}
	if !testkit.Eventually(time.Minute, shown) {
		t.Fatalf("the run's metrics never showed %v:\n%v", want, got)
	}
	if !testkit.Eventually(time.Minute, func() bool { return strings.Contains(progress.String(), "committed 3  out 3  failed 0") }) {
		t.Fatalf("the progress line never showed 3 committed: %q", progress.String())
	}
	last := progress.String()
	last = last[strings.LastIndex(last, "\r\033[K")+len("\r\033[K"):]
	if !strings.Contains(last, " rec/s  lag 0") {
		t.Errorf("progress line %q; want the rate and lag 0 once all is committed", last)
	}
}

// TestRunActionMetricsAddrTaken: a streamlet's own --metrics is served by the run too, so an
// address already taken stops the run before anything starts, naming the streamlet and the
// way out.
func TestRunActionMetricsAddrTaken(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	a.Metrics = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := actiondir.Single(a)
	opts := local.Options{Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	_, err = local.Run(ctx, p, opts)
	if err == nil || !strings.Contains(err.Error(), "streamlet greet") || !strings.Contains(err.Error(), "--metrics "+a.Metrics) || !strings.Contains(err.Error(), "millrace run --metrics") {
		t.Fatalf("Run with --metrics %s taken = %v; want an error naming the streamlet, the address and millrace run --metrics", a.Metrics, err)
	}
}
