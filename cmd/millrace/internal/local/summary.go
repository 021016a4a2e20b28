package local

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Summary is what a run did.
type Summary struct {
	In        int            `json:"in"`        // input lines produced
	Committed int64          `json:"committed"` // input records processed and committed, over every streamlet
	Out       map[string]int `json:"out"`       // output records printed, by outlet
	Failed    int            `json:"failed"`    // records whose batch failed (each is redelivered)
	Retries   int            `json:"retries"`   // attempts the actions failed and retried
	Elapsed   time.Duration  `json:"elapsedNs"`
	Complete  bool           `json:"complete"` // every input line was processed and committed
	// State is how many keys each stateful inlet's store held as the run stopped, by
	// STREAMLET.PORT; nil when no streamlet keeps state.
	State map[string]int64 `json:"state,omitempty"`
}

// Total returns the number of output records.
func (s *Summary) Total() int {
	n := 0
	for _, v := range s.Out {
		n += v
	}
	return n
}

// String is the summary line Run's caller prints at the end.
func (s *Summary) String() string {
	var outs []string
	for _, k := range slices.Sorted(maps.Keys(s.Out)) {
		outs = append(outs, fmt.Sprintf("%s %d", k, s.Out[k]))
	}
	detail := ""
	if len(outs) > 0 {
		detail = " (" + strings.Join(outs, ", ") + ")"
	}
	line := fmt.Sprintf("%s in, %d committed, %d out%s, %d failed, %d retried, in %s", plural(s.In, "record", "records"), s.Committed, s.Total(), detail, s.Failed, s.Retries, s.Elapsed.Round(time.Millisecond))
	if len(s.State) > 0 {
		var held []string
		for _, k := range slices.Sorted(maps.Keys(s.State)) {
			held = append(held, fmt.Sprintf("%s %s", k, plural(int(s.State[k]), "key", "keys")))
		}
		line += "; state held: " + strings.Join(held, ", ")
	}
	return line
}

func (r *runner) summary(complete bool) *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Summary{In: r.in, Out: map[string]int{}, Elapsed: time.Since(r.start), Complete: complete, State: r.keys}
	for k, v := range r.out {
		s.Out[k] = v
	}
	for _, st := range r.streamlets {
		s.Committed += st.sc.RecordsCommitted()
		s.Failed += int(counter(st.metrics.Registry(), "millrace_items_total", "failed"))
		s.Retries += int(counter(st.metrics.Registry(), "millrace_retries_total", ""))
	}
	return s
}

// counter reads a counter (with the label outcome=label when label is not empty).
func counter(reg *prometheus.Registry, name, label string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == label {
					match = true
				}
			}
			if match {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// plural is n with the noun that fits it: "1 item", "2 items".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
