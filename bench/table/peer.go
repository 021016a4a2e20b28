package main

import (
	"fmt"
	"io"
)

// peerRows are the in-process rows (BenchmarkE2E, BenchmarkNative) set against the
// hand-written loop.
var peerRows = []struct{ key, label string }{
	{"E2E/python/c1/lockstep", "millrace, Python echo, defaults: 1 process, one delivery at a time"},
	{"E2E/python/c1/window64", "millrace, Python echo, `--window 64`, 1 process"},
	{"E2E/python/c2/window64", "millrace, Python echo, `--window 64`, 2 processes"},
	{"E2E/go/c1/window64", "millrace, go-echo (SDK, window 64), 1 process"},
	{"Native", "millrace sidecar + a native Go streamlet (no child)"},
}

// times formats a/b as a ratio ("1.23×"), or "–".
func (r results) times(a, b string) (string, float64, bool) {
	x, ok1 := r.get(a, "records/s")
	y, ok2 := r.get(b, "records/s")
	if !ok1 || !ok2 || y == 0 {
		return "–", 0, false
	}
	return fmt.Sprintf("%.2f×", x/y), x / y, true
}

// peer prints the hand-written loop beside millrace's in-process rows, each with its ratio to
// the loop on as many partitions. It writes nothing when the run has no such rows.
func peer(w io.Writer, r results) {
	if !r.has("E2E/") {
		return
	}
	fmt.Fprintln(w, "### In process, against the hand-written loop (sidecar and bridge in the test process; records/s, median of the runs; same broker, same records, in the same run)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | 1 partition | ÷ loop | 8 partitions | ÷ loop |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| hand-written confluent-kafka loop (bench/peer/loop.py: consume 100 → `json.loads`/`dumps` each → produce → flush → commit sync), 1 process | %s | 1.00× | %s | 1.00× |\n",
		r.rate("Peer/p1"), r.rate("Peer/p8"))
	for _, row := range peerRows {
		x1, _, _ := r.times(row.key+"/p1", "Peer/p1")
		x8, _, _ := r.times(row.key+"/p8", "Peer/p8")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", row.label, r.rate(row.key+"/p1"), x1, r.rate(row.key+"/p8"), x8)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The loop's own process: %s µs of CPU per record and %s MiB peak RSS on 8 partitions (%s µs, %s MiB on 1).\n",
		r.num("Peer/p8", "peer-cpu-µs/rec", 1), r.num("Peer/p8", "peer-peak-MiB", 1), r.num("Peer/p1", "peer-cpu-µs/rec", 1), r.num("Peer/p1", "peer-peak-MiB", 1))
	fmt.Fprintln(w)
}

// gap prints the batch boundary: the child's idle periods (BenchmarkGap).
func gap(w io.Writer, r results) {
	if !r.has("Gap/") {
		return
	}
	fmt.Fprintln(w, "### The batch boundary (deployed shape, gapecho action: 1 process, window 64; the child's waits for input with nothing left to answer)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| partitions | records/s | idle periods per 100 records | idle p50 µs | idle p90 µs | child idle µs per record | sidecar CPU µs/record | bridge CPU µs/record |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range []string{"1", "8"} {
		k := "Gap/p" + p
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p, r.rate(k), r.num(k, "idles/100rec", 2),
			r.num(k, "idle-p50-µs", 0), r.num(k, "idle-p90-µs", 0), r.num(k, "idle-µs/rec", 1),
			r.num(k, "sidecar-cpu-µs/rec", 1), r.num(k, "bridge-cpu-µs/rec", 1))
	}
	fmt.Fprintln(w)
}
