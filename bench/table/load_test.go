package main

import (
	"strings"
	"testing"
)

// TestLoadRows: each measured row is written with its figures (the median of its runs) and
// its target's verdict, the loop's p99 the bar of the at-least-once rows; rows not measured
// are left out, and so are figures a run did not report.
func TestLoadRows(t *testing.T) {
	out := `BenchmarkLoadLatency/at-least-once/loop/p8-2   1	5821441929 ns/op	 898.4 max-ms	 30563 offered-rec/s	 319.0 p50-ms	 100.0 p99-ms	 894.7 p99.9-ms	 61126 peak-rec/s
BenchmarkLoadLatency/at-least-once/go-echo/p8-2   1	5002082925 ns/op	 486.3 max-ms	 13891 offered-rec/s	 2.561 p50-ms	 149.0 p99-ms	 444.6 p99.9-ms	 27783 peak-rec/s
BenchmarkLoadLatency/exactly-once/statecount/p8-2 1	5174551256 ns/op	 422.1 max-ms	 12116 offered-rec/s	 92.29 p50-ms	 317.7 p99-ms	 366.8 p99.9-ms	 24232 peak-rec/s
BenchmarkLoadLatency/at-least-once/python-sdk/p8-2 1	10004136281 ns/op	 1.2 busy-cores	 20.0 cpu-µs/rec	 19.90 max-ms	 20000 offered-rec/s	 1.0 p50-after-produce-ms	 1.5 p50-before-produce-ms	 1.774 p50-ms	 3.0 p99-after-produce-ms	 9.0 p99-before-produce-ms	 12.0 p99-ms	 15.40 p99.9-ms	 40000 peak-rec/s
BenchmarkLoadLatency/at-least-once/python-sdk/p8-2 1	10004136281 ns/op	 1.4 busy-cores	 22.0 cpu-µs/rec	 29.90 max-ms	 20000 offered-rec/s	 1.0 p50-after-produce-ms	 1.5 p50-before-produce-ms	 1.774 p50-ms	 5.0 p99-after-produce-ms	 11.0 p99-before-produce-ms	 14.0 p99-ms	 15.40 p99.9-ms	 40000 peak-rec/s
BenchmarkLoadLatency/at-least-once/python-sdk/p8-2 1	10004136281 ns/op	 1.3 busy-cores	 30.0 cpu-µs/rec	 99.90 max-ms	 20000 offered-rec/s	 1.0 p50-after-produce-ms	 1.5 p50-before-produce-ms	 1.774 p50-ms	 4.0 p99-after-produce-ms	 10.0 p99-before-produce-ms	 400.0 p99-ms	 15.40 p99.9-ms	 40000 peak-rec/s
`
	res, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	loadRows(&b, res)
	got := b.String()
	for _, want := range []string{
		"| the hand-written loop (bench/peer/loop.py) | at-least-once | 61,126 | 30,563 | 319.0 | 100.0 | 894.7 | 898.4 | – / – | – | – | – |  |",
		"| go-echo (Go SDK) | at-least-once | 27,783 | 13,891 | 2.6 | 149.0 (1.49×) | 444.6 | 486.3 | – / – | – | – | p99 ≤ 1.5 × the loop's (150 ms) | met |",
		"| Python SDK echo | at-least-once | 40,000 | 20,000 | 1.8 | 14.0 (0.14×) | 15.4 | 29.9 | 10.0 / 4.0 | 22.0 | 1.30 | p99 ≤ 1.5 × the loop's (150 ms) | met |",
		"| `bench/statecount`: go-echo + a count per key | exactly-once | 24,232 | 12,116 | 92.3 | 317.7 | 366.8 | 422.1 | – / – | – | – | p99 ≤ commit interval + 50 ms (150 ms) | not met |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("loadRows wrote\n%s\nwant a line %q", got, want)
		}
	}
	if strings.Contains(got, "Node.js") {
		t.Errorf("loadRows wrote a row not measured:\n%s", got)
	}
}
