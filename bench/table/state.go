package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// stateActions are BenchmarkState's actions, each a stateless echo and the same echo with a
// running count per key, with their labels.
var stateActions = []struct{ name, stateless, stateful string }{
	{"go", "go-echo (Go SDK)", "`bench/statecount`: go-echo + a count per key (Go SDK)"},
	{"python-sdk", "Python SDK echo", "`bench/testdata/count.py`: the Python SDK echo + a count per key"},
}

// stateRows writes the table of BenchmarkState: for each action, delivery mode and partition
// count, the stateless echo's row and the stateful one's, its records/s as a ratio to the
// stateless row's and the CPU per record it adds, all processes of the row together. It
// writes nothing when the run has no such rows.
func stateRows(w io.Writer, r results) {
	if !r.has("State/") {
		return
	}
	keys := "–"
	for name := range r {
		if v, ok := r.get(name, "keys"); ok && strings.HasPrefix(name, "State/") {
			keys = group(v)
			break
		}
	}
	fmt.Fprintln(w, "### State per key: what it costs a record (deployed shape; records/s, median of the runs; CPU µs per record of each process, in the same run)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Each action at its defaults (one process, what it declares in ready) on the same 200-byte JSON records, keyed over %s distinct keys (a key's records on one partition). *Stateful* is the same echo with `--state in` on its line, reading, counting and staging its key's state `{\"n\": N}` for every record; its sidecar writes them to a compacted changelog of the inlet's partitions, where after the runs each key's last state is checked against its records. CPU as in the actions' table; *+ sum* is the CPU a record the stateful row spends beyond the stateless one.\n", keys)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| action | delivery | partitions | records/s | ÷ stateless | sidecar | bridge | action | sum | + sum |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, d := range deliveries {
		for _, a := range stateActions {
			for _, p := range []string{"p1", "p8"} {
				base := "State/" + d + "/" + a.name + "/stateless/" + p
				key := "State/" + d + "/" + a.name + "/stateful/" + p
				if _, ok := r[base]; !ok {
					if _, ok := r[key]; !ok {
						continue
					}
				}
				b := r.cpu(base)
				bsum, bok := b.sidecar+b.bridge+b.action, b.hasSidecar && b.hasBridge && b.hasAct
				one := "–"
				if _, ok := r.get(base, "records/s"); ok {
					one = "1.00×"
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | – |\n", a.stateless, d, strings.TrimPrefix(p, "p"), r.rate(base), one,
					cell(b.sidecar, b.hasSidecar), cell(b.bridge, b.hasBridge), cell(b.action, b.hasAct), cell(bsum, bok))
				x, _, _ := r.times(key, base)
				c := r.cpu(key)
				sum, ok := c.sidecar+c.bridge+c.action, c.hasSidecar && c.hasBridge && c.hasAct
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a.stateful, d, strings.TrimPrefix(p, "p"), r.rate(key), x,
					cell(c.sidecar, c.hasSidecar), cell(c.bridge, c.hasBridge), cell(c.action, c.hasAct), cell(sum, ok), signed(sum-bsum, ok && bok))
			}
		}
	}
	fmt.Fprintln(w)
}

// signed formats v with one decimal and its sign, or "–" when not measured.
func signed(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%+.1f", v)
}

// restoreName matches BenchmarkStateRestore's rows as scripts/bench names them: the broker
// (none: kfake in the benchmark's process), the case and the keys.
var restoreName = regexp.MustCompile(`^StateRestore/(?:(kafka)/)?(full|catch-up)/keys=(\d+)$`)

// restoreRows writes the table of BenchmarkStateRestore (sidecar/internal/state): each case's
// time, rate, file size and heap growth, by broker and keys. It writes nothing when the run
// has no such rows.
func restoreRows(w io.Writer, r results) {
	type row struct {
		name, broker, kind string
		keys               int
	}
	var rows []row
	for name := range r {
		if m := restoreName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[3])
			broker := "kfake"
			if m[1] != "" {
				broker = "Kafka"
			}
			rows = append(rows, row{name, broker, m[2], n})
		}
	}
	if len(rows) == 0 {
		return
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := strings.Compare(b.broker, a.broker); c != 0 { // kfake first
			return c
		}
		if c := strings.Compare(b.kind, a.kind); c != 0 { // full first
			return c
		}
		return a.keys - b.keys
	})
	fmt.Fprintln(w, "### State per key: restoring the store (`sidecar/internal/state`, BenchmarkStateRestore; one changelog partition, 100-byte states)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | broker | time | records/s | file | heap growth |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: |")
	for _, x := range rows {
		label := fmt.Sprintf("full restore, %s keys", group(float64(x.keys)))
		if x.kind == "catch-up" {
			label = fmt.Sprintf("catch-up of 10,000 records on the file of %s keys", group(float64(x.keys)))
		}
		t := "–"
		if ns, ok := r.get(x.name, "ns/op"); ok {
			t = seconds(ns / 1e9)
		}
		file := "–"
		if v, ok := r.get(x.name, "file-bytes"); ok {
			file = fmt.Sprintf("%.0f MB", v/1e6)
		}
		heap := "–"
		if v, ok := r.get(x.name, "heap-growth-MiB"); ok {
			heap = fmt.Sprintf("%.0f MiB", v)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", label, x.broker, t, r.rate(x.name), file, heap)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The design's target: a full restore of 1,000,000 keys under 30 s, and a heap that does not grow with the keys (compare 100,000). On kfake the heap growth includes the broker's own copy of the changelog, held in the same process; the catch-up case shows what the restore itself holds.")
	fmt.Fprintln(w)
}

// seconds formats a duration in seconds: milliseconds under one second.
func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}
