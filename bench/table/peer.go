package main

import (
	"fmt"
	"io"
	"strings"
)

// peerRows are the millrace rows set against the hand-written loop: issue 15's table.
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

// peer prints the hand-written loop beside millrace's rows, each with its ratio to the loop
// on as many partitions.
func peer(w io.Writer, r results) {
	fmt.Fprintln(w, "### Against the hand-written loop (records/s, median of the runs; same broker, same records, in the same run)")
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

// peerTargets checks issue 15's targets: ratios to the loop in the same run, CPU per record
// in the deployed shape, and peak memory against the loop's.
func peerTargets(w io.Writer, r results) {
	fmt.Fprintln(w, "### Targets of issue 15, computed from this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	ratio := func(label, key, peer string, want float64) {
		s, x, ok := r.times(key, peer)
		fmt.Fprintf(w, "| %s ≥ %.1f× the loop | %s | %s |\n", label, want, s, verdict(x >= want, ok))
	}
	ratio("Python echo, one delivery at a time, 8 partitions,", "E2E/python/c1/lockstep/p8", "Peer/p8", 0.5)
	ratio("Python echo, `--window 64`, 1 process, 8 partitions,", "E2E/python/c1/window64/p8", "Peer/p8", 1.3)
	ratio("Python echo, `--window 64`, 2 processes, 8 partitions,", "E2E/python/c2/window64/p8", "Peer/p8", 1.8)
	ratio("go-echo at its defaults (window 64, 1 process), 8 partitions,", "E2E/go/c1/window64/p8", "Peer/p8", 2.5)
	ratio("Python echo, `--window 64`, 1 process, 1 partition,", "E2E/python/c1/window64/p1", "Peer/p1", 0.8)
	for _, p := range []string{"p1", "p8"} {
		s, x, ok := r.ratio("E2E/go/c1/window64/"+p, "Native/"+p)
		fmt.Fprintf(w, "| go-echo at least 75%% of the native streamlet end to end, %s partition(s) | %s | %s |\n", strings.TrimPrefix(p, "p"), s, verdict(x >= 0.75, ok))
	}
	const procs = "Procs/go/c2/window64/p8"
	for _, c := range []struct {
		side string
		max  float64
	}{{"sidecar", 4}, {"bridge", 3.5}} {
		v, ok := r.get(procs, c.side+"-cpu-µs/rec")
		fmt.Fprintf(w, "| %s CPU per record ≤ %.1f µs (deployed shape, go echo, window 64, 8 partitions) | %.1f µs | %s |\n", c.side, c.max, v, verdict(v <= c.max, ok))
	}
	s, ok1 := r.get(procs, "sidecar-peak-MiB")
	b, ok2 := r.get(procs, "bridge-peak-MiB")
	l, ok3 := r.get("Peer/p8", "peer-peak-MiB")
	fmt.Fprintf(w, "| peak RSS of sidecar + bridge no higher than the loop's, 8 partitions, default batches | %.1f + %.1f = %.1f MiB against %.1f MiB | %s |\n",
		s, b, s+b, l, verdict(s+b <= l, ok1 && ok2 && ok3))
	fmt.Fprintln(w)
}
