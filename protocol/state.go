package protocol

import (
	"fmt"
	"slices"
	"strings"
)

// The Open check of millrace.state.v1 (protocol 1.1, docs/state.md): the inlets a process
// opens the State service with must be exactly the inlets its deployment keeps state for. It
// is written over plain values so that this package links no gRPC: the sidecar gives it
// Open's and Start's fields, and protocol/fixtures/state.json holds its cases.

// StateTopicVar is the variable binding an inlet's changelog topic, FLOW_INLET_<PORT>_STATE_TOPIC
// (the port upper case, '-' as '_'); set, the inlet keeps state.
func StateTopicVar(port string) string {
	return "FLOW_INLET_" + strings.ToUpper(strings.ReplaceAll(port, "-", "_")) + "_STATE_TOPIC"
}

// Changelog is a stateful inlet of a deployment: its changelog topic, and the most a record of
// it may be (key and value), the topic's max.message.bytes less framing.
type Changelog struct {
	Topic          string `json:"topic"`
	MaxRecordBytes int    `json:"maxRecordBytes"`
}

// OpenInlet is one inlet of an Open (millrace.state.v1.InletState): the line's max-bytes.
type OpenInlet struct {
	Inlet         string `json:"inlet"`
	MaxValueBytes int    `json:"maxValueBytes"`
}

// OpenedInlet is one inlet's effective limits, as Opened sends them.
type OpenedInlet struct {
	Inlet          string `json:"inlet"`
	ChangelogTopic string `json:"changelogTopic"`
	MaxValueBytes  int    `json:"maxValueBytes"`  // the line's, or less where the topic accepts less
	MaxRecordBytes int    `json:"maxRecordBytes"` // the changelog's, key and value together
}

// CheckStateOpen checks an Open: inlets are the conversation's inlet ports (Start.inlets),
// changelogs the deployment's stateful inlets by port, open the inlets the process opened.
// With no problem it returns Opened's limits in open's order; else every problem, each naming
// the inlet and the fix, in open's order then the deployment's (ports sorted).
func CheckStateOpen(inlets []string, changelogs map[string]Changelog, open []OpenInlet) ([]OpenedInlet, []string) {
	var ps []string
	var opened []OpenedInlet
	seen := map[string]bool{}
	for _, o := range open {
		switch cl, stateful := changelogs[o.Inlet]; {
		case seen[o.Inlet]:
			ps = append(ps, fmt.Sprintf("Open names inlet %q twice: name each stateful inlet once", o.Inlet))
		case !slices.Contains(inlets, o.Inlet):
			ps = append(ps, fmt.Sprintf("Open names inlet %q, which the conversation does not bind (inlets: %s): the action line's --state names an inlet of its --in", o.Inlet, strings.Join(inlets, ", ")))
		case !stateful:
			ps = append(ps, fmt.Sprintf("the process keeps state for inlet %s (--state %s) but the deployment declares no changelog for it: set %s, or remove --state %s from the action line", o.Inlet, o.Inlet, StateTopicVar(o.Inlet), o.Inlet))
		case o.MaxValueBytes <= 0:
			ps = append(ps, fmt.Sprintf("Open gives inlet %s no max_value_bytes: a process sends its line's max-bytes for each stateful inlet", o.Inlet))
		default:
			opened = append(opened, OpenedInlet{Inlet: o.Inlet, ChangelogTopic: cl.Topic,
				MaxValueBytes: min(o.MaxValueBytes, cl.MaxRecordBytes), MaxRecordBytes: cl.MaxRecordBytes})
		}
		seen[o.Inlet] = true
	}
	ports := make([]string, 0, len(changelogs))
	for p := range changelogs {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, p := range ports {
		if !seen[p] {
			ps = append(ps, fmt.Sprintf("the deployment keeps state for inlet %s (%s=%s) but the process's Open does not name it: deploy the action with --state %s, or unset the variable", p, StateTopicVar(p), changelogs[p].Topic, p))
		}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return opened, nil
}
