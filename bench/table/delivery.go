package main

import (
	"fmt"
	"io"
)

// delivery writes the table of BenchmarkDelivery: throughput and quiet-stream latency at
// at-least-once and exactly-once, on 1 and 8 partitions, with exactly-once's ratio to
// at-least-once. It writes nothing when the run has no such rows.
func delivery(w io.Writer, r results) {
	if _, ok := r.get("Delivery/at-least-once/go/flow/p1", "records/s"); !ok {
		if _, ok := r.get("Delivery/exactly-once/go/flow/p1", "records/s"); !ok {
			return
		}
	}
	fmt.Fprintln(w, "### Exactly once: its cost (FLOW_DELIVERY; the outlet read as read_committed)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streamlet | partitions | at-least-once records/s | exactly-once records/s | ratio | at-least-once quiet p50 / p99 ms | exactly-once quiet p50 / p99 ms |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range []string{"go", "native"} {
		for _, p := range []int{1, 8} {
			flow := func(d string) string { return fmt.Sprintf("Delivery/%s/%s/flow/p%d", d, s, p) }
			quiet := func(d string) string {
				k := fmt.Sprintf("Delivery/%s/%s/quiet/p%d", d, s, p)
				return r.num(k, "p50-ms", 2) + " / " + r.num(k, "p99-ms", 2)
			}
			ratio, _, _ := r.ratio(flow("exactly-once"), flow("at-least-once"))
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n",
				map[string]string{"go": "Go echo (bridge, 1 process, window 64)", "native": "native Go streamlet"}[s], p,
				r.rate(flow("at-least-once")), r.rate(flow("exactly-once")), ratio, quiet("at-least-once"), quiet("exactly-once"))
		}
	}
	fmt.Fprintln(w)
}
