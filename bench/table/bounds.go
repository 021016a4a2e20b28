package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// bound is one of issue 15's throughput targets, with the rows that bound it.
type bound struct {
	label string
	row   string  // the millrace row the target is about
	of    string  // what the target is a ratio of: the loop, or the native streamlet
	want  float64 // the ratio
	bare  string  // the child-alone row (BenchmarkBare) of the row's action
	procs int     // the action's processes in the row
}

var bounds = []bound{
	{"Python echo, one delivery at a time, 8 partitions, ≥ 0.5× the loop", "E2E/python/c1/lockstep/p8", "Peer/p8", 0.5, "Bare/python/lockstep", 1},
	{"Python echo, `--window 64`, 1 process, 8 partitions, ≥ 1.3× the loop", "E2E/python/c1/window64/p8", "Peer/p8", 1.3, "Bare/python/stream", 1},
	{"Python echo, `--window 64`, 2 processes, 8 partitions, ≥ 1.8× the loop", "E2E/python/c2/window64/p8", "Peer/p8", 1.8, "Bare/python/stream", 2},
	{"go-echo (window 64, 1 process), 8 partitions, ≥ 2.5× the loop", "E2E/go/c1/window64/p8", "Peer/p8", 2.5, "Bare/go/stream", 1},
	{"Python echo, `--window 64`, 1 process, 1 partition, ≥ 0.8× the loop", "E2E/python/c1/window64/p1", "Peer/p1", 0.8, "Bare/python/stream", 1},
	{"go-echo ≥ 75% of the native streamlet, 1 partition", "E2E/go/c1/window64/p1", "Native/p1", 0.75, "Bare/go/stream", 1},
	{"go-echo ≥ 75% of the native streamlet, 8 partitions", "E2E/go/c1/window64/p8", "Native/p8", 0.75, "Bare/go/stream", 1},
}

// peerBounds prints, for each throughput target of issue 15, what the machine allows: the
// rate the target needs, the CPU per record all processes together may spend at that rate on
// the run's cores, what the row spends now (the test process: broker, sidecar, bridge, the
// benchmark's producer and counter; plus the action's processes), what the same pipeline
// spends with a native streamlet in place of the bridge and its action, and the action alone
// (the bare pipe loop). From these it says whether the target is within reach and of what.
func peerBounds(w io.Writer, r results) {
	fmt.Fprintln(w, "### What bounds each throughput target (CPU per record, µs, all processes of the row; from this run)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The cores are shared by every process of a row, so a rate of R records/s on C cores leaves at most C ÷ R of CPU per record for all of them together. *Pipeline* is the test process (broker, sidecar, bridge, the benchmark's producer and counter), *action* the action's processes (children-cpu-µs/rec), *native* the pipeline with a native Go streamlet in place of the bridge and its action, *alone* the action fed by a loop that does nothing else (BenchmarkBare).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | needs records/s | CPU allowed per record | now: pipeline + action = total | native | the action alone: records/s (÷ loop), CPU | what it takes |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, b := range bounds {
		parts := b.row[strings.LastIndexByte(b.row, '/')+1:] // "p1" or "p8"
		base, ok1 := r.get(b.of, "records/s")
		cores, ok2 := r.get(b.row, "gomaxprocs")
		pipe, ok3 := r.get(b.row, "cpu-µs/rec")
		action, ok4 := r.get(b.row, "children-cpu-µs/rec")
		native, ok5 := r.get("Native/"+parts, "cpu-µs/rec")
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || base == 0 {
			fmt.Fprintf(w, "| %s | – | – | – | – | – | not measured |\n", b.label)
			continue
		}
		need := b.want * base
		allowed := cores * 1e6 / need
		alone, verdict := "–", ""
		rate, haveRate := r.get(b.bare, "records/s")
		cpu, haveCPU := r.get(b.bare, "children-cpu-µs/rec")
		loop, haveLoop := r.get("Peer/"+parts, "records/s")
		if haveRate && haveCPU && haveLoop && loop > 0 {
			alone = fmt.Sprintf("%s (%.2f×), %.1f", group(rate), rate/loop, cpu)
			// The action's ceiling: its processes at the bare rate each, within the cores.
			if ceiling := math.Min(float64(b.procs)*rate, cores*1e6/cpu); ceiling < need {
				verdict = fmt.Sprintf("**out of reach of any bridge**: the action alone, %d process(es), does at most %s records/s here", b.procs, group(ceiling))
			}
		}
		switch left := allowed - native - action; {
		case verdict != "":
		case left <= 0:
			verdict = fmt.Sprintf("**out of reach even with a bridge that costs nothing**: the rest of the pipeline (native) and the action already spend %.1f µs of the %.1f", native+action, allowed)
		default:
			verdict = fmt.Sprintf("the bridge's share (pipeline − native: now %.1f µs) down to %.1f µs, the action's staying as now", pipe-native, left)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.1f + %.1f = %.1f | %.1f | %s | %s |\n",
			b.label, group(need), allowed, pipe, action, pipe+action, native, alone, verdict)
	}
	fmt.Fprintln(w)
}
