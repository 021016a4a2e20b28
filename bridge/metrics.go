package bridge

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ankka-flow/millrace/internal/httpserve"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// defaultMaxActionSeries caps the distinct (name, labels) series of the action's own metric
// lines that the bridge exports; lines beyond it are counted in
// millrace_action_metrics_dropped_total and otherwise ignored.
const defaultMaxActionSeries = 1000

// Metrics are the bridge's Prometheus metrics, in a registry of their own. A nil *Metrics
// records nothing. Its methods are safe for concurrent use.
type Metrics struct {
	reg           *prometheus.Registry
	itemsTotal    *prometheus.CounterVec
	retries       prometheus.Counter
	latency       *prometheus.HistogramVec
	batches       *prometheus.CounterVec
	starts        prometheus.Counter
	crashes       prometheus.Counter
	conversations prometheus.Counter
	dropped       prometheus.Counter
	restarts      prometheus.Counter
	stateStagedN  *prometheus.CounterVec
	stateRefusedN *prometheus.CounterVec
	stateWait     prometheus.Histogram
	deliveryWait  prometheus.Histogram
	cancels       prometheus.Counter
	cancelKills   prometheus.Counter
	action        *actionMetrics
	pool          poolCollector

	// latencyOf caches latency's histogram of each outcome: a record's attempt observes it
	// without WithLabelValues' hashing and lookup.
	latencyOf [engine.Abandoned + 1]atomic.Pointer[prometheus.Observer]
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// NewMetrics returns the bridge's metrics, exporting at most maxSeries series of the action's
// metric lines (defaultMaxActionSeries when maxSeries <= 0).
func NewMetrics(maxSeries int) *Metrics {
	if maxSeries <= 0 {
		maxSeries = defaultMaxActionSeries
	}
	m := &Metrics{
		reg:        prometheus.NewRegistry(),
		itemsTotal: counterVec("millrace_items_total", "Records handled, by final outcome: done, dead_letter, fallback, failed (the batch failed), abandoned (the conversation ended first).", "outcome"),
		retries:    counter("millrace_retries_total", "Attempts that failed and were retried."),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "millrace_item_attempt_seconds",
			Help:    "Duration of each attempt of an item, from its write to the action's answer, by outcome of the attempt.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"outcome"}),
		batches:       counterVec("millrace_batches_total", "Batches answered, by answer: ack or fail.", "answer"),
		starts:        counter("millrace_process_starts_total", "Action processes that started and answered ready."),
		crashes:       counter("millrace_process_crashes_total", "Action processes that ended other than by a clean shutdown."),
		conversations: counter("millrace_conversations_total", "Conversations started by the sidecar (Start messages taken)."),
		dropped:       counter("millrace_action_metrics_dropped_total", "Metric lines of the action not exported: over the cap on distinct series, or with labels that differ from the first line of the same name."),
		restarts:      counter("millrace_process_restarts_total", "Action processes started to replace one that ended other than by a clean shutdown (a crash, a kill, a timeout)."),
	}
	m.stateStagedN = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "millrace_state_staged_total", Help: "States sent to the sidecar in Staged, by inlet and kind: set or delete (one per key a batch changed)."}, []string{"inlet", "kind"})
	m.stateRefusedN = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "millrace_state_refused_total", Help: "Records failed for good for a state they cannot keep, by inlet and reason: keyless, undeclared (the inlet has no --state), too-large."}, []string{"inlet", "reason"})
	m.stateWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "millrace_state_wait_seconds",
		Help:    "How long a batch of a stateful inlet waited for its BatchState after its Batch (0 when it came first, as the sidecar sends it).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})
	m.deliveryWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "millrace_delivery_wait_seconds",
		Help:    "How long each delivery held a slot of its process's window: from its write to the action's final answer for it (a cancelled delivery's late answer included).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})
	m.cancels = counter("millrace_cancels_total", "Deliveries cancelled at their --timeout in a process that declared \"cancel\": true (the delivery failed retryably; the process went on).")
	m.cancelKills = counter("millrace_cancel_kills_total", "Action processes killed for giving no final answer to a cancelled delivery within the cancel grace (5 s).")
	m.action = &actionMetrics{max: maxSeries, dropped: m.dropped, series: map[string]*actionSeries{}, labels: map[string][]string{}}
	m.reg.MustRegister(m.itemsTotal, m.retries, m.latency, m.batches, m.starts, m.crashes, m.conversations, m.dropped, m.restarts, m.stateStagedN, m.stateRefusedN, m.stateWait, m.deliveryWait, m.cancels, m.cancelKills, m.action, &m.pool)
	return m
}

// Registry returns the registry the metrics live in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// handler returns the HTTP handler of the metrics in the Prometheus text format.
func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// serve serves the metrics at /metrics on lis until ctx ends, then stops as
// [httpserve.Serve] does. It closes lis.
func (m *Metrics) serve(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.handler())
	return httpserve.Serve(ctx, lis, mux)
}

func (m *Metrics) items(outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.itemsTotal.WithLabelValues(outcome).Add(float64(n))
}

func (m *Metrics) batch(answer string) {
	if m != nil {
		m.batches.WithLabelValues(answer).Inc()
	}
}

func (m *Metrics) stateStaged(inlet, kind string) {
	if m != nil {
		m.stateStagedN.WithLabelValues(inlet, kind).Inc()
	}
}

