package bridge_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMetrics(t *testing.T) {
	r := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl --retries 1")
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"metric"}`), rec(1, nil, `{"op":"flaky","n":1,"outlets":["out"]}`), rec(2, nil, `{"op":"fail"}`))
	if a := s.wait(1); !a.ack {
		t.Fatalf("answer = %v; want Ack", a)
	}
	s.batch(2, 1, rec(0, nil, "x"))
	s.wait(2)
	expectEOF(t, s.stop())
	rec := httptest.NewRecorder()
	bridge.MetricsHandler(r.metrics).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`millrace_items_total{outcome="done"} 2`,
		`millrace_items_total{outcome="dead_letter"} 2`,
		`millrace_retries_total 1`,
		`millrace_batches_total{answer="ack"} 2`,
		`millrace_process_starts_total 1`,
		`millrace_action_pages_fetched_count{site="lyon"} 1`,
		`millrace_action_pages_fetched_sum{site="lyon"} 12`,
		`millrace_item_attempt_seconds_count{outcome="done"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// TestMetricsEndpoint: --metrics serves the Prometheus text format over HTTP.
func TestMetricsEndpoint(t *testing.T) {
	addr := freeAddr(t)
	r := startBridge(t, oneOutlet+" --metrics "+addr)
	waitServing(t, addr)
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"skip"}`))
	s.wait(1)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"millrace_conversations_total 1", `millrace_batches_total{answer="ack"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics lacks %s:\n%s", want, body)
		}
	}
	expectEOF(t, s.stop())
}

// TestActionMetricsCap: a careless action cannot grow the metrics without bound.
func TestActionMetricsCap(t *testing.T) {
	m := bridge.NewMetrics(4)
	bridge.RecordActionMetric(m, "bad name!", 2, map[string]string{"__x": "1", "quantile": "2"})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bridge.RecordActionMetric(m, "hits", 1, map[string]string{"user": fmt.Sprint(i)})
		}()
	}
	wg.Wait()
	bridge.RecordActionMetric(m, "hits", 1, map[string]string{"other": "x"})
	rec := httptest.NewRecorder()
	bridge.MetricsHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if n := strings.Count(body, "millrace_action_hits_count{"); n != 3 {
		t.Errorf("exported %d series of hits; want the cap, 3:\n%s", n, body)
	}
	for _, want := range []string{"millrace_action_metrics_dropped_total 8", `millrace_action_bad_name__sum{action___x="1",action_quantile="2"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// freeAddr returns a loopback address no one listens on, for a --metrics listener.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// waitServing waits until the --metrics listener on addr answers.
func waitServing(t *testing.T, addr string) {
	t.Helper()
	serving := func() bool { _, err := testkit.Metrics(addr); return err == nil } // polling, as Prometheus would
	if !testkit.Eventually(waitLimit, serving) {
		t.Fatalf("nothing serves metrics on %s", addr)
	}
}

// TestPoolMetrics scrapes the pool's gauges over HTTP while a delivery hangs with two records
// of its key queued behind it and the output of a later record held behind it, and the restart
// of a process that crashed.
func TestPoolMetrics(t *testing.T) {
	addr := freeAddr(t)
	r := startBridge(t, oneOutlet+" --concurrency 2 --window 1 --retries 1 --metrics "+addr)
	waitServing(t, addr)
	idle := map[string]float64{"millrace_pool_processes": 0, "millrace_pool_processes_busy": 0, "millrace_pool_items_queued": 0,
		"millrace_pool_deliveries_in_flight": 0, "millrace_pool_window_occupancy_ratio": 0, "millrace_process_restarts_total": 0,
		"millrace_output_held_bytes": 0, "millrace_output_budget_bytes": bridge.DefaultMaxHeldBytes}
	got := testkit.Scrape(t, addr)
	for k, v := range idle {
		if g, ok := got.Value(k); !ok || g != v {
			t.Errorf("before any conversation %s = %v (present %v); want %v", k, g, ok, v)
		}
	}
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"crash","n":1}`))
	if a := s.wait(1); !a.ack {
		t.Fatalf("answer = %v; want Ack after the crash and its retry", a)
	}
	// The retry may run on the other process while the crashed one is replaced.
	waitSamples(t, addr, "after a crash", map[string]float64{"millrace_process_restarts_total": 1, "millrace_pool_processes": 2})

	// The last record, of no key, is done on the other process; its 5,000-byte output waits for
	// the hanging record, before it in the batch.
	s.batch(2, 0, rec(1, []byte("k"), `{"op":"hang","n":9}`), rec(2, []byte("k"), `{}`), rec(3, []byte("k"), `{}`), rec(4, nil, `{"op":"big","n":5000}`))
	waitSamples(t, addr, "with a hanging delivery and two behind its key", map[string]float64{
		"millrace_pool_processes": 2, "millrace_pool_processes_busy": 1, "millrace_pool_items_queued": 2,
		"millrace_pool_deliveries_in_flight": 1, "millrace_pool_window": 1, "millrace_pool_window_occupancy_ratio": 0.5})
	var s0, s1 float64
	perSlot := func() bool {
		got := testkit.Scrape(t, addr)
		var ok0, ok1 bool
		s0, ok0 = got.Value("millrace_pool_process_deliveries_in_flight", "slot", "0")
		s1, ok1 = got.Value("millrace_pool_process_deliveries_in_flight", "slot", "1")
		return ok0 && ok1 && s0+s1 == 1
	}
	if !testkit.Eventually(waitLimit, perSlot) {
		t.Errorf("with one hanging delivery millrace_pool_process_deliveries_in_flight = %v on slot 0, %v on slot 1; want 1 in all, by slot", s0, s1)
	}
	if n, _ := testkit.Scrape(t, addr).Value("millrace_delivery_wait_seconds"); n < 1 {
		t.Errorf("millrace_delivery_wait_seconds counts %v answers; want the first batch's", n)
	}
	var held float64
	heldEmit := func() bool {
		held, _ = testkit.Scrape(t, addr).Value("millrace_output_held_bytes")
		return held >= 5000 && held < 5200 // the emit line: the value and its few fields
	}
	if !testkit.Eventually(waitLimit, heldEmit) {
		t.Fatalf("with a record's output held millrace_output_held_bytes = %v; want its emit line's size, 5000 to 5200", held)
	}
	s.sendStart(r, "c2", 0, `{}`) // voids the hanging conversation; a fresh pool, idle
	got = waitSamples(t, addr, "after a new Start", map[string]float64{
		"millrace_pool_processes": 2, "millrace_pool_processes_busy": 0, "millrace_pool_items_queued": 0, "millrace_pool_deliveries_in_flight": 0,
		"millrace_output_held_bytes": 0})
	if n, _ := got.Value("millrace_process_restarts_total"); n != 1 {
		t.Errorf("after the void millrace_process_restarts_total = %v; want still 1 (a pool closing restarts nothing)", n)
	}
	expectEOF(t, s.stop())
}

// waitSamples scrapes addr until every series of want has its value, and returns the last
// scrape.
func waitSamples(t *testing.T, addr, when string, want map[string]float64) testkit.Exposition {
	t.Helper()
	var got testkit.Exposition
	matches := func() bool { // polling the endpoint, as Prometheus would
		got = testkit.Scrape(t, addr)
		for k, v := range want {
			if g, ok := got.Value(k); !ok || g != v {
				return false
			}
		}
		return true
	}
	if !testkit.Eventually(waitLimit, matches) {
		t.Fatalf("%s the metrics are %v; want %v", when, got, want)
	}
	return got
}
