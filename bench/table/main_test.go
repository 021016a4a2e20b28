package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := `goos: linux
BenchmarkE2E/go/c1/lockstep/p1-2         	       5	  73669407 ns/op	        26.89 cpu-µs/rec	     27452 records/s
BenchmarkLatency/go-2   	    1000	    592190 ns/op	         0.5906 p50-ms	         3.690 p99-ms
BenchmarkBare/go/stream                	       1	   5133629 ns/op	    395184 records/s
BenchmarkPeer/p8-2   	       1	   5133629 ns/op	    40000 records/s
BenchmarkPeer/p8-2   	       1	   5133629 ns/op	    50000 records/s
BenchmarkPeer/p8-2   	       1	   5133629 ns/op	    45000 records/s
--- FAIL: BenchmarkX
PASS
`
	res, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, unit string
		want       float64
	}{
		{"E2E/go/c1/lockstep/p1", "records/s", 27452},
		{"E2E/go/c1/lockstep/p1", "cpu-µs/rec", 26.89},
		{"Latency/go", "p99-ms", 3.69},
		{"Bare/go/stream", "records/s", 395184},
		{"Peer/p8", "records/s", 45000}, // the median of three runs
		{"Peer/p8", "gomaxprocs", 2},    // the name's suffix
	} {
		if got, ok := res.get(tc.name, tc.unit); !ok || got != tc.want {
			t.Errorf("parse(…).get(%q, %q) = %v, %v; want %v, true", tc.name, tc.unit, got, ok, tc.want)
		}
	}
	if len(res) != 4 {
		t.Errorf("parse(…) found %d benchmarks; want 4", len(res))
	}
}

func TestGroup(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999.6, "1,000"}, {27452, "27,452"}, {1234567, "1,234,567"}} {
		if got := group(tc.in); got != tc.want {
			t.Errorf("group(%v) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
