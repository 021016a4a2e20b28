package main

import (
	"strings"
	"testing"
)

// TestWaiting: the waiting tables show each row side by side, "–" for a row not measured, and
// the targets judged from the figures.
func TestWaiting(t *testing.T) {
	out := `BenchmarkWaiting/call20ms/keyless/loop-64/p1-2  1  1 ns/op  66.7 peer-cpu-µs/rec  31.4 peer-peak-MiB  2240 records/s
BenchmarkWaiting/call20ms/keyless/loop-64/p8-2  1  1 ns/op  2300 records/s
BenchmarkWaiting/call20ms/keyless/go-sdk/p1-2  1  1 ns/op  16.7 bridge-cpu-µs/rec  30.4 bridge-peak-MiB  16.7 child-cpu-µs/rec  9.6 child-peak-MiB  1 child-procs  4107 records/s  16.7 sidecar-cpu-µs/rec  32.3 sidecar-peak-MiB
BenchmarkWaiting/call20ms/keyless/go-sdk/p8-2  1  1 ns/op  4000 records/s
BenchmarkWaiting/call20ms/keyless/raw-c8/p1-2  1  1 ns/op  355 records/s  107.7 child-peak-MiB  8 child-procs
BenchmarkWaiting/call200ms/keys97/ruby-sdk/p1-2  1  1 ns/op  500 records/s
`
	res, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	waiting(&b, res)
	got := b.String()
	for _, want := range []string{
		"### Waiting steps: a call of 20 ms per record, keyless records",
		"| hand-written loop, each consumed batch's calls on 64 threads | 2,240 | 2,300 | 1.00× | 66.7 | – | 31.4 (1) | – |",
		"| Go SDK, `action.Concurrency(action.ConcurrentWindow)` (128) | 4,107 | 4,000 | 1.83× | 16.7 | 16.7 + 16.7 | 9.6 (1) | 32.3, 30.4 |",
		"| Python SDK, `async def` handler, defaults | – | – | – | – | – | – | – |",
		"### Waiting steps: a call of 200 ms per record, records of 97 keys",
		"| Go SDK concurrent, one process, 1 partition, ≥ 2,500 records/s and ≥ 1.1× the 64-thread loop | 4,107 records/s, 1.83× the loop | yes |",
		"| Python SDK `async def`, one process, 1 partition, ≥ 2,500 records/s and ≥ 1.1× the 64-thread loop | – | not measured |",
		"| raw template, `--concurrency 8`, 1 partition, ≥ 300 records/s | 355 records/s | yes |",
		"| 8 partitions: every row at least its 1-partition figure | slower on 8: go-sdk | **no** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("waiting(…) printed\n%s\nwithout the line\n%s", got, want)
		}
	}
	if strings.Index(got, "call of 20 ms") > strings.Index(got, "call of 200 ms") {
		t.Errorf("waiting(…) printed the 200 ms table before the 20 ms one:\n%s", got)
	}
}
