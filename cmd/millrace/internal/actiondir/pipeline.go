package actiondir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ankka-flow/millrace/bridge/actionconf"
)

// Streamlet is one streamlet of a pipeline: an action with its ports bound to topics and its
// deploy-time config values.
type Streamlet struct {
	Action   *Action
	Bindings map[string]string // port → topic, for every declared port
	Values   map[string]string // config values (--set KEY=VALUE), as typed strings
}

// Inlets returns the streamlet's inlet topics, in declaration order.
func (s *Streamlet) Inlets() []string {
	var ts []string
	for _, p := range s.Action.Inlets {
		ts = append(ts, s.Bindings[p.Name])
	}
	return ts
}

// Pipeline is what `millrace run` runs: one or several streamlets, the output of one feeding
// the next through the topics they share.
type Pipeline struct {
	Name       string
	Streamlets []*Streamlet
	// Input is the topic input lines go to when they name none: the first streamlet's first
	// inlet, unless the pipeline file says `input TOPIC`.
	Input string
}

// Single returns the pipeline of one action: its ports bound to topics named
// STREAMLET.PORT.
func Single(a *Action) *Pipeline {
	s := &Streamlet{Action: a, Bindings: map[string]string{}}
	bindDefaults(s)
	return &Pipeline{Name: "local", Streamlets: []*Streamlet{s}, Input: s.Inlets()[0]}
}

func bindDefaults(s *Streamlet) {
	for _, p := range slices.Concat(s.Action.Inlets, s.Action.Outlets) {
		if s.Bindings[p.Name] == "" {
			s.Bindings[p.Name] = s.Action.Name + "." + p.Name
		}
	}
}

// LoadPipeline reads a pipeline file: one streamlet per line, and # comments.
//
//	# listings → scores → alerts
//	input raw-listings
//	actions/score-listing  listings=raw-listings scores=scored --set min-rooms=3
//	actions/alert          scores=scored
//
// A streamlet line is the action directory (relative to the file), then PORT=TOPIC bindings
// (an unbound port gets the topic STREAMLET.PORT) and --set KEY=VALUE config values. Words are
// split as in action.conf. `input TOPIC` names where input lines go (default: the first
// streamlet's first inlet).
func LoadPipeline(path string) (*Pipeline, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	base := filepath.Dir(path)
	p := &Pipeline{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	for n, line := range strings.Split(string(data), "\n") {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: "+format, append([]any{path, n + 1}, args...)...)
		}
		words, err := actionconf.Split(line)
		if err != nil {
			return nil, bad("%w", err)
		}
		if len(words) == 0 {
			continue
		}
		if words[0] == "input" {
			if len(words) != 2 {
				return nil, bad("input expects one topic: input TOPIC")
			}
			p.Input = words[1]
			continue
		}
		dir := words[0]
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(base, dir)
		}
		a, err := Load(dir)
		if err != nil {
			return nil, bad("%w", err)
		}
		s := &Streamlet{Action: a, Bindings: map[string]string{}, Values: map[string]string{}}
		for i := 1; i < len(words); i++ {
			w := words[i]
			if w == "--set" || strings.HasPrefix(w, "--set=") {
				v, ok := strings.CutPrefix(w, "--set=")
				if !ok {
					if i+1 >= len(words) {
						return nil, bad("--set expects KEY=VALUE after it")
					}
					i++
					v = words[i]
				}
				k, val, ok := strings.Cut(v, "=")
				if !ok {
					return nil, bad("--set expects KEY=VALUE, got %q", v)
				}
				s.Values[k] = val
				continue
			}
			port, topic, ok := strings.Cut(w, "=")
			if !ok || topic == "" {
				return nil, bad("word %q: expected PORT=TOPIC or --set KEY=VALUE", w)
			}
			if !a.hasPort(port) {
				return nil, bad("%s has no port %q: its ports are %s", a.Name, port, strings.Join(a.portNames(), ", "))
			}
			s.Bindings[port] = topic
		}
		bindDefaults(s)
		for _, o := range p.Streamlets {
			if o.Action.Name == a.Name {
				return nil, bad("a second streamlet named %s: each streamlet of a pipeline needs its own name (its consumer group)", a.Name)
			}
		}
		p.Streamlets = append(p.Streamlets, s)
	}
	if len(p.Streamlets) == 0 {
		return nil, fmt.Errorf("%s: no streamlet: write one line per streamlet, DIR [PORT=TOPIC]… [--set KEY=VALUE]…", path)
	}
	if p.Input == "" {
		p.Input = p.Streamlets[0].Inlets()[0]
	}
	return p, nil
}

func (a *Action) hasPort(name string) bool {
	return slices.Contains(a.portNames(), name)
}

func (a *Action) portNames() []string {
	var names []string
	for _, p := range slices.Concat(a.Inlets, a.Outlets) {
		names = append(names, p.Name)
	}
	return names
}

// IsPipelineFile reports whether path is a pipeline file rather than an action config file:
// its first streamlet line starts with a directory that holds an action.conf.
func IsPipelineFile(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		words, err := actionconf.Split(line)
		if err != nil || len(words) == 0 {
			continue
		}
		if words[0] == "input" {
			return true
		}
		dir := words[0]
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(path), dir)
		}
		_, err = os.Stat(filepath.Join(dir, configFile))
		return err == nil
	}
	return false
}
