// Package actiondir is what an action author points the tools at, for this binary only: it
// reads an action directory (its action.conf), a config file or a config line, with the config
// hello carries by default, and pipeline files of several streamlets; and it writes new action
// directories from templates (`millrace init`). `millrace describe`, `test` and `init` need
// nothing more, so they link neither the bridge's server nor the sidecar; `millrace run`
// (package local) runs what this package loads.
package actiondir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/protocol"
)

// configFile is the name of the config line's file in an action directory.
const configFile = "action.conf"

// Sentinel errors of Load.
var (
	// errNoAction is returned by Load for an argument that is neither an action directory, nor
	// a config file, nor a config line.
	errNoAction = errors.New("no action")
)

// Action is an action as the tools see it: its parsed config line, where it came from, and
// the config its hello carries by default.
type Action struct {
	*actionconf.Action
	// Source is the action directory, the config file, or "the config line".
	Source string
	// Config is hello's config: every declared --param resolved with its default. When a
	// parameter has no default it is the first fixtures/NAME.config.json, and nil when there is
	// none either (ConfigErr says why).
	Config    json.RawMessage
	ConfigErr error
}

// Load reads arg as an action directory (its action.conf), a config file, or else a config
// line (then the program runs in the current directory). Mistakes in the line are errors
// matching actionconf.ErrConfig that name the word.
func Load(arg string) (*Action, error) {
	var (
		a      *actionconf.Action
		err    error
		source string
	)
	st, statErr := os.Stat(arg)
	switch {
	case statErr == nil && st.IsDir():
		source = arg
		a, err = actionconf.ParseFile(filepath.Join(arg, configFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no %s: write the streamlet's config line there (or run millrace init action NAME)", errNoAction, arg, configFile)
		}
	case statErr == nil:
		source = arg
		a, err = actionconf.ParseFile(arg)
	case !strings.ContainsAny(strings.TrimSpace(arg), " \t\n"):
		return nil, fmt.Errorf("%w: %q is not an action directory (%w), nor a config line (a line has a name, ports and -- COMMAND)", errNoAction, arg, statErr)
	default:
		source = "the config line"
		a, err = actionconf.ParseString(arg)
	}
	if err != nil {
		return nil, err
	}
	out := &Action{Action: a, Source: source}
	cfg, problems := protocol.ResolveConfig(a.Descriptor().GetConfigParameters(), nil)
	if len(problems) == 0 {
		out.Config = cfg
		return out, nil
	}
	if fx, err := conformance.LoadFixtures(a.Dir); err == nil {
		for _, f := range fx {
			if f.Config != nil {
				out.Config = f.Config
				return out, nil
			}
		}
	}
	out.ConfigErr = fmt.Errorf("%s: the config cannot be resolved from the defaults (%v): give every --param a default, or write the config hello should carry in fixtures/NAME.config.json", a.Name, problems)
	return out, nil
}

// SetConfig resolves hello's config from values (typed strings, as --set KEY=VALUE gives
// them), every other parameter at its default; the problems are an error naming each key.
func (a *Action) SetConfig(values map[string]string) error {
	cfg, problems := protocol.ResolveConfig(a.Descriptor().GetConfigParameters(), values)
	if len(problems) > 0 {
		return fmt.Errorf("%s: the config cannot be resolved: %v", a.Name, problems)
	}
	a.Config, a.ConfigErr = cfg, nil
	return nil
}

// CheckCommand says why the action's command cannot be executed, in the words `millrace run`
// says it before anything starts (a command not on PATH, a program in the folder named
// without ./, a missing #! line or executable bit), or returns nil when it can be, as far as
// can be told without running it.
func (a *Action) CheckCommand() error {
	if msg := CommandFault(a.Dir, a.Command); msg != "" {
		return errors.New("streamlet " + a.Name + ": " + msg) // as `millrace run` says it
	}
	return nil
}

// Conformance returns the action as package conformance runs it: the same config line, with
// hello's config and the version.
func (a *Action) Conformance(version string) conformance.Action {
	return conformance.Action{Action: *a.Action, Version: version, Config: a.Config}
}
