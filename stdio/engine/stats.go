package engine

// Stats is a snapshot of a pool's load, for metrics. Its counts are read one after another,
// not at one instant: Queued may lag InFlight by the item being handed over.
type Stats struct {
	Processes int // processes running (started and not yet ended)
	Busy      int // processes with at least one delivery in flight
	InFlight  int // deliveries written to a process and not yet answered
	Queued    int // items accepted and not in flight: waiting for a process, behind their key, or in a retry's backoff
	Window    int // deliveries one process accepts written ahead (Pool.Window)

	// Counts since Start: cancels written, processes killed for ignoring one past CancelGrace,
	// and messages dropped because they named a cancelled delivery.
	Cancels, CancelKills, DroppedAfterCancel int64
}

// Loads returns, for each slot of the pool (0 … Concurrency-1) whose process is serving, the
// slots of its window in use: deliveries in flight and cancelled ones not yet answered. It
// takes no lock and costs nothing per item; it is safe for concurrent use, also after Close.
func (p *Pool) Loads() []SlotLoad {
	var loads []SlotLoad
	for i := range p.slots {
		if pr := p.slots[i].Load(); pr != nil {
			loads = append(loads, SlotLoad{Slot: i, Held: int(pr.held.Load())})
		}
	}
	return loads
}

// SlotLoad is one serving process's load.
type SlotLoad struct {
	Slot int // its slot in the pool, 0 … Concurrency-1 (stable across restarts, unlike its pid)
	Held int // slots of its window in use
}

// Occupancy is the share of the window in use: InFlight over Processes × Window (0 with no
// process).
func (s Stats) Occupancy() float64 {
	if s.Processes == 0 || s.Window == 0 {
		return 0
	}
	return float64(s.InFlight) / float64(s.Processes*s.Window)
}

// Stats returns the pool's load now. It takes the pool's locks briefly, once per process,
// and costs nothing per item: call it when metrics are scraped. It is safe for concurrent use,
// also after Close.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	outstanding := p.outstanding
	procs := make([]*process, 0, len(p.procs))
	for pr := range p.procs {
		procs = append(procs, pr)
	}
	p.mu.Unlock()
	st := Stats{Window: p.window}
	for _, pr := range procs {
		pr.mu.Lock()
		n, reaped := len(pr.inflight), pr.inflight == nil
		pr.mu.Unlock()
		if reaped {
			continue
		}
		st.Processes++
		st.InFlight += n
		if n > 0 {
			st.Busy++
		}
	}
	st.Cancels, st.CancelKills, st.DroppedAfterCancel = p.cancels.Load(), p.cancelKills.Load(), p.droppedAfterCancel.Load()
	st.Queued = max(outstanding-st.InFlight, 0)
	return st
}
