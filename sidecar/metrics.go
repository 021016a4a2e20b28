package sidecar

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Causes of a failed stream, the values of millrace_sidecar_stream_failures_total's cause
// label: a fixed set, so the label's cardinality is bounded.
const (
	causeUnreachable  = "process_unreachable"  // the stream could not be opened, or broke, or was closed unasked
	causeFailedBatch  = "process_failed_batch" // the process answered a batch with Fail
	causeProtocol     = "protocol_violation"   // an answer the protocol forbids (unknown batch, undeclared outlet, empty message)
	causeMessageLarge = "message_too_large"    // the process sent a message over the message limit
	causeRecordLarge  = "record_too_large"     // an input record cannot fit in a Batch
	causeProduce      = "produce"              // an emit could not be written
	causeCommit       = "commit"               // the broker refused an offset commit
	causeStopTimeout  = "stop_timeout"         // the process did not complete the stream after Stop
	causeEmitBudget   = "emit_budget"          // a batch's emits exceeded FLOW_MAX_BATCH_EMIT_BYTES
)

var failureCauses = []string{causeUnreachable, causeFailedBatch, causeProtocol, causeMessageLarge, causeRecordLarge, causeProduce, causeCommit, causeStopTimeout, causeEmitBudget}

// Results of one Discover call, the values of millrace_sidecar_discovery_attempts_total's
// result label.
const (
	discoveryUnanswered = "unanswered" // the process did not answer (not up yet, or gone)
	discoveryRefused    = "refused"    // it answered, and was refused
	discoveryAccepted   = "accepted"   // it answered, and the conversation may start
)

// failure is a stream failure with its cause for the metrics.
type failure struct {
	cause string
	err   error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// causeOf returns the cause label of a stream failure: the one streamFailed gave it, or the
// one of the sentinel it wraps.
func causeOf(err error) string {
	var f *failure
	switch {
	case errors.As(err, &f):
		return f.cause
	case errors.Is(err, errProduce):
		return causeProduce
	case errors.Is(err, errCommit):
		return causeCommit
	case errors.Is(err, errRecordTooLarge):
		return causeRecordLarge
	case errors.Is(err, errBatchEmitBudget), errors.Is(err, errRecordEmitBudget):
		return causeEmitBudget
	}
	return causeUnreachable
}

// latencyBuckets span half a millisecond to two minutes, by factors of 4.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 4, 10)

// metrics are the sidecar's Prometheus metrics, in a registry of its own. The per-partition
// and per-topic gauges are read from the sidecar's state at each scrape (partitionCollector),
// so a partition's series exist exactly while it is assigned.
type metrics struct {
	reg           *prometheus.Registry
	fetched       *prometheus.CounterVec // by inlet topic
	sent          *prometheus.CounterVec
	committed     *prometheus.CounterVec
	emitted       *prometheus.CounterVec // by outlet topic
	produced      *prometheus.CounterVec
	failures      *prometheus.CounterVec // by cause
	discovery     *prometheus.CounterVec // by result
	stuck         *prometheus.CounterVec // by inlet topic
	conversations prometheus.Counter
	roundTrip     prometheus.Histogram
	produce       prometheus.Histogram
	commit        prometheus.Histogram

	// The counters of each bound topic, looked up once.
	inlets  map[string]*inletMetrics
	outlets map[string]*outletMetrics

	state *stateMetrics // statemetrics.go
}

type inletMetrics struct{ fetched, sent, committed prometheus.Counter }

type outletMetrics struct{ emitted, produced prometheus.Counter }

// inlet returns the counters of an inlet topic.
func (m *metrics) inlet(topic string) *inletMetrics {
	if im, ok := m.inlets[topic]; ok {
		return im
	}
	return &inletMetrics{m.fetched.WithLabelValues(topic), m.sent.WithLabelValues(topic), m.committed.WithLabelValues(topic)}
}

// outlet returns the counters of an outlet topic.
func (m *metrics) outlet(topic string) *outletMetrics {
	if om, ok := m.outlets[topic]; ok {
		return om
	}
	return &outletMetrics{m.emitted.WithLabelValues(topic), m.produced.WithLabelValues(topic)}
}

// recordBytes is the size of an emit as the sidecar holds it: key, value and headers.
func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

func newMetrics(s *Sidecar) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	}
	m := &metrics{
		reg:       prometheus.NewRegistry(),
		fetched:   counter("millrace_sidecar_records_fetched_total", "Inlet records fetched from Kafka (a record fetched again after a rebalance or a failure counts again).", "topic"),
		sent:      counter("millrace_sidecar_records_sent_total", "Inlet records sent to the process in Batches (a redelivery counts again).", "topic"),
		committed: counter("millrace_sidecar_records_committed_total", "Inlet records whose offsets were committed, after every emit of their batch was written.", "topic"),
		emitted:   counter("millrace_sidecar_records_emitted_total", "Emits received from the process, by outlet topic.", "topic"),
		produced:  counter("millrace_sidecar_records_produced_total", "Emits the broker confirmed as written, by outlet topic.", "topic"),
		failures:  counter("millrace_sidecar_stream_failures_total", "Conversations that failed (each is followed by a redelivery from the last commit), by cause.", "cause"),
		discovery: counter("millrace_sidecar_discovery_attempts_total", "Discover calls to the process, by result: unanswered, refused, accepted.", "result"),
		// By topic only: the series exist from the start, so increase() sees the first one;
		// the log names the partition.
		stuck: counter("millrace_sidecar_stuck_partitions_total", "Partitions found stuck by the watchdog (records waiting, no batch in flight, none sent for FLOW_STUCK_AFTER), each recovered; a bug by definition.", "topic"),
		conversations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "millrace_sidecar_conversations_total",
			Help: "Conversations started (Start messages sent).",
		}),
		roundTrip: histogram("millrace_sidecar_batch_round_trip_seconds", "Time from a Batch sent to the process to its Ack."),
		produce:   histogram("millrace_sidecar_produce_seconds", "Time from an emit handed to the producer to the broker's confirmation."),
		commit:    histogram("millrace_sidecar_commit_seconds", "Time of one offset commit (every round confirmed since the last), or in exactly-once mode of one transaction's end; its count is the commits made."),
	}
	// Every series of a bounded label set exists from the start, so rate() and increase()
	// see the first event.
	m.inlets, m.outlets = map[string]*inletMetrics{}, map[string]*outletMetrics{}
	for _, in := range s.cfg.Inlets {
		m.inlets[in.Topic] = m.inlet(in.Topic)
		m.stuck.WithLabelValues(in.Topic)
	}
	for _, out := range s.cfg.Outlets {
		m.outlets[out.Topic] = m.outlet(out.Topic)
	}
	for _, c := range failureCauses {
		m.failures.WithLabelValues(c)
	}
	for _, r := range []string{discoveryUnanswered, discoveryRefused, discoveryAccepted} {
		m.discovery.WithLabelValues(r)
	}
	m.reg.MustRegister(m.fetched, m.sent, m.committed, m.emitted, m.produced, m.failures, m.discovery, m.stuck,
		m.conversations, m.roundTrip, m.produce, m.commit, &partitionCollector{s: s})
	m.state = newStateMetrics(s, m.reg)
	return m
}

