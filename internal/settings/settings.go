// Package settings reads a container's deploy settings from its environment by one set of
// rules, so that the two containers of a pod, the sidecar and the bridge, accept the same forms:
// a port is a whole number from 1 to 65535; a size is a number of bytes written as config values
// write a memory size (67108864, 65536Ki, 64Mi, 1G); a duration is Go's (10s, 1m30s, 100ms); a
// boolean is true or false; whitespace around a value is dropped, and a blank value is unset.
//
// A [Reader] gathers every problem instead of stopping at the first, so that a bad deployment is
// reported at once, each line naming the variable, its value and a form it accepts. Each side
// declares its settings once, as the [Row]s of a [Table] (name, default, bounds, help, docs
// text, the field it sets), which default, read and list them; this package holds no setting
// of its own.
package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// ErrSettings is matched by every error a Reader's Err returns.
var ErrSettings = errors.New("settings: bad deploy settings")

// Var is one row of a side's table of settings: an environment variable, what it means when
// unset (as the docs' tables write it), and what it sets.
type Var struct {
	Name    string
	Default string
	Meaning string // the -h line
	Doc     string // the docs table's text; empty: Meaning
	Literal bool   // Default is a value (written in backticks in the docs), not a phrase
}

// badSettings lists every problem a Reader found, one per line. It names no side: its caller
// does (`millrace bridge:` before it, or `millrace run`'s wrap), so the side is said once.
type badSettings struct {
	problems []string
}

func (e *badSettings) Error() string {
	return "bad deploy settings (fix these environment variables):\n  " + strings.Join(e.problems, "\n  ")
}

func (e *badSettings) Is(target error) bool { return target == ErrSettings }

// Reader reads settings through getenv and gathers the problems of those it cannot take. Each
// typed method returns the default when the variable is unset or its value is bad (the problem
// is recorded), so that reading goes on and every problem is found in one pass. A Reader is not
// safe for concurrent use.
type Reader struct {
	getenv   func(string) string
	problems []string
}

// NewReader returns a Reader of the variables getenv returns (os.Getenv in production).
func NewReader(getenv func(string) string) *Reader { return &Reader{getenv: getenv} }

// Lookup returns name's value without surrounding whitespace, and whether that is not empty.
func (r *Reader) Lookup(name string) (string, bool) {
	s := strings.TrimSpace(r.getenv(name))
	return s, s != ""
}

// Badf records a problem; its text should name the variable and the way out.
func (r *Reader) Badf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// Problems returns the problems recorded so far, in the order they were found.
func (r *Reader) Problems() []string { return r.problems }

// Err returns an error matching ErrSettings that lists the problems, or nil when there are none.
func (r *Reader) Err() error {
	if len(r.problems) == 0 {
		return nil
	}
	return &badSettings{problems: r.problems}
}

// String returns name's value, or def when it is unset.
func (r *Reader) String(name, def string) string {
	if s, ok := r.Lookup(name); ok {
		return s
	}
	return def
}

// Port returns the TCP port in name, or def when it is unset.
func (r *Reader) Port(name string, def int) int {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	n, err := ParsePort(s)
	if err != nil {
		r.Badf("%s=%s is not a TCP port: write a whole number from 1 to 65535, e.g. %d", name, s, def)
		return def
	}
	return n
}

// Size returns the size in bytes in name, from min to max (no upper bound when max is 0), or
// def when it is unset.
func (r *Reader) Size(name string, def, min, max int64) int64 {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	n, err := parseSize(s)
	switch {
	case err == nil && n >= min && (max == 0 || n <= max):
		return n
	case max == 0:
		r.Badf("%s=%s is not a size of at least %s: write bytes or a unit, e.g. %s or %d", name, s, FormatSize(min), FormatSize(def), def)
	default:
		r.Badf("%s=%s is not a size from %s to %s: write bytes or a unit, e.g. %s or %d", name, s, FormatSize(min), FormatSize(max), FormatSize(def), def)
	}
	return def
}

// Duration returns the duration in name, at least min, or def when it is unset. A min of 0
// takes 0; any min above 0 refuses it.
func (r *Reader) Duration(name string, def, min time.Duration) time.Duration {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	d, err := ParseDuration(s)
	if err == nil && d >= min {
		return d
	}
	what := "a positive duration"
	if min == 0 {
		what = "a duration of 0 or more"
	} else if min > time.Nanosecond {
		what = "a duration of at least " + FormatDuration(min)
	}
	r.Badf("%s=%s is not %s: write a number and a unit (ms, s, m, h), e.g. %s", name, s, what, FormatDuration(def))
	return def
}

// Uint returns the whole number in name, or def when it is unset.
func (r *Reader) Uint(name string, def uint64) uint64 {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		r.Badf("%s=%s is not a whole number from 0 up: write digits only, e.g. %d", name, s, def)
		return def
	}
	return n
}

// Int returns the whole number in name, at least min, or def when it is unset.
func (r *Reader) Int(name string, def, min int) int {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min {
		r.Badf("%s=%s is not a whole number of at least %d: write digits only, e.g. %d", name, s, min, def)
		return def
	}
	return n
}

// Bool returns the boolean in name, or def when it is unset.
func (r *Reader) Bool(name string, def bool) bool {
	s, ok := r.Lookup(name)
	if !ok {
		return def
	}
	b, err := parseBool(s)
	if err != nil {
		r.Badf("%s=%s is neither true nor false", name, s)
		return def
	}
	return b
}

// ParsePort reads a TCP port: a whole number from 1 to 65535, surrounding whitespace dropped.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a TCP port: want a whole number from 1 to 65535", s)
	}
	return n, nil
}

// parseSize reads a number of bytes in the grammar of a MEMORY_SIZE config value: digits, then
// an optional k M G T P E (powers of 1000) or Ki Mi Gi Ti Pi Ei (powers of 1024), surrounding
// whitespace dropped: 67108864, 64Mi and 65536Ki are the same size.
func parseSize(s string) (int64, error) {
	v, err := protocol.ParseConfigValue(flowv1.ConfigType_MEMORY_SIZE, strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return v.(int64), nil
}

// ParseDuration reads a duration as Go's time.ParseDuration does (10s, 1m30s, 100ms),
// surrounding whitespace dropped.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: want a number and a unit (ms, s, m, h), e.g. 10s", s)
	}
	return d, nil
}

// parseBool reads true or false as strconv.ParseBool does (also 1, 0, T, F, TRUE, False …),
// surrounding whitespace dropped.
func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("%q is neither true nor false", s)
	}
	return b, nil
}

// FormatSize writes n as the tables do: with the largest binary unit that divides it (64Mi,
// 1Ki), else in bytes. Reader.Size reads it back.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"Ei", 60}, {"Pi", 50}, {"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// FormatDuration writes d as the tables do: 5m, 45s, 100ms rather than time's 5m0s.
// ParseDuration reads it back.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
