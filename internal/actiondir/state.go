package actiondir

import "strings"

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
		out = append(out, Changelog{Inlet: s.Port, Topic: prefix + "." + s.Port + ".state", Var: StateTopicVar(s.Port)})
	}
	return out
}

// StateTopicVar is the sidecar's variable naming inlet port's changelog: the port upper case,
// '-' as '_', as in the batch variables.
func StateTopicVar(port string) string {
	return "FLOW_INLET_" + strings.ToUpper(strings.ReplaceAll(port, "-", "_")) + "_STATE_TOPIC"
}