// Registry returns the registry of the sidecar's metrics, for a caller that serves them itself
// (`millrace run --metrics`). It is safe to gather concurrently with Run.
func (s *Sidecar) Registry() *prometheus.Registry { return s.metrics.reg }

var (
	descLag = prometheus.NewDesc("millrace_sidecar_consumer_lag_records",
		"Records of an assigned partition not yet committed: its high watermark minus the committed offset.", []string{"topic", "partition"}, nil)
	descOldest = prometheus.NewDesc("millrace_sidecar_oldest_uncommitted_record_age_seconds",
		"Age (from its Kafka timestamp) of the oldest fetched record of an assigned partition not yet committed; 0 when the sidecar holds none.", []string{"topic", "partition"}, nil)
	descStalled = prometheus.NewDesc("millrace_sidecar_partition_stalled",
		"1 while an assigned partition is stalled (its batch has kept failing for FLOW_STALL_WARNING_AFTER, and the PartitionStalled warning was raised), else 0.", []string{"topic", "partition"}, nil)
	descAssigned = prometheus.NewDesc("millrace_sidecar_partitions_assigned",
		"Partitions of the inlet topic assigned to this sidecar.", []string{"topic"}, nil)
	descPaused = prometheus.NewDesc("millrace_sidecar_partitions_paused",
		"Assigned partitions whose fetching is paused because their buffered records reached the high water mark.", []string{"topic"}, nil)
	descBuffered = prometheus.NewDesc("millrace_sidecar_buffered_bytes",
		"Bytes of fetched records held until they are committed.", nil, nil)
	descEmitHeld = prometheus.NewDesc("millrace_sidecar_emit_bytes_held",
		"Bytes of emits received from the process and not yet written to Kafka.", nil, nil)
	descLive = prometheus.NewDesc("millrace_sidecar_conversation_live",
		"1 while a conversation with the process is live (the readiness condition), else 0.", nil, nil)
)

// partitionCollector exports the sidecar's state at scrape time.
type partitionCollector struct{ s *Sidecar }

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLag, descOldest, descStalled, descAssigned, descPaused, descBuffered, descEmitHeld, descLive} {
		ch <- d
	}
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	live := 0.0
	if s.ready.Load() {
		live = 1
	}
	gauge(descLive, live)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	assigned, paused := map[string]int{}, map[string]int{}
	for _, in := range s.cfg.Inlets {
		assigned[in.Topic], paused[in.Topic] = 0, 0
	}
	for _, p := range s.order {
		if !p.owned {
			continue
		}
		assigned[p.topic]++
		if p.paused {
			paused[p.topic]++
		}
		part := strconv.Itoa(int(p.partition))
		if lag, ok := p.lag(); ok {
			gauge(descLag, float64(lag), p.topic, part)
		}
		age := 0.0
		if len(p.queue) > 0 {
			age = max(now.Sub(time.UnixMilli(p.queue[0].in.GetTimestampMs())).Seconds(), 0)
		}
		gauge(descOldest, age, p.topic, part)
		stalled := 0.0
		if p.warned {
			stalled = 1
		}
		gauge(descStalled, stalled, p.topic, part)
	}
	for topic, n := range assigned {
		gauge(descAssigned, float64(n), topic)
		gauge(descPaused, float64(paused[topic]), topic)
	}
	gauge(descBuffered, float64(s.stats.BufferedBytes))
	// The emit budgets' own count (budget.go): released emit by emit as each is written.
	gauge(descEmitHeld, float64(s.stats.HeldEmitBytes))
}