func (m *Metrics) stateRefused(inlet, reason string) {
	if m != nil {
		m.stateRefusedN.WithLabelValues(inlet, reason).Inc()
	}
}

func (m *Metrics) stateWaited(d time.Duration) {
	if m != nil {
		m.stateWait.Observe(d.Seconds())
	}
}

func (m *Metrics) conversationStarted() {
	if m != nil {
		m.conversations.Inc()
	}
}

// hooks returns the pool callbacks that record into m, export attempts' spans to tr and log
// process ends on log. With neither m nor tr, no callback runs per attempt.
func (m *Metrics) hooks(log *slog.Logger, tr *Tracer) engine.Hooks {
	h := engine.Hooks{
		ProcessExited: func(pid int, err error) {
			if err != nil {
				log.Warn("an action process ended", "pid", pid, "error", err)
				if m != nil {
					m.crashes.Inc()
				}
			}
		},
		Health: func(err error) {
			if err != nil {
				log.Error("the action cannot keep a process running; fix the program or its config line", "error", err)
			} else {
				log.Info("the action's processes start again")
			}
		},
	}
	if tr != nil {
		h.AttemptFinished = func(ai engine.AttemptInfo) {
			m.attempt(ai)
			tr.attempt(ai, time.Now())
		}
	}
	if m == nil {
		return h
	}
	h.ProcessStarted = func(int) { m.starts.Inc() }
	h.ProcessRestarted = func(int) { m.restarts.Inc() }
	if tr == nil {
		h.AttemptFinished = m.attempt
	}
	h.Metric = func(_ *stdio.Item, mt stdio.Metric) { m.action.record(mt) }
	h.DeliveryAnswered = func(_ int, wait time.Duration) { m.deliveryWait.Observe(wait.Seconds()) }
	h.Cancelled = func(int, *stdio.Item) { m.cancels.Inc() }
	h.CancelIgnored = func(int, string) { m.cancelKills.Inc() }
	return h
}

// attempt records one finished attempt.
func (m *Metrics) attempt(ai engine.AttemptInfo) {
	if m == nil {
		return
	}
	m.latencyFor(ai.Outcome).Observe(ai.Latency.Seconds())
	if ai.Retry {
		m.retries.Inc()
	}
}

// latencyFor returns the attempt latency histogram of outcome o, looked up once per outcome.
func (m *Metrics) latencyFor(o engine.Outcome) prometheus.Observer {
	if o < 0 || int(o) >= len(m.latencyOf) {
		return m.latency.WithLabelValues(o.String())
	}
	if h := m.latencyOf[o].Load(); h != nil {
		return *h
	}
	h := m.latency.WithLabelValues(o.String())
	m.latencyOf[o].Store(&h) // a racing store stores the same histogram
	return h
}

// actionMetrics exports the action's metric lines: for each name a summary (count and sum of
// the values seen) per label set, as millrace_action_<name>. The label names of a name are
// fixed by its first line; distinct series are capped.
type actionMetrics struct {
	max     int
	dropped prometheus.Counter

	mu     sync.Mutex
	series map[string]*actionSeries // by name and label values
	labels map[string][]string      // sorted label names of each metric name
}

type actionSeries struct {
	desc   *prometheus.Desc
	values []string
	count  uint64
	sum    float64
}

// Describe sends nothing: the action's metrics are unchecked, their names known only as lines
// arrive.
func (*actionMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect exports every series.
func (a *actionMetrics) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.series {
		if m, err := prometheus.NewConstSummary(s.desc, s.count, s.sum, nil, s.values...); err == nil {
			ch <- m
		}
	}
}

func (a *actionMetrics) record(mt stdio.Metric) {
	name := "millrace_action_" + sanitize(mt.Name, false)
	names := make([]string, 0, len(mt.Labels))
	for k := range mt.Labels {
		names = append(names, k)
	}
	slices.Sort(names)
	labels := make([]string, len(names))
	values := make([]string, len(names))
	for i, k := range names {
		labels[i] = sanitize(k, true)
		values[i] = strings.ToValidUTF8(mt.Labels[k], "\uFFFD")
	}
	id := name + "\xff" + strings.Join(labels, "\xfe") + "\xff" + strings.Join(values, "\xfe")
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.series[id]
	if !ok {
		first, seen := a.labels[name]
		if (seen && !slices.Equal(first, labels)) || len(a.series) >= a.max || !distinct(labels) {
			a.dropped.Inc()
			return
		}
		a.labels[name] = labels
		s = &actionSeries{desc: prometheus.NewDesc(name, "The action's metric "+strconvQuote(mt.Name)+": count and sum of the values it reported.", labels, nil), values: values}
		a.series[id] = s
	}
	s.count++
	s.sum += mt.Value
}

// sanitize maps s to a Prometheus metric name (or label name) by replacing every character not
// allowed with _.
func sanitize(s string, label bool) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (i > 0 && c >= '0' && c <= '9') || (!label && c == ':')
		if !ok {
			b[i] = '_'
		}
	}
	out := string(b)
	if label && (strings.HasPrefix(out, "__") || out == "quantile") {
		out = "action_" + out // reserved by Prometheus and by summaries
	}
	return out
}

func distinct(names []string) bool {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return false
		}
		seen[n] = true
	}
	return true
}

func strconvQuote(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return "\"" + strings.ToValidUTF8(s, "?") + "\""
}
