package testkit

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Exposition is one scrape of a /metrics page, parsed by expfmt: its metric families by name.
type Exposition map[string]*dto.MetricFamily

// Metrics GETs http://addr/metrics (addr is host:port) and parses its text format, for a
// poll that retries on an error.
func Metrics(addr string) (Exposition, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics of %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics of %s: %w", addr, err)
	}
	return mfs, nil
}

// Scrape is Metrics that ends the test on an error.
func Scrape(t testing.TB, addr string) Exposition {
	t.Helper()
	e, err := Metrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Gather is a scrape of g in the test's own process (a registry the test holds), without
// HTTP; it ends the test on an error.
func Gather(t testing.TB, g prometheus.Gatherer) Exposition {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e := Exposition{}
	for _, mf := range mfs {
		e[mf.GetName()] = mf
	}
	return e
}

// Value returns the value of the first series of name whose labels include the pairs kv (name,
// value, …): a counter's, a gauge's or an untyped series' value, a histogram's or a summary's
// sample count. It reports false when there is no such series.
func (e Exposition) Value(name string, kv ...string) (float64, bool) {
	for _, m := range e[name].GetMetric() {
		if !HasLabels(m, kv...) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.Summary.GetSampleCount()), true
		}
	}
	return 0, false
}

// HasLabels reports whether m has every label pair of kv (name, value, …).
func HasLabels(m *dto.Metric, kv ...string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == kv[i] && l.GetValue() == kv[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

// String lists the series of the millrace_ families, one a line, for a failure message.
func (e Exposition) String() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(e)) {
		if strings.HasPrefix(name, "millrace_") {
			for _, m := range e[name].GetMetric() {
				fmt.Fprintf(&b, "  %s %v\n", name, m)
			}
		}
	}
	return b.String()
}
