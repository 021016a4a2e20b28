package bridge

import (
	"strconv"
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
	descPoolSlotHeld = prometheus.NewDesc("millrace_pool_process_deliveries_in_flight",
		"Deliveries one action process holds, by its slot in the pool (0 … --concurrency-1, kept across restarts): in flight, and cancelled ones not yet answered. At the window, the process takes no more.", []string{"slot"}, nil)
	descOutputHeld = prometheus.NewDesc("millrace_output_held_bytes",
		"Bytes of the action's output the bridge holds: staged by deliveries in flight, or settled and not yet sent on the stream (the held-output budget's use).", nil, nil)
	descOutputBudget = prometheus.NewDesc("millrace_output_budget_bytes",
		"The held-output budget (MILLRACE_BRIDGE_MAX_HELD_BYTES): while the output held reaches it, no item is written to the action.", nil, nil)
)

// poolCollector exports the load of the live conversation's pool (engine.Pool.Stats) and the
// use of the server's held-output budget, read at each scrape: nothing is counted per record
// for them. With no live conversation every pool gauge is 0, and there is no series per slot.
type poolCollector struct {
	current atomic.Pointer[engine.Pool]
	budget  atomic.Pointer[engine.Budget]
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolProcesses, descPoolBusy, descPoolInFlight, descPoolQueued, descPoolWindow, descPoolOccupancy, descPoolSlotHeld, descOutputHeld, descOutputBudget} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	var st engine.Stats
	var loads []engine.SlotLoad
	if p := c.current.Load(); p != nil {
		st, loads = p.Stats(), p.Loads()
	}
	for _, l := range loads {
		ch <- prometheus.MustNewConstMetric(descPoolSlotHeld, prometheus.GaugeValue, float64(l.Held), strconv.Itoa(l.Slot))
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
	b := c.budget.Load()
	gauge(descOutputHeld, float64(b.Held()))
	gauge(descOutputBudget, float64(b.Limit()))
}

// budgetIs makes b the budget the output gauges show.
func (m *Metrics) budgetIs(b *engine.Budget) {
	if m != nil {
		m.pool.budget.Store(b)
	}
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
