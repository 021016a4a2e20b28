package main

import (
	"strings"
	"testing"
)

// TestActionTargets checks each verdict of actionTargets against figures made to reach it,
// and that the table of the rows shows the CPU of each process where it was measured.
func TestActionTargets(t *testing.T) {
	r := results{
		"Peer/p1": {"records/s": 20000, "peer-cpu-µs/rec": 30, "gomaxprocs": 2},
		"Peer/p8": {"records/s": 20000, "peer-cpu-µs/rec": 40, "gomaxprocs": 2},
		// 1.0× and 1.5× the loop: met on 1 partition (exactly), not on 8.
		"Actions/at-least-once/python-sdk/p1": {"records/s": 20000, "sidecar-cpu-µs/rec": 10, "bridge-cpu-µs/rec": 20, "child-cpu-µs/rec": 15, "cpu-µs/rec": 5, "gomaxprocs": 2},
		"Actions/at-least-once/python-sdk/p8": {"records/s": 29000, "sidecar-cpu-µs/rec": 10, "bridge-cpu-µs/rec": 20, "child-cpu-µs/rec": 20.5, "cpu-µs/rec": 5, "gomaxprocs": 2},
		"Actions/exactly-once/python-sdk/p8":  {"records/s": 14500},
		"Actions/at-least-once/go-echo/p8":    {"records/s": 50000, "sidecar-cpu-µs/rec": 10, "bridge-cpu-µs/rec": 10, "child-cpu-µs/rec": 4},
		"Actions/at-least-once/go-echo/p1":    {"records/s": 30000, "sidecar-cpu-µs/rec": 12, "bridge-cpu-µs/rec": 12, "child-cpu-µs/rec": 4},
		"Actions/at-least-once/native/p8":     {"records/s": 90000, "sidecar-cpu-µs/rec": 6, "native-cpu-µs/rec": 4},
		"Actions/at-least-once/native/p1":     {"records/s": 80000, "sidecar-cpu-µs/rec": 8, "native-cpu-µs/rec": 4},
		"Actions/at-least-once/awk/p1":        {"records/s": 5000},
	}
	var b strings.Builder
	actionTargets(&b, r)
	out := b.String()
	for _, want := range []string{
		"| Python SDK echo, 1 partition, ≥ 1.0× the loop | 1.00×; at 20,000 records/s, 2 cores leave 100.0 µs of CPU a record for all the row's processes, which spend 50.0 now (10.0 + 20.0 + 15.0, and the broker, producer and counter 5.0) | yes |",
		"| Python SDK echo, 8 partitions, ≥ 1.5× the loop | 1.45×; at 30,000 records/s, 2 cores leave 66.7 µs",
		"| **no** |\n| Node.js SDK echo, 8 partitions, ≥ 1.5× the loop | – | not measured |",
		"| go-echo, 8 partitions, ≥ 2.5× the loop | 2.50× | yes |", // no test-process figure: no budget
		"| go-echo, 1 partition, ≥ 1.8× the loop | 1.50× | **no** |",
		"| Python SDK echo's child, CPU per record ≤ 0.5× the loop process's, 1 partition | 15.0 µs against 30.0 µs: 0.50× | yes |",
		"| Python SDK echo's child, CPU per record ≤ 0.5× the loop process's, 8 partitions | 20.5 µs against 40.0 µs: 0.51× | **no** |",
		"| sidecar + bridge CPU per record with go-echo ≤ 2.0× sidecar + native streamlet, 1 partition | (12.0 + 12.0) µs against (8.0 + 4.0) µs: 2.00× | yes |",
		"| sidecar + bridge CPU per record with go-echo ≤ 2.0× sidecar + native streamlet, 8 partitions | (10.0 + 10.0) µs against (6.0 + 4.0) µs: 2.00× | yes |",
		"| raw script that declares nothing: `bench/testdata/echo.awk` no slower than before, 1 partition | 5,000 records/s (0.25× the loop) | against the run before the change |",
		"| raw script that declares nothing: `stdio/testdata/echo.py` no slower than before, 8 partitions | – records/s (– the loop) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("actionTargets wrote\n%s\nwant it to hold %q", out, want)
		}
	}

	b.Reset()
	actionRows(&b, r)
	out = b.String()
	for _, want := range []string{
		", 1 process | commit sync | 8 | 20,000 | 1.00× | – | – | 40.0 | 40.0 |",
		"| Python SDK echo (`sdk/python/examples/echo.py`), defaults | at-least-once | 8 | 29,000 | 1.45× | 10.0 | 20.0 | 20.5 | 50.5 |",
		"| sidecar + native Go streamlet, no bridge, no child (the ceiling) | at-least-once | 1 | 80,000 | 4.00× | 8.0 | – | 4.0 | 12.0 |",
		"| Python SDK echo (`sdk/python/examples/echo.py`), defaults | exactly-once (0.50× at-least-once) | 8 | 14,500 | 0.72× | – | – | – | – |",
		"| Ruby SDK echo (`sdk/ruby/examples/echo.rb`), defaults | at-least-once | 1 | – | – | – | – | – | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("actionRows wrote\n%s\nwant it to hold %q", out, want)
		}
	}
	if strings.Contains(out, "go-echo (Go SDK, `actions/go-echo`), defaults | exactly-once") {
		t.Errorf("actionRows wrote an exactly-once row the run did not measure:\n%s", out)
	}

	b.Reset()
	actionRows(&b, results{"E2E/go/c1/window64/p1": {"records/s": 1}})
	actionTargets(&b, results{"E2E/go/c1/window64/p1": {"records/s": 1}})
	if b.Len() != 0 {
		t.Errorf("with neither the loop nor the actions measured, actionRows and actionTargets wrote\n%s\nwant nothing", b.String())
	}
}
