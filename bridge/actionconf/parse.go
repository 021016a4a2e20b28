package actionconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

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

	// What the flags' rows read into: the action, and what is checked once the line is read.
	a                        *Action
	ports                    map[string]int // port name → word index, unique across inlets and outlets
	deadLetterAt, fallbackAt int
	codecs                   []codecFlag
	states                   []stateFlag
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
	p.a, p.ports, p.deadLetterAt, p.fallbackAt = a, map[string]int{}, -1, -1
	for p.i = 1; p.i < len(p.words); p.i++ {
		w := p.words[p.i]
		if w == "--" {
			a.Command = p.words[p.i+1:]
			if len(a.Command) == 0 {
				return nil, p.errAt(p.i, "expected the command after --, e.g. -- python3 main.py")
			}
			break
		}
		if err := p.flag(w); err != nil {
			return nil, err
		}
	}
	if a.Command == nil {
		return nil, &lineError{Index: -1, Message: "no command: end the line with -- and the program to run, e.g. -- python3 main.py"}
	}
	if len(a.Inlets) == 0 {
		return nil, p.errAt(0, "the streamlet declares no inlet: add --in PORT=SCHEMA, e.g. --in listings=listing.v1")
	}
	if a.DeadLetter != "" && !a.hasOutlet(a.DeadLetter) {
		return nil, p.errAt(p.deadLetterAt, "--dead-letter names no outlet: declare it with --out %s=SCHEMA, or name one of %s", a.DeadLetter, portList(a.Outlets))
	}
	if a.Fallback != "" && !a.hasOutlet(a.Fallback) {
		return nil, p.errAt(p.fallbackAt, "--fallback names no outlet: declare it with --out %s=SCHEMA, or name one of %s", a.Fallback, portList(a.Outlets))
	}
	if err := p.resolveCodecs(a, p.codecs); err != nil {
		return nil, err
	}
	if err := p.resolveState(a, p.states); err != nil {
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

// flag reads the flag at p.i, and its value, by the flag's row (flags.go).
func (p *lineParser) flag(w string) error {
	name, _, hasValue := strings.Cut(w, "=")
	f, ok := flagIndex[name]
	switch {
	case !ok && strings.HasPrefix(w, "-"):
		return p.errAt(p.i, "unknown flag; expected one of %s, or -- before the command", flagNames())
	case !ok:
		return p.errAt(p.i, "expected a flag or -- before the command (write -- %s if this is the program)", w)
	case f.form == "" && hasValue:
		return p.errAt(p.i, "%s takes no value", name)
	}
	if f.once {
		if err := p.once(name); err != nil {
			return err
		}
	}
	if f.form == "" {
		return f.set(p, name, "", p.i)
	}
	v, at, err := p.value(name, f.want)
	if err != nil {
		return err
	}
	return f.set(p, name, v, at)
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
