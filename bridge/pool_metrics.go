package bridge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ankka-flow/millrace/stdio/engine"
)

var (
	descPoolProcesses = prometheus.NewDesc("millrace_pool_processes",
		"Action processes running in the live conversation's pool.", nil, nil)
	descPoolBusy = prometheus.NewDesc("millrace_pool_processes_busy",
		"Action processes with at least one delivery in flight.", nil, nil)
	descPoolInFlight = prometheus.NewDesc("millrace_pool_deliveries_in_flight",
		"Deliveries written to an action process and not yet answered.", nil, nil)
	descPoolQueued = prometheus.NewDesc("millrace_pool_items_queued",
		"Records handed to the pool and not in flight: waiting for a process, behind an earlier record of their key, or in a retry's backoff.", nil, nil)
	descPoolWindow = prometheus.NewDesc("millrace_pool_window",
		"Deliveries one action process accepts written ahead (--window, or the window its ready line declared; 1 is one at a time).", nil, nil)
	descPoolOccupancy = prometheus.NewDesc("millrace_pool_window_occupancy_ratio",
		"Deliveries in flight over processes × window: 1 when every process's window is full.", nil, nil)
)

// poolCollector exports the load of the live conversation's pool, read at each scrape
// (engine.Pool.Stats): nothing is counted per record for it. With no live conversation every
// gauge is 0.
type poolCollector struct {
	current atomic.Pointer[engine.Pool]
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolProcesses, descPoolBusy, descPoolInFlight, descPoolQueued, descPoolWindow, descPoolOccupancy} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	var st engine.Stats
	if p := c.current.Load(); p != nil {
		st = p.Stats()
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(descPoolProcesses, float64(st.Processes))
	gauge(descPoolBusy, float64(st.Busy))
	gauge(descPoolInFlight, float64(st.InFlight))
	gauge(descPoolQueued, float64(st.Queued))
	gauge(descPoolWindow, float64(st.Window))
	gauge(descPoolOccupancy, st.Occupancy())
}

// poolStarted makes p the pool the gauges show.
func (m *Metrics) poolStarted(p *engine.Pool) {
	if m != nil {
		m.pool.current.Store(p)
	}
}

// poolClosed stops showing p, unless a newer conversation's pool replaced it already.
func (m *Metrics) poolClosed(p *engine.Pool) {
	if m != nil {
		m.pool.current.CompareAndSwap(p, nil)
	}
}
