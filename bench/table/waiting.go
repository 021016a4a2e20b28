package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// waitingRows are BenchmarkWaiting's rows, in the order of its tables, with their labels.
var waitingRows = []struct{ name, label string }{
	{"loop-seq", "hand-written confluent-kafka loop, the calls one after another"},
	{"loop-64", "hand-written loop, each consumed batch's calls on 64 threads"},
	{"go-sdk", "Go SDK, `action.Concurrency(action.ConcurrentWindow)` (128)"},
	{"ruby-sdk", "Ruby SDK, `concurrency: Millrace::CONCURRENT_WINDOW` (128)"},
	{"python-async", "Python SDK, `async def` handler, defaults"},
	{"node-async", "Node.js SDK, `async` handler, defaults"},
	{"python-threads32", "Python SDK, blocking handler, `threads=32`"},
	{"raw-c8", "raw template (one item at a time), `--concurrency 8`"},
	{"raw-c64", "raw template (one item at a time), `--concurrency 64`"},
}

var waitingName = regexp.MustCompile(`^Waiting/call(\d+)ms/`)

// waitingCalls returns the call lengths BenchmarkWaiting ran, in milliseconds, shortest first.
func waitingCalls(r results) []int {
	var ms []int
	for name := range r {
		if m := waitingName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			if !slices.Contains(ms, n) {
				ms = append(ms, n)
			}
		}
	}
	slices.Sort(ms)
	return ms
}

// waiting prints BenchmarkWaiting's tables: for each call length and key mode, every row's
// records/s on 1 and 8 partitions, its ratio to the loop on 64 threads, and the CPU per
// record and peak RSS of each of its processes (1 partition).
func waiting(w io.Writer, r results) {
	for _, ms := range waitingCalls(r) {
		for _, keys := range []string{"keyless", "keys97"} {
			if !r.has(fmt.Sprintf("Waiting/call%dms/%s/", ms, keys)) {
				continue
			}
			what := "keyless records"
			if keys != "keyless" {
				what = "records of 97 keys"
			}
			fmt.Fprintf(w, "### Waiting steps: a call of %d ms per record, %s (records/s; CPU and peak RSS of each process on 1 partition)\n\n", ms, what)
			fmt.Fprintln(w, "| handler | 1 partition | 8 partitions | × the 64-thread loop, 1 partition | action (or loop) CPU µs / record | sidecar + bridge CPU µs / record | action (or loop) peak MiB (processes) | sidecar, bridge peak MiB |")
			fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
			for _, row := range waitingRows {
				key := func(p string) string { return fmt.Sprintf("Waiting/call%dms/%s/%s/%s", ms, keys, row.name, p) }
				loop := fmt.Sprintf("Waiting/call%dms/%s/loop-64/p1", ms, keys)
				x, _, _ := r.ratio(key("p1"), loop)
				x = strings.TrimSuffix(x, "%")
				if v, err := strconv.ParseFloat(x, 64); err == nil {
					x = fmt.Sprintf("%.2f×", v/100)
				}
				cpu, mem, side, sideMem := "–", "–", "–", "–"
				if strings.HasPrefix(row.name, "loop-") {
					cpu, mem = r.num(key("p1"), "peer-cpu-µs/rec", 1), r.num(key("p1"), "peer-peak-MiB", 1)+" (1)"
				} else {
					cpu = r.num(key("p1"), "child-cpu-µs/rec", 1)
					mem = r.num(key("p1"), "child-peak-MiB", 1) + " (" + r.num(key("p1"), "child-procs", 0) + ")"
					s, ok1 := r.get(key("p1"), "sidecar-cpu-µs/rec")
					b, ok2 := r.get(key("p1"), "bridge-cpu-µs/rec")
					if ok1 && ok2 {
						side = fmt.Sprintf("%.1f + %.1f", s, b)
					}
					sideMem = r.num(key("p1"), "sidecar-peak-MiB", 1) + ", " + r.num(key("p1"), "bridge-peak-MiB", 1)
				}
				if _, ok := r.get(key("p1"), "records/s"); !ok {
					cpu, mem, side, sideMem = "–", "–", "–", "–"
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.label, r.rate(key("p1")), r.rate(key("p8")), x, cpu, side, mem, sideMem)
			}
			fmt.Fprintln(w)
		}
	}
	waitingTargets(w, r)
}

// waitingTargets checks the waiting steps' targets against a 20 ms call on keyless records.
func waitingTargets(w io.Writer, r results) {
	if !r.has("Waiting/call20ms/keyless/") {
		return
	}
	key := func(row, p string) string { return "Waiting/call20ms/keyless/" + row + "/" + p }
	fmt.Fprintln(w, "### Targets of waiting steps (a call of 20 ms, keyless), computed from this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	loop, hasLoop := r.get(key("loop-64", "p1"), "records/s")
	for _, t := range []struct {
		row, label string
		least      float64
		timesLoop  float64 // 0: no ratio asked
	}{
		{"python-async", "Python SDK `async def`, one process", 2500, 1.1},
		{"node-async", "Node.js SDK async, one process", 2500, 1.1},
		{"go-sdk", "Go SDK concurrent, one process", 2500, 1.1},
		{"ruby-sdk", "Ruby SDK `concurrency:`, one process", 2000, 0},
		{"python-threads32", "Python SDK blocking handler, 32 threads", 1000, 0},
		{"raw-c8", "raw template, `--concurrency 8`", 300, 0},
		{"raw-c64", "raw template, `--concurrency 64`", 1600, 0},
	} {
		v, ok := r.get(key(t.row, "p1"), "records/s")
		fig, met := "–", ok && v >= t.least
		if ok {
			fig = group(v) + " records/s"
		}
		want := "≥ " + group(t.least) + " records/s"
		if t.timesLoop > 0 {
			want += fmt.Sprintf(" and ≥ %.1f× the 64-thread loop", t.timesLoop)
			if ok && hasLoop && loop > 0 {
				fig += fmt.Sprintf(", %.2f× the loop", v/loop)
			}
			met = met && hasLoop && v >= t.timesLoop*loop
		}
		fmt.Fprintf(w, "| %s, 1 partition, %s | %s | %s |\n", t.label, want, fig, verdict(met, ok && (t.timesLoop == 0 || hasLoop)))
	}
	rss, ok := r.get(key("python-async", "p1"), "child-peak-MiB")
	fig := "–"
	if ok {
		fig = fmt.Sprintf("%.1f MiB (raw template, 64 processes: %s MiB in all)", rss, r.num(key("raw-c64", "p1"), "child-peak-MiB", 1))
	}
	fmt.Fprintf(w, "| the one Python `async def` process, peak RSS ≤ 40 MiB | %s | %s |\n", fig, verdict(rss <= 40, ok))
	var slower []string
	measured := false
	for _, row := range waitingRows {
		p1, ok1 := r.get(key(row.name, "p1"), "records/s")
		p8, ok8 := r.get(key(row.name, "p8"), "records/s")
		if ok1 && ok8 {
			measured = true
			if p8 < p1 {
				slower = append(slower, row.name)
			}
		}
	}
	fig = "every row measured on both"
	if len(slower) > 0 {
		fig = "slower on 8: " + strings.Join(slower, ", ")
	}
	if !measured {
		fig = "–"
	}
	fmt.Fprintf(w, "| 8 partitions: every row at least its 1-partition figure | %s | %s |\n", fig, verdict(len(slower) == 0, measured))
	fmt.Fprintln(w)
}
