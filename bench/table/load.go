package main

import (
	"fmt"
	"io"
)

// loadRows writes the table of BenchmarkLoadLatency: each row's end-to-end latency at a
// steady offered rate (half its peak, unless BENCH_LOAD_RATE set it), 8 partitions, the p99
// of its two parts (before and after the output's produce call), the CPU a record of the
// row's own processes and the cores all the processes kept busy, with the targets of latency
// under load checked: at least once, millrace's p99 within 1.5 times the loop's; exactly
// once, within the commit interval (FLOW_COMMIT_INTERVAL, 100 ms by default) plus 50 ms. Each
// figure is the median of the runs. It writes nothing when the run has no such rows.
func loadRows(w io.Writer, r results) {
	if !r.has("LoadLatency/") {
		return
	}
	fmt.Fprintln(w, "### Latency under load (produce → output read by a read_committed consumer; a steady rate of half the row's peak, 8 partitions, 1,000 keys; median of the runs)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| row | delivery | peak records/s | offered records/s | p50 ms | p99 ms | p99.9 ms | max ms | p99 before / after the output's produce, ms | CPU µs a record (its processes) | cores busy | target | |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
	loop, hasLoop := r.get("LoadLatency/at-least-once/loop/p8", "p99-ms")
	for _, d := range []string{"at-least-once", "exactly-once"} {
		for _, row := range []struct{ key, label string }{
			{"loop", "the hand-written loop (bench/peer/loop.py)"},
			{"python-sdk", "Python SDK echo"},
			{"node-sdk", "Node.js SDK echo"},
			{"go-echo", "go-echo (Go SDK)"},
			{"statecount", "`bench/statecount`: go-echo + a count per key"},
			{"native", "native Go streamlet, no bridge (the ceiling)"},
		} {
			k := fmt.Sprintf("LoadLatency/%s/%s/p8", d, row.key)
			p99, ok := r.get(k, "p99-ms")
			if !ok {
				continue
			}
			target, verdict := "–", ""
			switch {
			case row.key == "loop":
			case d == "at-least-once" && hasLoop:
				target = fmt.Sprintf("p99 ≤ 1.5 × the loop's (%.0f ms)", 1.5*loop)
				verdict = met(p99 <= 1.5*loop)
			case d == "exactly-once":
				target = "p99 ≤ commit interval + 50 ms (150 ms)"
				verdict = met(p99 <= 150)
			}
			p99s := r.num(k, "p99-ms", 1)
			if d == "at-least-once" && hasLoop && row.key != "loop" && loop > 0 {
				p99s += fmt.Sprintf(" (%.2f×)", p99/loop)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n", row.label, d,
				r.count(k, "peak-rec/s"), r.count(k, "offered-rec/s"), r.num(k, "p50-ms", 1), p99s,
				r.num(k, "p99.9-ms", 1), r.num(k, "max-ms", 1),
				r.num(k, "p99-before-produce-ms", 1), r.num(k, "p99-after-produce-ms", 1),
				r.num(k, "cpu-µs/rec", 1), r.num(k, "busy-cores", 2), target, verdict)
		}
	}
	fmt.Fprintln(w)
}

// met is a target's verdict.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
