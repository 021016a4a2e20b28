package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge"
)

// Observer watches a run as it goes: `millrace run --ui` (docs/ui.md). Its methods are called
// from the run's goroutines, never at once for one run's Started and Ended, and must not
// block: an observer that keeps what it is told bounds what it keeps.
type Observer interface {
	// Started is called once every streamlet runs, with the run's view, which stays valid
	// (its counters final, its Produce refused) after Ended.
	Started(v *View)
	// Event is called with each event of every streamlet's bridge (bridge.Options.Events),
	// each stderr line of its processes among them (bridge.EventStderr).
	Event(e bridge.Event)
	// Ended is called once the streamlets stopped, with the run's outcome (nil: every record
	// was processed and committed, or --follow was stopped).
	Ended(err error)
}

// View is a run seen from outside: its topics, its streamlets and their counters, a way to
// decode its records and to produce one to an input topic.
type View struct {
	r       *runner
	brokers []string
}

// Brokers are the addresses of the run's Kafka (the in-process broker's, or Options.Brokers).
func (v *View) Brokers() []string { return v.brokers }

// Name is the pipeline's name (the action's, for a single action).
func (v *View) Name() string { return v.r.p.Name }

// Port is one inlet or outlet of a streamlet, with the topic the run binds it to.
type Port struct {
	Name      string `json:"name"`
	Topic     string `json:"topic"`
	Changelog string `json:"changelog,omitempty"` // an inlet with --state: its changelog topic
	Encoded   string `json:"encoded,omitempty"`   // the format of a --decode/--encode port's values
}

// StreamletInfo is one streamlet of the run, as its config line declares it.
type StreamletInfo struct {
	Name       string `json:"name"`
	Inlets     []Port `json:"inlets"`
	Outlets    []Port `json:"outlets"`
	DeadLetter string `json:"deadLetter,omitempty"` // the --dead-letter outlet
	Fallback   string `json:"fallback,omitempty"`   // the --fallback outlet
	Command    string `json:"command"`
}

// Streamlets are the run's streamlets, in the pipeline's order.
func (v *View) Streamlets() []StreamletInfo {
	var out []StreamletInfo
	for _, s := range v.r.p.Streamlets {
		a := s.Action
		info := StreamletInfo{Name: a.Name, DeadLetter: a.DeadLetter, Fallback: a.Fallback, Command: strings.Join(a.Command, " ")}
		changelog := map[string]string{}
		for _, c := range a.Changelogs(a.Name) {
			changelog[c.Inlet] = c.Topic
		}
		for _, p := range a.Inlets {
			info.Inlets = append(info.Inlets, Port{Name: p.Name, Topic: s.Bindings[p.Name], Changelog: changelog[p.Name], Encoded: p.Value.Format})
		}
		for _, p := range a.Outlets {
			info.Outlets = append(info.Outlets, Port{Name: p.Name, Topic: s.Bindings[p.Name], Encoded: p.Value.Format})
		}
		out = append(out, info)
	}
	return out
}

