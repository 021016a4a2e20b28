package bridge_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
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
	r := startBridge(t, oneOutlet+" --metrics 127.0.0.1:0")
	waitLog(t, r, `"msg":"serving metrics"`)
	var line struct{ Address string }
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"serving metrics"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"skip"}`))
	s.wait(1)
	resp, err := http.Get("http://" + line.Address + "/metrics")
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
