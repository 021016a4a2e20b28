package protocol_test

import (
	"errors"
	"math"
	"testing"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

const (
	tString   = flowv1.ConfigType_STRING
	tInteger  = flowv1.ConfigType_INTEGER
	tDouble   = flowv1.ConfigType_DOUBLE
	tBoolean  = flowv1.ConfigType_BOOLEAN
	tDuration = flowv1.ConfigType_DURATION
	tMemory   = flowv1.ConfigType_MEMORY_SIZE
)

func TestParseConfigValue(t *testing.T) {
	tests := []struct {
		t    flowv1.ConfigType
		in   string
		want any // nil: refused
	}{
		{tString, "", ""},
		{tString, "héllo \"x\"", "héllo \"x\""},
		{tString, "\xff", nil},
		{tInteger, "42", int64(42)},
		{tInteger, "-0", int64(0)},
		{tInteger, "007", int64(7)},
		{tInteger, "9223372036854775807", int64(math.MaxInt64)},
		{tInteger, "-9223372036854775808", int64(math.MinInt64)},
		{tInteger, "9223372036854775808", nil},
		{tInteger, "1.0", nil},
		{tInteger, "1e3", nil},
		{tInteger, "+1", nil},
		{tInteger, " 1", nil},
		{tInteger, "0x10", nil},
		{tInteger, "1_000", nil},
		{tInteger, "", nil},
		{tDouble, "0.5", 0.5},
		{tDouble, "-3", -3.0},
		{tDouble, "1e-3", 0.001},
		{tDouble, "1E+2", 100.0},
		{tDouble, "1e-400", 0.0}, // underflows to zero: still a number
		{tDouble, "1e400", nil},
		{tDouble, "NaN", nil},
		{tDouble, "Inf", nil},
		{tDouble, ".5", nil},
		{tDouble, "1.", nil},
		{tDouble, "01", nil},
		{tDouble, "0x1p-2", nil},
		{tDouble, "+1", nil},
		{tBoolean, "true", true},
		{tBoolean, "false", false},
		{tBoolean, "True", nil},
		{tBoolean, "1", nil},
		{tBoolean, "yes", nil},
		{tDuration, "90s", "1m30s"},
		{tDuration, "1h", "1h0m0s"},
		{tDuration, "1.5ms", "1.5ms"},
		{tDuration, "0", "0s"},
		{tDuration, "-5s", "-5s"},
		{tDuration, "1d", nil},
		{tDuration, "10", nil},
		{tDuration, "3000000h", nil},
		{tMemory, "1024", int64(1024)},
		{tMemory, "0", int64(0)},
		{tMemory, "512Mi", int64(512 << 20)},
		{tMemory, "1G", int64(1e9)},
		{tMemory, "1k", int64(1000)},
		{tMemory, "7Ei", int64(7 << 60)},
		{tMemory, "8Ei", nil}, // 2^63: one past int64
		{tMemory, "9223372036854775807", int64(math.MaxInt64)},
		{tMemory, "9223372036854775808", nil},
		{tMemory, "99999999999999999999", nil},
		{tMemory, "1K", nil},
		{tMemory, "1MB", nil},
		{tMemory, "1.5Gi", nil},
		{tMemory, "-1", nil},
		{tMemory, "Mi", nil},
		{flowv1.ConfigType(6), "x", nil},
	}
	for _, tt := range tests {
		got, err := protocol.ParseConfigValue(tt.t, tt.in)
		if tt.want == nil {
			if err == nil || !errors.Is(err, protocol.ErrConfigValue) || got != nil {
				t.Errorf("ParseConfigValue(%v, %q) = %#v, %v; want an error wrapping ErrConfigValue", tt.t, tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseConfigValue(%v, %q) = %#v, %v; want %#v", tt.t, tt.in, got, err, tt.want)
		}
	}
}

func TestResolveConfig(t *testing.T) {
	params := []*flowv1.ConfigParameter{
		{Key: "name", Type: tString, DefaultValue: "x"},
		{Key: "rooms", Type: tInteger},
		{Key: "ratio", Type: tDouble, DefaultValue: "0.25"},
		{Key: "on", Type: tBoolean, DefaultValue: "false"},
		{Key: "every", Type: tDuration, DefaultValue: "90s"},
		{Key: "cache", Type: tMemory, DefaultValue: "1Ki"},
	}
	tests := []struct {
		name     string
		params   []*flowv1.ConfigParameter
		values   map[string]string
		want     string
		problems string
	}{
		{"none", nil, nil, "{}", ""},
		{"defaults and a value", params, map[string]string{"rooms": "3"},
			`{"cache":1024,"every":"1m30s","name":"x","on":false,"ratio":0.25,"rooms":3}`, ""},
		{"values override defaults", params, map[string]string{
			"rooms": "-1", "name": "", "ratio": "1e21", "on": "true", "every": "0", "cache": "2M",
		}, `{"cache":2000000,"every":"0s","name":"","on":true,"ratio":1e+21,"rooms":-1}`, ""},
		{"escaping", []*flowv1.ConfigParameter{{Key: "s"}}, map[string]string{"s": "a\"\\\n\x01é\u2028</>"},
			`{"s":"a\"\\\n\u0001é` + "\u2028" + `</>"}`, ""},
		{"every problem", append(params, &flowv1.ConfigParameter{Key: "rooms"}, &flowv1.ConfigParameter{}, &flowv1.ConfigParameter{Key: "t", Type: 9}),
			map[string]string{"ratio": "NaN", "zeta": "1", "alpha": "2"}, "",
			"config.rooms: required (INTEGER, no default) but no value was given; set it at deploy time\n" +
				`config.ratio: value "NaN" is not a DOUBLE: want a JSON number, e.g. "0.5", "-3" or "1e-3"` + "\n" +
				"config.rooms: declared twice; config keys must be unique\n" +
				"config_parameters[7]: a parameter without a key cannot be resolved; declare a key\n" +
				"config.t: unknown config type 9; want one of STRING, INTEGER, DOUBLE, BOOLEAN, DURATION, MEMORY_SIZE\n" +
				"config.alpha: a value was given but no such parameter is declared (declared: cache, every, name, on, ratio, rooms, t); remove it or fix its name\n" +
				"config.zeta: a value was given but no such parameter is declared (declared: cache, every, name, on, ratio, rooms, t); remove it or fix its name"},
		{"bad default", []*flowv1.ConfigParameter{{Key: "on", Type: tBoolean, DefaultValue: "yes"}}, nil, "",
			`config.on: default "yes" is not a BOOLEAN: want "true" or "false"`},
		{"undeclared, none declared", nil, map[string]string{"x": "1"}, "",
			"config.x: a value was given but no such parameter is declared (none is declared); remove it or fix its name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ps := protocol.ResolveConfig(tt.params, tt.values)
			if string(got) != tt.want || ps.Error() != tt.problems {
				t.Errorf("ResolveConfig(%s) = %s, %q; want %s, %q", tt.name, got, ps.Error(), tt.want, tt.problems)
			}
			if tt.problems != "" && got != nil {
				t.Errorf("ResolveConfig(%s) = %s with problems; want nil bytes", tt.name, got)
			}
		})
	}
}

func TestFormatES(t *testing.T) {
	// Checked against node's String(x) (ECMAScript Number::toString) when written; a further
	// 200,000 random doubles agreed with node at the time.
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{1, "1"},
		{-1.5, "-1.5"},
		{0.1, "0.1"},
		{100, "100"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{123456789012345680000, "123456789012345680000"},
		{1e-6, "0.000001"},
		{1e-7, "1e-7"},
		{1.5e-7, "1.5e-7"},
		{0.000001234, "0.000001234"},
		{2.5e25, "2.5e+25"},
		{9007199254740993, "9007199254740992"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{333333333.33333329, "333333333.3333333"},
	}
	for _, tt := range tests {
		if got := protocol.FormatES(tt.in); got != tt.want {
			t.Errorf("FormatES(%v) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
