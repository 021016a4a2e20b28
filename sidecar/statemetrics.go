package sidecar

import (
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// stateMetrics are the sidecar's state metrics (docs/state.md section 6), labelled by the
// changelog topic. The gauges of keys and bytes are read at scrape time (stateCollector).
type stateMetrics struct {
	restoringGauge *prometheus.GaugeVec   // by topic, partition
	remainingGauge *prometheus.GaugeVec   // by topic, partition
	restoredTotal  *prometheus.CounterVec // by topic
	fullTotal      *prometheus.CounterVec // by topic, reason
	restoreSeconds *prometheus.HistogramVec
	writesTotal    *prometheus.CounterVec // by topic, kind
}

var (
	descStateKeys = prometheus.NewDesc("millrace_sidecar_state_keys",
		"Keys held in the store of an owned changelog partition.", []string{"topic", "partition"}, nil)
	descStateBytes = prometheus.NewDesc("millrace_sidecar_state_bytes",
		"Bytes of keys and states held in the store of an owned changelog partition.", []string{"topic", "partition"}, nil)
	descStateFileBytes = prometheus.NewDesc("millrace_sidecar_state_file_bytes",
		"Size on disk of the store file of an owned changelog partition.", []string{"topic", "partition"}, nil)
)

// newStateMetrics registers the state metrics in reg, every series of a bounded label set
// from the start.
func newStateMetrics(s *Sidecar, reg *prometheus.Registry) *stateMetrics {
	m := &stateMetrics{
		restoringGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "millrace_sidecar_state_restoring",
			Help: "1 while the changelog partition restores (its inlet partition's batches wait)."}, []string{"topic", "partition"}),
		remainingGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "millrace_sidecar_state_restore_remaining_records",
			Help: "Records the changelog partition's restore has left to read, to the end measured when it began; 0 when none restores."}, []string{"topic", "partition"}),
		restoredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "millrace_sidecar_state_restored_records_total",
			Help: "Changelog records applied by restores, tombstones included."}, []string{"topic"}),
		fullTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "millrace_sidecar_state_full_restores_total",
			Help: "Restores that read the changelog partition from its start, by reason: empty, gap, topic-recreated, unclean, data-loss."}, []string{"topic", "reason"}),
		restoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "millrace_sidecar_state_restore_seconds",
			Help: "Time of one restore, by kind: full or catch-up.", Buckets: latencyBuckets}, []string{"kind"}),
		writesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "millrace_sidecar_state_writes_total",
			Help: "Changelog records committed (at least once: confirmed) and moved into the store, by kind: set, delete, expire."}, []string{"topic", "kind"}),
	}
	for t := range s.changelogs {
		m.restoredTotal.WithLabelValues(t)
		for _, r := range []string{state.ReasonEmpty, state.ReasonGap, state.ReasonTopicRecreated, state.ReasonUnclean, state.ReasonDataLoss} {
			m.fullTotal.WithLabelValues(t, r)
		}
		for _, k := range []string{"set", "delete", "expire"} {
			m.writesTotal.WithLabelValues(t, k)
		}
	}
	reg.MustRegister(m.restoringGauge, m.remainingGauge, m.restoredTotal, m.fullTotal, m.restoreSeconds, m.writesTotal, &stateCollector{s: s})
	return m
}

// restoring sets whether topic/partition restores.
func (m *stateMetrics) restoring(topic string, partition int32, on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.restoringGauge.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(v)
	if !on {
		m.remaining(topic, partition, 0)
	}
}

// remaining sets the records topic/partition's restore has left to read.
func (m *stateMetrics) remaining(topic string, partition int32, n int64) {
	m.remainingGauge.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(n))
}

// restored counts one restore of topic that did r in d.
func (m *stateMetrics) restored(topic string, r state.Restored, d time.Duration) {
	m.restoredTotal.WithLabelValues(topic).Add(float64(r.Records))
	kind := "catch-up"
	if r.Full {
		kind = "full"
		m.fullTotal.WithLabelValues(topic, r.Reason).Inc()
	}
	m.restoreSeconds.WithLabelValues(kind).Observe(d.Seconds())
}

// wrote counts the changelog records of topic moved into the store: states set, deleted, and
// the sweep's tombstones of expired ones; once a promotion, not once a record.
func (m *stateMetrics) wrote(topic string, sets, deletes, expired int) {
	if sets > 0 {
		m.writesTotal.WithLabelValues(topic, "set").Add(float64(sets))
	}
	if deletes > 0 {
		m.writesTotal.WithLabelValues(topic, "delete").Add(float64(deletes))
	}
	if expired > 0 {
		m.writesTotal.WithLabelValues(topic, "expire").Add(float64(expired))
	}
}

// stateCollector exports the owned stores' counts at scrape time.
type stateCollector struct{ s *Sidecar }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStateKeys
	ch <- descStateBytes
	ch <- descStateFileBytes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	type file struct {
		topic, part, path string
		keys, bytes       int64
	}
	var files []file
	// The counts are copied under mu and sent without it: a scrape that reads ch slowly
	// never holds up the sidecar's lock.
	s.mu.Lock()
	for _, p := range s.order {
		if !p.owned || !p.stateful() || p.store == nil {
			continue
		}
		files = append(files, file{p.inlet.StateTopic, strconv.Itoa(int(p.partition)), state.Path(s.stateDir(), p.inlet.StateTopic, p.partition), p.keys, p.bytes})
	}
	s.mu.Unlock()
	for _, f := range files {
		ch <- prometheus.MustNewConstMetric(descStateKeys, prometheus.GaugeValue, float64(f.keys), f.topic, f.part)
		ch <- prometheus.MustNewConstMetric(descStateBytes, prometheus.GaugeValue, float64(f.bytes), f.topic, f.part)
	}
	// The files' sizes are asked of the filesystem outside the lock; one gone meanwhile (its
	// partition revoked) has no series.
	for _, f := range files {
		if fi, err := os.Stat(f.path); err == nil {
			ch <- prometheus.MustNewConstMetric(descStateFileBytes, prometheus.GaugeValue, float64(fi.Size()), f.topic, f.part)
		}
	}
}
