package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestPrometheus runs Debian's prometheus scraping a sidecar (FLOW_METRICS_ADDR) and a bridge
// (--metrics) of a pipeline, and reads what it stored through its HTTP API: the consumer lag
// is the backlog while the action holds it, falls to 0 as it drains, and every metric the
// deployed dashboard, alerts and autoscaler query is one the two processes export.
func TestPrometheus(t *testing.T) {
	testkit.NeedTools(t, "prometheus")
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	b := newBroker(t)
	dir := logDir(t)
	gate := filepath.Join(dir, "gate")
	sidecarAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	bridgeAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	a := child(childGate, false, "--timeout", "5m", "--metrics", bridgeAddr)
	a.env = append(a.env, envGate+"="+gate)
	pl := newPipeline(t, b, a, 3, "FLOW_METRICS_ADDR="+sidecarAddr)
	// The backlog is there before the sidecar starts; the action answers nothing until the
	// gate file exists.
	pl.produce(pl.records(0, n)...)
	pl.start(0)

	prom := startPrometheus(t, promBin, dir, sidecarAddr, bridgeAddr)
	lag := fmt.Sprintf(`sum(millrace_sidecar_consumer_lag_records{topic=%q})`, pl.inTopic)
	series := fmt.Sprintf(`count(millrace_sidecar_consumer_lag_records{topic=%q})`, pl.inTopic)

	// While the action holds every batch, nothing is committed: the lag is the whole backlog.
	if got, ok := prom.waitValue(t, lag, 60*time.Second, func(v float64) bool { return v == n }); !ok {
		t.Fatalf("Prometheus: %s = %v; want %d (the backlog) while the action holds it\n%s", lag, got, n, pl.logTails(20))
	}
	if got, _ := prom.value(t, series); got != 3 {
		t.Errorf("Prometheus: %s = %v; want 3, one series per assigned partition", series, got)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pl.waitDone(60 * time.Second)
	if got, ok := prom.waitValue(t, lag, 60*time.Second, func(v float64) bool { return v == 0 }); !ok {
		t.Fatalf("Prometheus: %s = %v after the backlog drained; want 0\n%s", lag, got, pl.logTails(20))
	}
	committed := fmt.Sprintf(`sum(millrace_sidecar_records_committed_total{topic=%q})`, pl.inTopic)
	if got, ok := prom.waitValue(t, committed, 30*time.Second, func(v float64) bool { return v == n }); !ok {
		t.Errorf("Prometheus: %s = %v; want %d", committed, got, n)
	}

	// Every metric the deployed artefacts name is one Prometheus got from the two processes,
	// but the state metrics: this pipeline keeps no state, and a sidecar without a changelog
	// exports no series of them.
	var names []string
	for _, name := range deployedMetricNames(t) {
		if !strings.HasPrefix(name, stateMetricPrefix) {
			names = append(names, name)
		}
	}
	var missing []string
	testkit.Eventually(30*time.Second, func() bool {
		known := prom.names(t)
		missing = missing[:0]
		for _, name := range names {
			if !known[name] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0
	})
	if len(missing) > 0 {
		t.Errorf("the deployed dashboard, alerts or autoscaler query %s, which neither the sidecar nor the bridge exports (of %d names)", strings.Join(missing, ", "), len(names))
	}
	tl := pl.tally()
	pl.report("prometheus", tl, fmt.Sprintf("lag %d then 0 in Prometheus; %d metric names of deploy/ exported", n, len(names)))
	tl.check(t)
}

// promServer is a Prometheus server the test started.
type promServer struct {
	base string // http://127.0.0.1:PORT
	proc *testkit.Proc
}

// startPrometheus starts promBin in its own process group on a free port, with a temporary
// storage folder, scraping the two targets every 200 ms; it is stopped when the test ends.
func startPrometheus(t *testing.T, promBin, dir string, targets ...string) *promServer {
	t.Helper()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\nscrape_configs:\n  - job_name: millrace\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	logPath := filepath.Join(dir, "prometheus.log")
	t.Cleanup(func() { // after the process's own cleanup has stopped it
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", cut(string(b), 4000))
		}
	})
	p := &promServer{base: "http://" + addr, proc: testkit.StartProc(t, testkit.ProcSpec{
		Name: "prometheus",
		Argv: []string{promBin, "--config.file=" + cfg, "--storage.tsdb.path=" + t.TempDir(), "--web.listen-address=" + addr},
		Log:  logPath,
	})}
	if !testkit.Eventually(30*time.Second, func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("prometheus on %s was not ready within 30s (exited: %v)", addr, p.proc.Exited())
	}
	return p
}

// get GETs an API path and decodes the answer's data into v.
func (p *promServer) get(t *testing.T, path string, v any) error {
	t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var ans struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return fmt.Errorf("GET %s: %v: %s", path, err, cut(string(body), 300))
	}
	if ans.Status != "success" {
		return fmt.Errorf("GET %s: %s %s", path, ans.Status, ans.Error)
	}
	return json.Unmarshal(ans.Data, v)
}

// value runs an instant query whose answer is one sample; ok is false when it has none.
func (p *promServer) value(t *testing.T, query string) (float64, bool) {
	t.Helper()
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get(t, "/api/v1/query?query="+url.QueryEscape(query), &data); err != nil {
		t.Logf("query %s: %v", query, err)
		return 0, false
	}
	if data.ResultType != "vector" || len(data.Result) != 1 {
		return 0, false
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// waitValue polls query until its value satisfies cond or d passes; it returns the last value.
func (p *promServer) waitValue(t *testing.T, query string, d time.Duration, cond func(float64) bool) (any, bool) {
	t.Helper()
	var last any = "no sample"
	ok := testkit.Eventually(d, func() bool {
		v, ok := p.value(t, query)
		if !ok {
			return false
		}
		last = v
		return cond(v)
	})
	return last, ok
}

// names returns every metric name Prometheus has stored.
func (p *promServer) names(t *testing.T) map[string]bool {
	t.Helper()
	var names []string
	if err := p.get(t, "/api/v1/label/__name__/values", &names); err != nil {
		t.Logf("metric names: %v", err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

var metricName = regexp.MustCompile(`\bmillrace_[a-zA-Z0-9_]+`)

// stateMetricPrefix begins the sidecar's state metrics (docs/state.md, "Metrics"), exported only
// by a sidecar that keeps state.
const stateMetricPrefix = "millrace_sidecar_state_"

// deployedMetricNames returns the millrace metric names the queries of deploy/ use: the
// Grafana dashboard's targets and variables, the alert rules' expressions, and the Prometheus
// autoscaler's query.
func deployedMetricNames(t *testing.T) []string {
	t.Helper()
	var exprs []string
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	readJSONOrYAML(t, "deploy/grafana/millrace.json", &dash)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	readJSONOrYAML(t, "deploy/prometheus/alerts.yaml", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var scaled struct {
		Spec struct {
			Triggers []struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	readJSONOrYAML(t, "deploy/keda/scaledobject-prometheus.yaml", &scaled)
	for _, tr := range scaled.Spec.Triggers {
		exprs = append(exprs, tr.Metadata["query"])
	}
	var names []string
	for _, e := range exprs {
		names = append(names, metricName.FindAllString(e, -1)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 10 {
		t.Fatalf("deploy/ queries only %d millrace metrics (%v); the files were not read as expected", len(names), names)
	}
	return names
}

// readJSONOrYAML reads a file of the repository into v.
func readJSONOrYAML(t *testing.T, rel string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bin.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}
