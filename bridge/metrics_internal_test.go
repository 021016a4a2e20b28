package bridge

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestLatencyFor checks that the cached histograms are the outcomes' own: each observation
// lands in its outcome's series, also that of an outcome the cache does not hold.
func TestLatencyFor(t *testing.T) {
	m := NewMetrics(0)
	for _, o := range []engine.Outcome{engine.Done, engine.Done, engine.Failed, engine.Outcome(42)} {
		m.attempt(engine.AttemptInfo{Outcome: o, Latency: time.Millisecond})
	}
	rec := httptest.NewRecorder()
	MetricsHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`millrace_item_attempt_seconds_count{outcome="done"} 2`,
		`millrace_item_attempt_seconds_count{outcome="failed"} 1`,
		`millrace_item_attempt_seconds_count{outcome="Outcome(42)"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// BenchmarkAttemptMetrics measures what the metrics cost a record's attempt.
//
//	go test -run '^$' -bench BenchmarkAttemptMetrics -benchmem ./bridge/
func BenchmarkAttemptMetrics(b *testing.B) {
	m := NewMetrics(0)
	ai := engine.AttemptInfo{Outcome: engine.Done, Latency: 3 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		m.attempt(ai)
	}
}

// TestCancelMetrics: the pool's cancel hooks count cancels and kills after the grace, and each
// final answer's wait is observed.
func TestCancelMetrics(t *testing.T) {
	m := NewMetrics(0)
	h := m.hooks(slog.New(slog.DiscardHandler), nil)
	h.Cancelled(1, &stdio.Item{ID: "a"})
	h.Cancelled(1, &stdio.Item{ID: "b"})
	h.CancelIgnored(1, "dl_b")
	h.DeliveryAnswered(0, 20*time.Millisecond)
	rec := httptest.NewRecorder()
	MetricsHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"millrace_cancels_total 2",
		"millrace_cancel_kills_total 1",
		"millrace_delivery_wait_seconds_count 1",
		`millrace_delivery_wait_seconds_bucket{le="0.0256"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}
