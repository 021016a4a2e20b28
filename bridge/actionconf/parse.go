package actionconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// lineError is a mistake in an action config line: the word it is about (Index from 0, -1
// when the line as a whole is at fault), and what was expected instead. It matches
// [ErrConfig] under errors.Is.
type lineError struct {
	Index   int
	Word    string
	Message string
}

// Error names the word (by position, from 1) and what was expected.
func (e *lineError) Error() string {
	if e.Index < 0 {
		return "action config: " + e.Message
	}
	return fmt.Sprintf("action config: word %d %q: %s", e.Index+1, e.Word, e.Message)
}

// Is reports whether target is ErrConfig.
func (e *lineError) Is(target error) bool { return target == ErrConfig }

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	keyRE   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	typeMap = map[string]flowv1.ConfigType{
		"string":      flowv1.ConfigType_STRING,
		"integer":     flowv1.ConfigType_INTEGER,
		"double":      flowv1.ConfigType_DOUBLE,
		"boolean":     flowv1.ConfigType_BOOLEAN,
		"duration":    flowv1.ConfigType_DURATION,
		"memory-size": flowv1.ConfigType_MEMORY_SIZE,
	}
)

const typeNames = "string, integer, double, boolean, duration or memory-size"

// typeName returns the config line's name of a config type ("memory-size" for MEMORY_SIZE).
func typeName(t flowv1.ConfigType) string {
	for name, v := range typeMap {
		if v == t {
			return name
		}
	}
	return strings.ToLower(t.String())
}

// ParseLine parses an action config line given as words (the arguments of `millrace bridge`):
//
//	NAME [--in PORT=SCHEMA]… [--out PORT=SCHEMA]… [--param KEY:TYPE[=DEFAULT]]… [FLAG…] -- COMMAND [ARG…]
//
// A registry-encoded port adds --decode (an inlet) or --encode (an outlet)
// PORT[.key]=FORMAT[:RECORD][,OPTION…] (see [Encoding]); an inlet whose keys keep state adds
// --state PORT[,ttl=DURATION][,max-bytes=SIZE] (see [StatePort]).
//
// A flag's value is the next word or follows an = (--retries=5). Every mistake is a
// *lineError naming the word and what was expected. The result's descriptor is accepted by
// protocol.Validate.
func ParseLine(words []string) (*Action, error) {
	p := &lineParser{words: words, seen: map[string]int{}}
	a, err := p.parse()
	if err != nil {
		return nil, err
	}
	return a, nil
}

// ParseString parses an action config line given as one string, split by the quoting rules of
// [Split]. Comments and blank lines are allowed; the text must hold exactly one line (continue a
// long line with a trailing backslash).
func ParseString(s string) (*Action, error) {
	lines, err := splitLines(s)
	if err != nil {
		return nil, err
	}
	switch len(lines) {
	case 0:
		return nil, &lineError{Index: -1, Message: "no streamlet line: expected NAME --in PORT=SCHEMA … -- COMMAND"}
	case 1:
		return ParseLine(lines[0].words)
	default:
		return nil, &lineError{Index: -1, Message: fmt.Sprintf("%d lines (starting on lines %d and %d) where exactly one streamlet line is expected: end a line with \\ to continue it on the next, or remove the extra line", len(lines), lines[0].line, lines[1].line)}
	}
}

// ParseFile reads an action config file (an action directory's action.conf): exactly one
// streamlet line, with # comments and blank lines. The program runs in the file's folder.
func ParseFile(path string) (*Action, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("action config: %w", err)
	}
	a, err := ParseString(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("action config %s: %w", path, err)
	}
	a.Dir = dir
	return a, nil
}

// FromEnv parses the action config line in the environment variable MILLRACE_ACTION, read
// through getenv (os.Getenv in production). It returns an error matching [ErrNoConfig] when the
// variable is unset or blank.
func FromEnv(getenv func(string) string) (*Action, error) {
	s := getenv(EnvAction)
	if strings.TrimSpace(s) == "" {
		return nil, ErrNoConfig
	}
	a, err := ParseString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvAction, err)
	}
	return a, nil
}

type lineParser struct {
	words []string
	i     int
	seen  map[string]int // single-use flags: the word index where each was first given
}

func (p *lineParser) errAt(i int, format string, args ...any) error {
	w := ""
	if i >= 0 && i < len(p.words) {
		w = p.words[i]
	}
	return &lineError{Index: i, Word: w, Message: fmt.Sprintf(format, args...)}
}

