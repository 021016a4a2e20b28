package main

import (
	"strings"
	"testing"
)

// TestBounds checks each verdict of peerBounds against figures made to reach it.
func TestBounds(t *testing.T) {
	r := results{
		"Peer/p8":                   {"records/s": 50000, "gomaxprocs": 2},
		"Peer/p1":                   {"records/s": 50000, "gomaxprocs": 2},
		"Native/p8":                 {"records/s": 150000, "cpu-µs/rec": 10, "gomaxprocs": 2},
		"Native/p1":                 {"records/s": 120000, "cpu-µs/rec": 12, "gomaxprocs": 2},
		"Bare/python/lockstep":      {"records/s": 15000, "children-cpu-µs/rec": 45},
		"Bare/python/stream":        {"records/s": 70000, "children-cpu-µs/rec": 14},
		"Bare/go/stream":            {"records/s": 300000, "children-cpu-µs/rec": 2.5},
		"E2E/python/c1/lockstep/p8": {"records/s": 10000, "cpu-µs/rec": 100, "children-cpu-µs/rec": 50, "gomaxprocs": 2},
		// 1.3 × 50,000 = 65,000 records/s allow 30.8 µs: native 10 + action 22 is over it.
		"E2E/python/c1/window64/p8": {"records/s": 30000, "cpu-µs/rec": 30, "children-cpu-µs/rec": 22, "gomaxprocs": 2},
		// 2.5 × 50,000 = 125,000 records/s allow 16 µs: native 10 + action 3 leave 3.
		"E2E/go/c1/window64/p8": {"records/s": 90000, "cpu-µs/rec": 18, "children-cpu-µs/rec": 3, "gomaxprocs": 2},
	}
	var b strings.Builder
	peerBounds(&b, r)
	rows := map[string]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		for _, bd := range bounds {
			if strings.HasPrefix(l, "| "+bd.label+" |") {
				rows[bd.label] = l
			}
		}
	}
	for _, tc := range []struct{ label, want string }{
		{bounds[0].label, "**out of reach of any bridge**: the action alone, 1 process(es), does at most 15,000 records/s"},
		{bounds[1].label, "**out of reach even with a bridge that costs nothing**: the rest of the pipeline (native) and the action already spend 32.0 µs of the 30.8"},
		{bounds[3].label, "the bridge's share (pipeline − native: now 8.0 µs) down to 3.0 µs"},
		{bounds[2].label, "not measured"},
	} {
		if !strings.Contains(rows[tc.label], tc.want) {
			t.Errorf("the row of %q is\n%s\nwant it to say %q", tc.label, rows[tc.label], tc.want)
		}
	}
}
