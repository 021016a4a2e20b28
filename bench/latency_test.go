package bench_test

import (
	"testing"
)

// BenchmarkLatency measures the latency of a quiet stream: one record at a time (each
// iteration produces one 200-byte record and waits until it is visible on the outlet), from
// the call to produce until the outlet's consumer has it, through the in-process broker,
// sidecar, bridge and echo action (one process, one delivery at a time, one partition), and
// through the native Go streamlet for comparison. It reports p50 and p99 in ms; run it with
// -benchtime 1000x for the figure of BENCHMARKS.md.
func BenchmarkLatency(b *testing.B) {
	type streamlet struct {
		name   string
		argv   []string // nil: the native streamlet
		window int
	}
	var ss []streamlet
	for _, c := range children(b) {
		ss = append(ss, streamlet{c.name, c.argv, 1})
	}
	ss = append(ss, streamlet{name: "native"})
	for _, s := range ss {
		b.Run(s.name, func(b *testing.B) {
			br := newBroker(b)
			var p *pipeline
			if s.argv == nil {
				a := parseAction(b, actionLine([]string{"native"}, 1, 1))
				p = startPipeline(b, br, a, 1, batchLimits{}, serveNative(a))
			} else {
				a := parseAction(b, actionLine(s.argv, 1, s.window))
				p = startPipeline(b, br, a, 1, batchLimits{}, serveBridge(b, a))
			}
			quiet(b, br, p, 1)
		})
	}
}
