package actionconf

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// StatePort is one --state word: an inlet whose records' keys keep state.
type StatePort struct {
	Port     string
	TTL      time.Duration // 0: states never expire; else at least 1s
	MaxBytes int           // a state's JSON; default engine.DefaultStateMaxBytes (64 KiB), at most 1 MiB
}

// minStateTTL is the shortest ttl a --state word may give: the sidecar's expiry is checked on
// reads and swept, so a shorter one would promise more precision than it keeps.
const minStateTTL = time.Second

const stateForm = "PORT[,ttl=DURATION][,max-bytes=SIZE] (e.g. --state events,ttl=720h)"

// stateFlag is a --state word as read, before its port is checked against the inlets (which
// may be declared after it).
type stateFlag struct {
	StatePort
	at int // the word that holds it
}

// parseStateFlag reads the value v of a --state word at index at.
func (p *lineParser) parseStateFlag(v string, at int) (stateFlag, error) {
	parts := strings.Split(v, ",")
	f := stateFlag{StatePort: StatePort{Port: parts[0], MaxBytes: engine.DefaultStateMaxBytes}, at: at}
	if f.Port == "" {
		return f, p.errAt(at, "--state expects %s", stateForm)
	}
	seen := map[string]bool{}
	for _, opt := range parts[1:] {
		name, val, ok := strings.Cut(opt, "=")
		if (name != "ttl" && name != "max-bytes") || !ok {
			return f, p.errAt(at, "unknown option %q of --state: expected ttl=DURATION or max-bytes=SIZE, as in --state %s", opt, stateForm)
		}
		if seen[name] {
			return f, p.errAt(at, "%s is given twice in one --state word; give it once", name)
		}
		seen[name] = true
		switch name {
		case "ttl":
			d, err := time.ParseDuration(val)
			switch {
			case err != nil:
				return f, p.errAt(at, "ttl: %q is not a duration (write e.g. 24h)", val)
			case d < minStateTTL:
				return f, p.errAt(at, "ttl: %s is under 1s, the shortest a state may live: give at least 1s, or leave ttl out for states that never expire", val)
			}
			f.TTL = d
		case "max-bytes":
			n, err := protocol.ParseConfigValue(flowv1.ConfigType_MEMORY_SIZE, val)
			if err != nil {
				return f, p.errAt(at, "max-bytes: %q is not a size (write e.g. 64Ki)", val)
			}
			b, _ := n.(int64)
			if b < 1 || b > engine.MaxStateBytes {
				return f, p.errAt(at, "max-bytes: %s is out of range: a state may be from 1 byte to 1Mi (1048576 bytes)", val)
			}
			f.MaxBytes = int(b)
		}
	}
	return f, nil
}

// resolveState checks each --state word's port against the ports declared and keeps the words
// in a.State, in line order.
func (p *lineParser) resolveState(a *Action, flags []stateFlag) error {
	first := map[string]int{}
	for _, f := range flags {
		if at, dup := first[f.Port]; dup {
			return p.errAt(f.at, "inlet %q keeps state twice (first in word %d): give one --state per inlet", f.Port, at+1)
		}
		first[f.Port] = f.at
		switch {
		case slices.ContainsFunc(a.Inlets, func(q Port) bool { return q.Name == f.Port }):
		case a.hasOutlet(f.Port):
			return p.errAt(f.at, "--state names outlet %q: state is kept per key of an inlet's records; name one of the inlets %s", f.Port, portList(a.Inlets))
		default:
			return p.errAt(f.at, "--state names no inlet: declare it with --in %s=SCHEMA, or name one of %s", f.Port, portList(a.Inlets))
		}
		a.State = append(a.State, f.StatePort)
	}
	return nil
}

// stateWords are the --state words of a, for Line: options left out at their defaults.
func (a *Action) stateWords() []string {
	var w []string
	for _, s := range a.State {
		v := s.Port
		if s.TTL != 0 {
			v += ",ttl=" + s.TTL.String()
		}
		if s.MaxBytes != engine.DefaultStateMaxBytes {
			v += ",max-bytes=" + sizeWord(s.MaxBytes)
		}
		w = append(w, "--state", v)
	}
	return w
}

// sizeWord writes n bytes in the MEMORY_SIZE grammar, in Ki or Mi when it is a whole number of
// them.
func sizeWord(n int) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "Mi"
	case n > 0 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "Ki"
	}
	return strconv.Itoa(n)
}

// StateLimits is the engine's view of State (nil when none): TTL and MaxValueBytes from the
// line; MaxRecordBytes 0 (the bridge fills it from the sidecar's Opened).
func (a *Action) StateLimits() map[string]engine.StateLimits {
	if len(a.State) == 0 {
		return nil
	}
	m := make(map[string]engine.StateLimits, len(a.State))
	for _, s := range a.State {
		m[s.Port] = engine.StateLimits{TTL: s.TTL, MaxValueBytes: s.MaxBytes}
	}
	return m
}

// protocolVersion is the version the action's process reports: the minor that added state
// when the line keeps any, else the base version, so that a stateless action still runs
// with a sidecar of the base version.
func (a *Action) protocolVersion() string {
	if len(a.State) > 0 {
		return protocol.Version
	}
	return protocol.BaseVersion
}