// value returns the value of the flag at p.i (after = or the next word) and the index of the
// word that holds it.
func (p *lineParser) value(flag, want string) (string, int, error) {
	w := p.words[p.i]
	if _, v, ok := strings.Cut(w, "="); ok {
		return v, p.i, nil
	}
	if p.i+1 >= len(p.words) || p.words[p.i+1] == "--" {
		return "", p.i, p.errAt(p.i, "%s expects %s after it", flag, want)
	}
	p.i++
	return p.words[p.i], p.i, nil
}

func (p *lineParser) once(flag string) error {
	if first, ok := p.seen[flag]; ok {
		return p.errAt(p.i, "%s is given twice (first as word %d); give it once", flag, first+1)
	}
	p.seen[flag] = p.i
	return nil
}

func (p *lineParser) parse() (*Action, error) {
	a := new(Action)
	*a = defaults
	if len(p.words) == 0 {
		return nil, &lineError{Index: -1, Message: "empty line: expected NAME --in PORT=SCHEMA … -- COMMAND"}
	}
	name := p.words[0]
	switch {
	case strings.HasPrefix(name, "-"):
		return nil, p.errAt(0, "expected the streamlet name first ([a-z0-9-]{1,63}, e.g. score-listing), before any flag")
	case !nameRE.MatchString(name):
		return nil, p.errAt(0, "a streamlet name is 1 to 63 characters of a-z, 0-9 and -, e.g. score-listing")
	}
	a.Name = name
	ports := map[string]int{} // port name → word index, unique across inlets and outlets
	deadLetterAt, fallbackAt := -1, -1
	var codecs []codecFlag
	var states []stateFlag
	for p.i = 1; p.i < len(p.words); p.i++ {
		w := p.words[p.i]
		if w == "--" {
			a.Command = p.words[p.i+1:]
			if len(a.Command) == 0 {
				return nil, p.errAt(p.i, "expected the command after --, e.g. -- python3 main.py")
			}
			break
		}
		flag, _, _ := strings.Cut(w, "=")
		switch flag {
		case "--in", "--out":
			v, at, err := p.value(flag, "PORT=SCHEMA (e.g. "+flag+" listings=listing.v1)")
			if err != nil {
				return nil, err
			}
			port, schema, ok := strings.Cut(v, "=")
			switch {
			case !ok || schema == "":
				return nil, p.errAt(at, "%s expects PORT=SCHEMA, e.g. %s listings=listing.v1", flag, flag)
			case !nameRE.MatchString(port):
				return nil, p.errAt(at, "port name %q: expected 1 to 63 characters of a-z, 0-9 and -", port)
			case strings.TrimSpace(schema) != schema || strings.ContainsAny(schema, " \t\r\n"):
				return nil, p.errAt(at, "schema name %q: expected no blanks, e.g. listing.v1", schema)
			}
			if first, dup := ports[port]; dup {
				return nil, p.errAt(at, "port %q is declared twice (first in word %d); port names are unique across inlets and outlets", port, first+1)
			}
			ports[port] = at
			if flag == "--in" {
				a.Inlets = append(a.Inlets, Port{Name: port, Schema: schema})
			} else {
				a.Outlets = append(a.Outlets, Port{Name: port, Schema: schema})
			}
		case "--decode", "--encode":
			v, at, err := p.value(flag, encodingForm)
			if err != nil {
				return nil, err
			}
			f, err := p.parseCodecFlag(flag, v, at)
			if err != nil {
				return nil, err
			}
			codecs = append(codecs, f)
		case "--state":
			v, at, err := p.value(flag, stateForm)
			if err != nil {
				return nil, err
			}
			f, err := p.parseStateFlag(v, at)
			if err != nil {
				return nil, err
			}
			states = append(states, f)
		case "--param":
			v, at, err := p.value(flag, "KEY:TYPE[=DEFAULT] (e.g. --param min-rooms:integer=2)")
			if err != nil {
				return nil, err
			}
			spec, def, hasDef := strings.Cut(v, "=")
			key, typ, ok := strings.Cut(spec, ":")
			if !ok {
				return nil, p.errAt(at, "--param expects KEY:TYPE[=DEFAULT], e.g. --param min-rooms:integer=2")
			}
			if !keyRE.MatchString(key) {
				return nil, p.errAt(at, "parameter key %q: expected a lower-case letter then a-z, 0-9 and -, e.g. min-rooms", key)
			}
			t, ok := typeMap[typ]
			if !ok {
				return nil, p.errAt(at, "parameter type %q: expected %s", typ, typeNames)
			}
			for _, q := range a.Params {
				if q.Key == key {
					return nil, p.errAt(at, "parameter %q is declared twice; declare each key once", key)
				}
			}
			param := Param{Key: key, Type: t}
			if hasDef {
				if def == "" {
					return nil, p.errAt(at, "parameter %q has an empty default, which the descriptor cannot tell from none: give a default after = or drop the =", key)
				}
				if _, err := protocol.ParseConfigValue(t, def); err != nil {
					return nil, p.errAt(at, "default %q of parameter %q is not a valid %s: %v", def, key, typ, err)
				}
				param.Default = def
			}
			a.Params = append(a.Params, param)
		case "--concurrency", "--window", "--retries":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			min := map[string]int{"--concurrency": 1, "--window": 0, "--retries": 0}[flag]
			v, at, err := p.value(flag, "a whole number")
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < min || n > 1_000_000 {
				return nil, p.errAt(at, "%s expects a whole number from %d to 1000000", flag, min)
			}
			switch flag {
			case "--concurrency":
				a.Concurrency = n
			case "--window":
				a.Window = n
			case "--retries":
				a.Retries = n
			}
		case "--timeout", "--ready-timeout":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			v, at, err := p.value(flag, "a duration (e.g. 30s, 2m)")
			if err != nil {
				return nil, err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || (flag == "--ready-timeout" && d == 0) {
				return nil, p.errAt(at, "%s expects a positive duration such as 500ms, 30s or 2m", flag)
			}
			if flag == "--timeout" {
				a.Timeout = d
			} else {
				a.ReadyTimeout = d
			}
		case "--per-item":
			if strings.Contains(w, "=") {
				return nil, p.errAt(p.i, "--per-item takes no value")
			}
			if err := p.once(flag); err != nil {
				return nil, err
			}
			a.PerItem = true
		case "--dead-letter", "--fallback":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			v, at, err := p.value(flag, "the name of an outlet declared with --out")
			if err != nil {
				return nil, err
			}
			if flag == "--dead-letter" {
				a.DeadLetter, deadLetterAt = v, at
			} else {
				a.Fallback, fallbackAt = v, at
			}
		case "--effects":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			v, at, err := p.value(flag, "external or none")
			if err != nil {
				return nil, err
			}
			switch v {
			case "external":
				a.External = true
			case "none":
			default:
				return nil, p.errAt(at, "--effects expects external (the action changes something outside) or none")
			}
		case "--description":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			v, _, err := p.value(flag, "a text (quote it when it has blanks)")
			if err != nil {
				return nil, err
			}
			a.Description = v
		case "--metrics":
			if err := p.once(flag); err != nil {
				return nil, err
			}
			v, at, err := p.value(flag, "an address to serve Prometheus metrics on, e.g. :9090")
			if err != nil {
				return nil, err
			}
			if _, _, err := splitHostPort(v); err != nil {
				return nil, p.errAt(at, "--metrics expects HOST:PORT or :PORT, e.g. :9090")
			}
			a.Metrics = v
		default:
			if strings.HasPrefix(w, "-") {
				return nil, p.errAt(p.i, "unknown flag; expected one of --in, --out, --decode, --encode, --state, --param, --concurrency, --per-item, --timeout, --ready-timeout, --window, --retries, --dead-letter, --fallback, --effects, --description, --metrics, or -- before the command")
			}
			return nil, p.errAt(p.i, "expected a flag or -- before the command (write -- %s if this is the program)", w)
		}
	}
	if a.Command == nil {
		return nil, &lineError{Index: -1, Message: "no command: end the line with -- and the program to run, e.g. -- python3 main.py"}
	}
	if len(a.Inlets) == 0 {
		return nil, p.errAt(0, "the streamlet declares no inlet: add --in PORT=SCHEMA, e.g. --in listings=listing.v1")
	}
	if a.DeadLetter != "" && !a.hasOutlet(a.DeadLetter) {
		return nil, p.errAt(deadLetterAt, "--dead-letter names no outlet: declare it with --out %s=SCHEMA, or name one of %s", a.DeadLetter, portList(a.Outlets))
	}
	if a.Fallback != "" && !a.hasOutlet(a.Fallback) {
		return nil, p.errAt(fallbackAt, "--fallback names no outlet: declare it with --out %s=SCHEMA, or name one of %s", a.Fallback, portList(a.Outlets))
	}
	if err := p.resolveCodecs(a, codecs); err != nil {
		return nil, err
	}
	if err := p.resolveState(a, states); err != nil {
		return nil, err
	}
	if a.PerItem && a.Window > 1 {
		return nil, p.errAt(p.seen["--window"], "--window has no use with --per-item (one process per item); remove one of them")
	}
	if probs := protocol.Validate(a.Spec("0")); len(probs) > 0 {
		return nil, &lineError{Index: -1, Message: "the streamlet it declares is not valid: " + probs.Error()}
	}
	return a, nil
}

// splitHostPort accepts HOST:PORT and :PORT with a numeric port.
func splitHostPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, errors.New("no port")
	}
	port, err := strconv.Atoi(s[i+1:])
	if err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("bad port")
	}
	return s[:i], port, nil
}
