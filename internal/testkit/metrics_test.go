package testkit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestMetrics: a page promhttp serves reads back as the values registered, by name and labels,
// for each kind of metric; a page that is not 200 is an error.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_total", Help: "h"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_gauge", Help: "h"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_seconds", Help: "h"})
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "t_summary", Help: "h"})
	reg.MustRegister(c, g, h, s)
	c.WithLabelValues("x", "y").Add(3)
	c.WithLabelValues("x", "z").Add(5)
	g.Set(0.5)
	h.Observe(1)
	h.Observe(2)
	s.Observe(7)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	e, gathered := testkit.Scrape(t, addr), testkit.Gather(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		found  bool
	}{
		{"t_total", []string{"a", "x", "b", "z"}, 5, true},
		{"t_total", []string{"b", "y"}, 3, true},
		{"t_total", []string{"b", "w"}, 0, false},
		{"t_gauge", nil, 0.5, true},
		{"t_seconds", nil, 2, true},
		{"t_summary", nil, 1, true},
		{"t_missing", nil, 0, false},
	} {
		if got, found := e.Value(c.name, c.labels...); got != c.want || found != c.found {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, got, found, c.want, c.found)
		}
		if got, found := gathered.Value(c.name, c.labels...); got != c.want || found != c.found {
			t.Errorf("Gather: Value(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, got, found, c.want, c.found)
		}
	}
	if got := e.String(); got != "" {
		t.Errorf("String() = %q; want nothing: it lists only the millrace_ families", got)
	}

	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	if _, err := testkit.Metrics(strings.TrimPrefix(notFound.URL, "http://")); err == nil {
		t.Errorf("Metrics of a page answering 404 = nil error; want one")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	if _, err := testkit.Metrics(closed); err == nil {
		t.Errorf("Metrics of a closed address = nil error; want the dial's")
	}
}
