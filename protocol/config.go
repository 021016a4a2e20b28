package protocol

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

var (
	integerPattern = regexp.MustCompile(`^-?[0-9]+$`)
	// doublePattern is the number grammar of JSON (RFC 8259, section 6).
	doublePattern = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)
	memoryPattern = regexp.MustCompile(`^([0-9]+)(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)
)

// memoryUnits are the memory-size suffixes: decimal powers of 1000, binary powers of 1024.
var memoryUnits = map[string]uint64{
	"":  1,
	"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// ParseConfigValue parses s, a value written for a parameter of type t (a default value or a
// deploy-time value), into its value in config_json (DESCRIPTOR.md, "Config values"):
//
//	STRING       s itself, valid UTF-8                           string
//	INTEGER      -?[0-9]+ within int64                           int64
//	DOUBLE       a JSON number, finite as a float64              float64
//	BOOLEAN      exactly "true" or "false"                       bool
//	DURATION     Go's time.ParseDuration, e.g. "90s", "1h30m"    string, time.Duration.String(): "1m30s"
//	MEMORY_SIZE  digits and an optional unit, k M G T P E          int64, a number of bytes
//	             (powers of 1000) or Ki Mi Gi Ti Pi Ei (powers of
//	             1024), within int64
//
// A string that is not a value of t, or an unknown t, gives an error wrapping ErrConfigValue
// that says what was expected.
func ParseConfigValue(t flowv1.ConfigType, s string) (any, error) {
	v, ok := parseConfigValue(t, s)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrConfigValue, valueMessage(t, s))
	}
	return v, nil
}

func parseConfigValue(t flowv1.ConfigType, s string) (any, bool) {
	switch t {
	case flowv1.ConfigType_STRING:
		return s, utf8.ValidString(s)
	case flowv1.ConfigType_INTEGER:
		if !integerPattern.MatchString(s) {
			return nil, false
		}
		i, err := strconv.ParseInt(s, 10, 64)
		return i, err == nil
	case flowv1.ConfigType_DOUBLE:
		if !doublePattern.MatchString(s) {
			return nil, false
		}
		f, err := strconv.ParseFloat(s, 64)
		// An underflow to zero is a value; an overflow to ±Inf is not.
		if err != nil && !(errors.Is(err, strconv.ErrRange) && !math.IsInf(f, 0)) {
			return nil, false
		}
		return f, true
	case flowv1.ConfigType_BOOLEAN:
		switch s {
		case "true":
			return true, true
		case "false":
			return false, true
		}
		return nil, false
	case flowv1.ConfigType_DURATION:
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, false
		}
		return d.String(), true
	case flowv1.ConfigType_MEMORY_SIZE:
		m := memoryPattern.FindStringSubmatch(s)
		if m == nil {
			return nil, false
		}
		n, err := strconv.ParseUint(m[1], 10, 64)
		unit := memoryUnits[m[2]]
		if err != nil || n > math.MaxInt64/unit {
			return nil, false
		}
		return int64(n * unit), true
	}
	return nil, false
}

// valueMessage says why s is not a value of type t, and what is expected.
func valueMessage(t flowv1.ConfigType, s string) string {
	switch t {
	case flowv1.ConfigType_INTEGER:
		if integerPattern.MatchString(s) {
			return fmt.Sprintf("%q is out of the range of an INTEGER (a signed 64-bit integer, %d to %d)", s, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return fmt.Sprintf("%q is not an INTEGER: want decimal digits with an optional leading '-', e.g. \"42\"", s)
	case flowv1.ConfigType_DOUBLE:
		if doublePattern.MatchString(s) {
			return fmt.Sprintf("%q is out of the range of a DOUBLE (a 64-bit float)", s)
		}
		return fmt.Sprintf("%q is not a DOUBLE: want a JSON number, e.g. \"0.5\", \"-3\" or \"1e-3\"", s)
	case flowv1.ConfigType_BOOLEAN:
		return fmt.Sprintf("%q is not a BOOLEAN: want \"true\" or \"false\"", s)
	case flowv1.ConfigType_DURATION:
		return fmt.Sprintf("%q is not a DURATION: want a number and a unit (ns, us, ms, s, m, h), e.g. \"90s\" or \"1h30m\"", s)
	case flowv1.ConfigType_MEMORY_SIZE:
		if memoryPattern.MatchString(s) {
			return fmt.Sprintf("%q is out of the range of a MEMORY_SIZE (at most %d bytes)", s, int64(math.MaxInt64))
		}
		return fmt.Sprintf("%q is not a MEMORY_SIZE: want a whole number of bytes with an optional unit, k M G T P E (powers of 1000) or Ki Mi Gi Ti Pi Ei (powers of 1024), e.g. \"512Mi\"", s)
	case flowv1.ConfigType_STRING:
		return fmt.Sprintf("%q is not a STRING: it is not valid UTF-8 text", s)
	}
	return fmt.Sprintf("unknown config type %d; want one of %s", int32(t), configTypeNames())
}

// ResolveConfig returns config_json, the config that Start carries: one JSON object with a
// member for every declared parameter, holding its deploy-time value from values if given,
// else its default, each in the JSON form of its type (ParseConfigValue), serialised per
// RFC 8785 (keys sorted, no whitespace, no trailing newline). With no parameter it is "{}".
//
// It reports every problem at once and then returns nil bytes: a required parameter (no
// default) without a value, a value or default that is not of its type, a value for a key
// that is not declared, and a parameter declared twice or with an unknown type. Paths are
// "config.KEY", or "config_parameters[i]" for an entry with no key (DESCRIPTOR.md, "Config
// resolution"). Problems are in declaration order, then undeclared keys in sorted order.
func ResolveConfig(params []*flowv1.ConfigParameter, values map[string]string) ([]byte, Problems) {
	var ps Problems
	out := jsonObject{}
	declared := make([]string, 0, len(params))
	for i, p := range params {
		k := p.GetKey()
		if k == "" {
			ps.add(fmt.Sprintf("config_parameters[%d]", i), "a parameter without a key cannot be resolved; declare a key")
			continue
		}
		at := "config." + k
		if slices.Contains(declared, k) {
			ps.add(at, "declared twice; config keys must be unique")
			continue
		}
		declared = append(declared, k)
		t := p.GetType()
		if _, known := flowv1.ConfigType_name[int32(t)]; !known {
			ps.add(at, valueMessage(t, ""))
			continue
		}
		s, given := values[k]
		source := "value"
		if !given {
			if p.GetDefaultValue() == "" {
				ps.add(at, fmt.Sprintf("required (%s, no default) but no value was given; set it at deploy time", t))
				continue
			}
			s, source = p.GetDefaultValue(), "default"
		}
		v, ok := parseConfigValue(t, s)
		if !ok {
			ps.add(at, source+" "+valueMessage(t, s))
			continue
		}
		out[k] = configJSON(v)
	}
	var undeclared []string
	for k := range values {
		if !slices.Contains(declared, k) {
			undeclared = append(undeclared, k)
		}
	}
	slices.Sort(undeclared)
	for _, k := range undeclared {
		known := "none is declared"
		if len(declared) > 0 {
			sorted := slices.Sorted(slices.Values(declared))
			known = "declared: " + strings.Join(sorted, ", ")
		}
		ps.add("config."+k, fmt.Sprintf("a value was given but no such parameter is declared (%s); remove it or fix its name", known))
	}
	if len(ps) > 0 {
		return nil, ps
	}
	b, err := canonical(out)
	if err != nil {
		ps.add("config", err.Error()) // a string value or key that is not valid UTF-8
		return nil, ps
	}
	return b, nil
}

// configJSON maps a value of ParseConfigValue to its JSON value.
func configJSON(v any) jsonValue {
	switch v := v.(type) {
	case string:
		return jsonString(v)
	case int64:
		return jsonInt(v)
	case float64:
		return jsonNumber(v)
	case bool:
		return jsonBool(v)
	}
	panic(fmt.Sprintf("protocol: configJSON: unexpected %T", v)) // parseConfigValue returns only these
}
