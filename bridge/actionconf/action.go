// Package actionconf is the action config line of millrace: the one line an author writes (in
// action.conf, as `millrace bridge` arguments or in MILLRACE_ACTION) that names a streamlet, its
// ports and parameters, how its program runs, and the program itself. It holds the line's parser
// and shell-word quoting, its one table of defaults, the streamlet descriptor the line declares,
// and the derivation of idempotencyKey.
//
// It is public because the bridge's Options take an [Action]: a Go program that embeds the
// bridge (package github.com/ankka-flow/millrace/bridge) builds one here. It links no gRPC
// server, OpenTelemetry or Prometheus package, so the tools that only read a line (the
// conformance kit, `millrace describe`, `test`, `init`) stay close to the engine's size.
package actionconf

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

var (
	// ErrConfig matches every mistake in an action config line (a *lineError) from ParseLine,
	// ParseString, ParseFile and FromEnv.
	ErrConfig = errors.New("bridge: action config")
	// ErrNoConfig is returned by FromEnv when MILLRACE_ACTION is unset or blank.
	ErrNoConfig = errors.New("bridge: no action config: give the line as arguments, --config FILE, or in " + EnvAction)
)

// EnvAction is the environment variable that holds an action config line when neither
// arguments nor a file give one.
const EnvAction = "MILLRACE_ACTION"

// defaults is the one table of the config line's defaults: what a flag left out means for the
// bridge, `millrace run`, `millrace test`, `describe` and the conformance kit alike (they all
// take an [Action] parsed here). docs/action-config.md's table of the config line shows the same values
// (TestDocsDefaults). A zero Timeout means no timeout, everywhere.
var defaults = Action{
	Concurrency:  1,
	Timeout:      time.Minute,
	ReadyTimeout: engine.DefaultReadyTimeout, // the spec's bound, the engine's own default
	Window:       0,                          // as the program's ready line says, else one at a time
	Retries:      3,
}

// Port is one inlet or outlet of an action: its name and the schema name of its JSON contract,
// and, when its values or keys are registry-encoded on Kafka (--decode, --encode), how. The
// descriptor's contract is the program's side, JSON, either way.
type Port struct {
	Name   string
	Schema string
	Value  Encoding // of the record values; the zero Encoding is plain JSON
	Key    Encoding // of the record keys, likewise
}

// Param is one config parameter of an action. Default is "" when the parameter has none and is
// therefore required at deploy time (the descriptor cannot tell an empty default from none).
type Param struct {
	Key     string
	Type    flowv1.ConfigType
	Default string
}

// Action is one parsed action config line: the streamlet it declares and how the bridge runs
// its program. The zero value is not useful; get one from [ParseLine], [ParseString],
// [ParseFile] or [FromEnv].
type Action struct {
	Name        string
	Description string
	Inlets      []Port
	Outlets     []Port
	Params      []Param
	State       []StatePort // --state PORT[,ttl=D][,max-bytes=SIZE], in line order; nil: none

	Concurrency  int           // processes; --concurrency, default 1
	PerItem      bool          // one process per item; --per-item
	Timeout      time.Duration // per attempt of an item; --timeout, default 1m; 0 means none
	ReadyTimeout time.Duration // --ready-timeout, default 10s
	Window       int           // deliveries written ahead to one process; --window, default 0 (one at a time)
	Retries      int           // retries after the first attempt; --retries, default 3
	DeadLetter   string        // outlet for records that failed for good; --dead-letter
	Fallback     string        // outlet for abstained records; --fallback
	External     bool          // --effects external: the action changes something outside
	Metrics      string        // address of the Prometheus endpoint; --metrics, off when empty

	Command []string // argv of the program, after --
	Dir     string   // working directory of the program: the config file's folder, or "" (the bridge's)
}

