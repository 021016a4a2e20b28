package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
)

// State per key in `millrace run` (docs/state.md, "millrace run"): each stateful inlet's
// changelog is created on the broker as STREAMLET.PORT.state, compacted, with the inlet topic's
// partitions; each stateful streamlet's sidecar keeps its store under the run's state folder,
// DATA/state/STREAMLET with --data (a second run continues from the first one's states), else a
// temporary folder removed when the run ends, as the in-memory broker's data is.

// compact is the one cleanup.policy a changelog may have.
const compact = "compact"

// changelogs returns the changelog of every stateful inlet of the pipeline, by streamlet.
func changelogs(p *actiondir.Pipeline) map[string][]actiondir.Changelog {
	out := map[string][]actiondir.Changelog{}
	for _, s := range p.Streamlets {
		if cs := s.Action.Changelogs(s.Action.Name); len(cs) > 0 {
			out[s.Action.Name] = cs
		}
	}
	return out
}

// stateRoot returns the folder the stateful streamlets' stores go under, and what removes it
// at the end of the run (nothing with --data). No streamlet keeps state: "", nothing.
func stateRoot(p *actiondir.Pipeline, dataDir string) (string, func(), error) {
	if len(changelogs(p)) == 0 {
		return "", func() {}, nil
	}
	if dataDir != "" {
		return filepath.Join(dataDir, "state"), func() {}, nil
	}
	dir, err := os.MkdirTemp("", "millrace-state-")
	if err != nil {
		return "", nil, fmt.Errorf("a temporary folder for the streamlets' state: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// createChangelogs creates each stateful inlet's changelog with its inlet topic's partitions
// (read from the broker: an inlet topic of an earlier run keeps its own) and
// cleanup.policy=compact. One that exists is checked as the sidecar checks it at start, so a
// run on an old --data, or on --brokers, says what to fix instead of starting a streamlet that
// cannot keep state.
func (r *runner) createChangelogs(ctx context.Context) error {
	byStreamlet := changelogs(r.p)
	if len(byStreamlet) == 0 {
		return nil
	}
	var inlets []string
	for _, s := range r.p.Streamlets {
		for _, c := range byStreamlet[s.Action.Name] {
			inlets = append(inlets, s.Bindings[c.Inlet])
		}
	}
	parts, err := r.partitions(ctx, inlets)
	if err != nil {
		return err
	}
	type want struct {
		topic, inletTopic string
		partitions        int
	}
	var wants []want
	for _, s := range r.p.Streamlets {
		for _, c := range byStreamlet[s.Action.Name] {
			wants = append(wants, want{c.Topic, s.Bindings[c.Inlet], len(parts[s.Bindings[c.Inlet]])})
		}
	}
	var existing, created []string
	for _, w := range wants {
		resp, err := r.adm.CreateTopic(ctx, int32(w.partitions), -1, map[string]*string{"cleanup.policy": kadm.StringPtr(compact)}, w.topic)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
			existing = append(existing, w.topic)
		case err != nil:
			return fmt.Errorf("creating the changelog topic %s: %w", w.topic, err)
		case resp.Err != nil:
			return fmt.Errorf("creating the changelog topic %s: %w", w.topic, resp.Err)
		default:
			created = append(created, w.topic)
		}
	}
	if len(existing) == 0 {
		return r.awaitTopics(ctx, created)
	}
	// also refreshes the client's metadata of the existing ones, which r.partitions reads
	if err := r.awaitTopics(ctx, append(created, existing...)); err != nil {
		return err
	}
	have, err := r.partitions(ctx, existing)
	if err != nil {
		return err
	}
	configs, err := r.adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return fmt.Errorf("the config of the changelog topics %s: %w", strings.Join(existing, ", "), err)
	}
	policy := map[string]string{}
	for _, rc := range configs {
		if rc.Err != nil {
			return fmt.Errorf("the config of changelog topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				policy[rc.Name] = *c.Value
			}
		}
	}
	var problems []string
	for _, w := range wants {
		if _, ok := have[w.topic]; !ok {
			continue // created by this run
		}
		if n := len(have[w.topic]); n != w.partitions {
			problems = append(problems, fmt.Sprintf("changelog topic %s has %d partitions, but its inlet's topic %s has %d: a changelog has exactly its inlet's (delete it and run again: its states start over)", w.topic, n, w.inletTopic, w.partitions))
		}
		if p := policy[w.topic]; p != compact {
			problems = append(problems, fmt.Sprintf("changelog topic %s has cleanup.policy %q: set it to compact (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)", w.topic, p, w.topic))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the changelog topics cannot keep state:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// freeLoopbackPort returns a port free on 127.0.0.1 now: where a stateful streamlet's sidecar
// serves its State service and its bridge dials it (several streamlets of a run, or several
// runs, cannot all take 9011). The port is released before the sidecar binds it; another
// program taking it meanwhile makes the sidecar's start fail, naming the port.
func freeLoopbackPort() (int, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a loopback port for the State service: %w", err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	return port, lis.Close()
}

// stateKeys returns how many keys the stores of each stateful inlet hold, by STREAMLET.PORT,
// from the sidecars' millrace_sidecar_state_keys (by changelog topic and partition, summed).
// Read while the sidecars still own their partitions: a store's series goes with it.
func stateKeys(started []*running) map[string]int64 {
	out := map[string]int64{}
	for _, st := range started {
		inlet := map[string]string{}
		for _, c := range st.s.Action.Changelogs(st.s.Action.Name) {
			inlet[c.Topic] = st.s.Action.Name + "." + c.Inlet
			out[inlet[c.Topic]] += 0
		}
		if len(inlet) == 0 {
			continue
		}
		mfs, err := st.sc.Registry().Gather()
		if err != nil {
			// The summary is a report, not the run's outcome: a count it cannot read is left
			// out rather than shown as 0 keys.
			for _, name := range inlet {
				delete(out, name)
			}
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "millrace_sidecar_state_keys" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if name, ok := inlet[l.GetValue()]; ok && l.GetName() == "topic" {
						out[name] += int64(m.GetGauge().GetValue())
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