// InputTopics are the topics the run reads and none of its streamlets writes: where Produce
// may write.
func (v *View) InputTopics() []string {
	var out []string
	for _, s := range v.r.p.Streamlets {
		for _, p := range s.Action.Inlets {
			t := s.Bindings[p.Name]
			if _, written := v.r.outlets[t]; !written && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// Decode decodes, in place, a record of an encoded port's topic (and a dead letter or fallback
// record of an encoded inlet) as the printer does; what does not decode is left as it is.
func (v *View) Decode(ctx context.Context, rec *kgo.Record) { v.r.lr.decodeOutput(ctx, rec) }

// errEnded is Produce's error once the run ended.
var errEnded = errors.New("the run has ended: nothing reads the topic any more; start the run again (with --follow it runs until Ctrl-C)")

// Produce writes one record to an input topic of the run (InputTopics), its value JSON
// (encoded first for a --decode inlet, as an input line is), and returns where it went.
func (v *View) Produce(ctx context.Context, rec *kgo.Record) (int32, int64, error) {
	if !slices.Contains(v.InputTopics(), rec.Topic) {
		return 0, 0, fmt.Errorf("topic %q is not an input topic of this run; pick one of %s", rec.Topic, strings.Join(v.InputTopics(), ", "))
	}
	r := v.r
	r.mu.Lock()
	ended := r.ended
	r.mu.Unlock()
	if ended {
		return 0, 0, errEnded
	}
	if err := r.lr.encode(ctx, rec); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res := r.admin.ProduceSync(ctx, rec)
	if err := res.FirstErr(); err != nil {
		return 0, 0, fmt.Errorf("producing to %s: %w", rec.Topic, err)
	}
	r.mu.Lock()
	r.in++
	r.mu.Unlock()
	return res[0].Record.Partition, res[0].Record.Offset, nil
}

// StreamletStats are one streamlet's counters and gauges, from its sidecar's and its bridge's
// metrics (docs/metrics.md names them).
type StreamletStats struct {
	Name      string           `json:"name"`
	Live      bool             `json:"live"`      // a conversation with the processes is live
	Processes int              `json:"processes"` // millrace_pool_processes
	Busy      int              `json:"busy"`
	InFlight  int              `json:"inFlight"`
	Queued    int              `json:"queued"`
	Outcomes  map[string]int64 `json:"outcomes"` // millrace_items_total by outcome
	Retries   int64            `json:"retries"`
	Crashes   int64            `json:"crashes"`
	Fetched   map[string]int64 `json:"fetched"`   // inlet records, by topic
	Committed map[string]int64 `json:"committed"` // by inlet topic
	Produced  map[string]int64 `json:"produced"`  // by outlet topic
	Lag       map[string]int64 `json:"lag"`       // records not yet committed, by inlet topic
	Stalled   map[string]int   `json:"stalled"`   // stalled partitions, by inlet topic
	StateKeys map[string]int64 `json:"stateKeys"` // keys held, by changelog topic
	Metrics   []ActionMetric   `json:"metrics"`   // what the action reported with metric lines
}

// ActionMetric is one series of the action's own metric lines: their count and sum.
type ActionMetric struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Count  uint64            `json:"count"`
	Sum    float64           `json:"sum"`
}

// Stats gathers every streamlet's counters now (after the run, as they were at its end).
func (v *View) Stats() []StreamletStats {
	v.r.mu.Lock()
	started := v.r.streamlets
	v.r.mu.Unlock()
	out := make([]StreamletStats, 0, len(started))
	for _, st := range started {
		s := StreamletStats{
			Name: st.s.Action.Name, Outcomes: map[string]int64{}, Fetched: map[string]int64{}, Committed: map[string]int64{},
			Produced: map[string]int64{}, Lag: map[string]int64{}, Stalled: map[string]int{}, StateKeys: map[string]int64{},
		}
		gatherInto(&s, st.sc.Registry())
		gatherInto(&s, st.metrics.Registry())
		out = append(out, s)
	}
	return out
}

func gatherInto(s *StreamletStats, reg *prometheus.Registry) {
	mfs, _ := reg.Gather() // what could be gathered: a report, not the run's outcome
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			c, g := int64(m.GetCounter().GetValue()), m.GetGauge().GetValue()
			switch name {
			case "millrace_sidecar_records_fetched_total":
				s.Fetched[labels["topic"]] += c
			case "millrace_sidecar_records_committed_total":
				s.Committed[labels["topic"]] += c
			case "millrace_sidecar_records_produced_total":
				s.Produced[labels["topic"]] += c
			case "millrace_sidecar_consumer_lag_records":
				s.Lag[labels["topic"]] += int64(g)
			case "millrace_sidecar_partition_stalled":
				s.Stalled[labels["topic"]] += int(g)
			case "millrace_sidecar_state_keys":
				s.StateKeys[labels["topic"]] += int64(g)
			case "millrace_sidecar_conversation_live":
				s.Live = g > 0
			case "millrace_pool_processes":
				s.Processes += int(g)
			case "millrace_pool_processes_busy":
				s.Busy += int(g)
			case "millrace_pool_deliveries_in_flight":
				s.InFlight += int(g)
			case "millrace_pool_items_queued":
				s.Queued += int(g)
			case "millrace_items_total":
				s.Outcomes[labels["outcome"]] += c
			case "millrace_retries_total":
				s.Retries += c
			case "millrace_process_crashes_total":
				s.Crashes += c
			default:
				if strings.HasPrefix(name, "millrace_action_") && m.GetSummary() != nil {
					s.Metrics = append(s.Metrics, ActionMetric{Name: strings.TrimPrefix(name, "millrace_action_"), Labels: labels, Count: m.GetSummary().GetSampleCount(), Sum: m.GetSummary().GetSampleSum()})
				}
			}
		}
	}
	slices.SortFunc(s.Metrics, func(a, b ActionMetric) int {
		return strings.Compare(a.Name+labelText(a.Labels), b.Name+labelText(b.Labels))
	})
}

func labelText(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		b.WriteString(k + "=" + strconv.Quote(l[k]))
	}
	return b.String()
}