// portList names ports for an error message that lists what may be chosen.
func portList(ports []Port) string {
	if len(ports) == 0 {
		return "the outlets (none is declared yet)"
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// DefaultOutlet returns the outlet an emit that names none goes to: the one outlet that is
// neither the --dead-letter nor the --fallback port (those two are the bridge's own, and the
// action protocol's emit has no outlet at all). ok is false when there is none or more than
// one such outlet; n is how many there are.
func (a *Action) DefaultOutlet() (name string, n int, ok bool) {
	for _, p := range a.Outlets {
		if p.Name == a.DeadLetter || p.Name == a.Fallback {
			continue
		}
		if n == 0 {
			name = p.Name
		}
		n++
	}
	if n != 1 {
		return "", n, false
	}
	return name, n, true
}

// EmitOutlet returns the outlet of the nth emit of a delivery (n from 1): the one it names,
// or DefaultOutlet when it names none. An emit naming an outlet the action does not declare,
// or none when there is no DefaultOutlet, breaks the protocol: the error is a
// *stdio.ProtocolError of stdio.RuleUndeclaredOutlet, its line written again from e (the
// engine keeps the emit, not its line). The bridge and the fixture runner both judge emits so.
func (a *Action) EmitOutlet(n int, e *stdio.Emit) (string, error) {
	outlet := e.Outlet
	if outlet == "" {
		name, others, ok := a.DefaultOutlet()
		if !ok {
			return "", undeclared(e, fmt.Sprintf("emit %d names no outlet, and the action has %d outlets besides its --dead-letter and --fallback ports (%s): name one with \"outlet\" (an emit may leave it out only when exactly one outlet is neither of those two)", n, others, portList(a.programOutlets())))
		}
		return name, nil
	}
	for _, p := range a.Outlets {
		if p.Name == outlet {
			return outlet, nil
		}
	}
	return "", undeclared(e, fmt.Sprintf("emit %d names outlet %q, which the action config does not declare; declare it with --out %s=SCHEMA or emit to one of %s", n, outlet, outlet, portList(a.Outlets)))
}

// undeclared is the protocol violation of an emit to no outlet the action declares.
func undeclared(e *stdio.Emit, detail string) error {
	m := stdio.Message{Type: stdio.TypeEmit, Outlet: e.Outlet, Key: e.Key, KeyBase64: e.KeyBase64, Payload: e.Payload, Headers: e.Headers}
	line := stdio.AppendMessage(nil, &m)
	return stdio.NewProtocolError(stdio.RuleUndeclaredOutlet, line[:len(line)-1], detail)
}

// programOutlets lists the outlets an emit may name: all but the --dead-letter and --fallback ports.
func (a *Action) programOutlets() []Port {
	var ports []Port
	for _, p := range a.Outlets {
		if p.Name != a.DeadLetter && p.Name != a.Fallback {
			ports = append(ports, p)
		}
	}
	return ports
}

func (a *Action) hasOutlet(name string) bool {
	return slices.ContainsFunc(a.Outlets, func(p Port) bool { return p.Name == name })
}

// Descriptor returns the streamlet descriptor the action declares: its ports with JSON
// contracts and computed fingerprints, and its config parameters. Each call returns a new
// message.
func (a *Action) Descriptor() *flowv1.StreamletDescriptor {
	port := func(p Port) *flowv1.Port {
		return &flowv1.Port{Name: p.Name, Contract: &flowv1.Contract{Format: "json", SchemaName: p.Schema, Fingerprint: protocol.Fingerprint(p.Schema)}}
	}
	d := &flowv1.StreamletDescriptor{Name: a.Name, Description: a.Description}
	for _, p := range a.Inlets {
		d.Inlets = append(d.Inlets, port(p))
	}
	for _, p := range a.Outlets {
		d.Outlets = append(d.Outlets, port(p))
	}
	for _, p := range a.Params {
		d.ConfigParameters = append(d.ConfigParameters, &flowv1.ConfigParameter{Key: p.Key, Type: p.Type, DefaultValue: p.Default})
	}
	return d
}

// sdkName is the sdk name millrace gives in discovery.
const sdkName = "millrace"

// Spec returns what Discover answers: protocol version (protocol.Version when the line keeps
// state, else protocol.BaseVersion), sdk millrace at version, and the descriptor.
func (a *Action) Spec(version string) *flowv1.Spec {
	return &flowv1.Spec{
		ProtocolVersion: a.protocolVersion(),
		Sdk:             &flowv1.SdkInfo{Name: sdkName, Version: version},
		Streamlet:       a.Descriptor(),
	}
}

// Line returns the action's config line as one string that [ParseString] reads back into the
// same action (Dir aside), with the flags in a fixed order and defaults left out.
func (a *Action) Line() string {
	w := []string{a.Name}
	for _, p := range a.Inlets {
		w = append(w, "--in", p.Name+"="+p.Schema)
	}
	for _, p := range a.Outlets {
		w = append(w, "--out", p.Name+"="+p.Schema)
	}
	for _, p := range a.Params {
		s := p.Key + ":" + typeName(p.Type)
		if p.Default != "" {
			s += "=" + p.Default
		}
		w = append(w, "--param", s)
	}
	w = append(w, a.encodingWords()...)
	w = append(w, a.stateWords()...)
	if a.Concurrency != defaults.Concurrency {
		w = append(w, "--concurrency", strconv.Itoa(a.Concurrency))
	}
	if a.PerItem {
		w = append(w, "--per-item")
	}
	if a.Timeout != defaults.Timeout {
		w = append(w, "--timeout", a.Timeout.String())
	}
	if a.ReadyTimeout != defaults.ReadyTimeout {
		w = append(w, "--ready-timeout", a.ReadyTimeout.String())
	}
	if a.Window != defaults.Window {
		w = append(w, "--window", strconv.Itoa(a.Window))
	}
	if a.Retries != defaults.Retries {
		w = append(w, "--retries", strconv.Itoa(a.Retries))
	}
	if a.DeadLetter != "" {
		w = append(w, "--dead-letter", a.DeadLetter)
	}
	if a.Fallback != "" {
		w = append(w, "--fallback", a.Fallback)
	}
	if a.External {
		w = append(w, "--effects", "external")
	}
	if a.Description != "" {
		w = append(w, "--description="+a.Description) // = keeps a text that starts with - a value
	}
	if a.Metrics != "" {
		w = append(w, "--metrics", a.Metrics)
	}
	w = append(w, "--")
	w = append(w, a.Command...)
	return Join(w)
}

// EngineConfig is the engine.Config that runs the action's program: what the config line says,
// as given (its defaults are the table above; the engine adds none of its own to these), for
// the bridge and for the fixture runner alike. What only the caller knows (version,
// environment, hello, logger, hooks, the changelog's record limit) it fills in.
func (a *Action) EngineConfig() engine.Config {
	return engine.Config{
		Name:         a.Name,
		Command:      a.Command,
		Dir:          a.Dir,
		Concurrency:  a.Concurrency,
		PerItem:      a.PerItem,
		ReadyTimeout: a.ReadyTimeout,
		ItemTimeout:  a.Timeout, // 0: none
		Window:       a.Window,
		Retries:      a.Retries,
		State:        a.StateLimits(),
	}
}
