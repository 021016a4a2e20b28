package actiondir

import "github.com/ankka-flow/millrace/protocol"

// Changelog is the compacted topic one stateful inlet (--state) keeps its states in.
type Changelog struct {
	Inlet string // the inlet port
	Topic string // PREFIX.PORT.state
	Var   string // the sidecar's variable that binds it: FLOW_INLET_<PORT>_STATE_TOPIC
}

// Changelogs returns the changelog of each --state inlet of a, in line order, named
// PREFIX.PORT.state: in a deployment PREFIX is the consumer group (the name docs/state.md
// suggests), in `millrace run` the streamlet. Nil when the line keeps no state.
func (a *Action) Changelogs(prefix string) []Changelog {
	var out []Changelog
	for _, s := range a.State {
		out = append(out, Changelog{Inlet: s.Port, Topic: prefix + "." + s.Port + ".state", Var: protocol.StateTopicVar(s.Port)})
	}
	return out
}
