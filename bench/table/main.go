// Command table reads the output of the benchmarks of package bench (`go test -bench` lines)
// on stdin and prints the Markdown tables of BENCHMARKS.md, with their targets checked
// against the figures. scripts/bench runs it; it needs nothing but the benchmark lines.
//
//	go test -run '^$' -bench . -benchtime 5x ./bench/ | go run ./bench/table
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results maps a benchmark's name (without Benchmark and the -GOMAXPROCS suffix) to its
// metrics by unit, the suffix among them as "gomaxprocs" (the cores the run had, as the
// benchmarks run at their default GOMAXPROCS). A benchmark run more than once (scripts/bench's interleaved rounds) has the
// median of its runs' figures.
type results map[string]map[string]float64

// line matches a result line: name, iterations, then value-unit pairs.
var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (results, error) {
	all := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if all[m[1]] == nil {
			all[m[1]] = map[string][]float64{}
		}
		if m[2] != "" {
			f = append(f, m[2], "gomaxprocs")
		}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			all[m[1]][f[i+1]] = append(all[m[1]][f[i+1]], v)
		}
	}
	res := results{}
	for name, units := range all {
		res[name] = map[string]float64{}
		for unit, vs := range units {
			res[name][unit] = median(vs)
		}
	}
	return res, sc.Err()
}

// median returns the median of vs (not empty).
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// get returns a metric and whether it was measured.
func (r results) get(name, unit string) (float64, bool) {
	m, ok := r[name]
	if !ok {
		return 0, false
	}
	v, ok := m[unit]
	return v, ok
}

// rate formats a records/s figure, or "–" when it was not measured.
func (r results) rate(name string) string {
	v, ok := r.get(name, "records/s")
	if !ok {
		return "–"
	}
	return group(v)
}

// num formats any metric with the given precision, or "–".
func (r results) num(name, unit string, prec int) string {
	v, ok := r.get(name, unit)
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// count formats a metric as a whole number with commas, or "–".
func (r results) count(name, unit string) string {
	v, ok := r.get(name, unit)
	if !ok {
		return "–"
	}
	return group(v)
}

// group formats v rounded to a whole number with commas between thousands.
func group(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(",")
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ratio formats a/b as a percentage, or "–".
func (r results) ratio(a, b string) (string, float64, bool) {
	x, ok1 := r.get(a, "records/s")
	y, ok2 := r.get(b, "records/s")
	if !ok1 || !ok2 || y == 0 {
		return "–", 0, false
	}
	return fmt.Sprintf("%.1f%%", 100*x/y), x / y, true
}

var (
	actions = []string{"go", "python"}
	procs   = []int{1, 2, 4}
	modes   = []string{"lockstep", "window64"}
)

func main() {
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "table: reading the benchmark output:", err)
		os.Exit(1)
	}
	if len(res) == 0 {
		fmt.Fprintln(os.Stderr, "table: no benchmark result lines on stdin")
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	actionRows(w, res)
	actionTargets(w, res)
	peer(w, res)
	throughput(w, res)
	latency(w, res)
	loadRows(w, res)
	delivery(w, res)
	stateRows(w, res)
	restoreRows(w, res)
	memory(w, res)
	deployed(w, res)
	gap(w, res)
	waiting(w, res)
	targets(w, res)
}

func throughput(w io.Writer, r results) {
	if !r.has("E2E/") && !r.has("BridgeOnly/") && !r.has("Native/") && !r.has("Broker/") && !r.has("Bare/") {
		return
	}
	fmt.Fprintln(w, "### Throughput (records/s, median of the runs; 200-byte JSON values, keyless)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| action | processes | delivery | end to end, 1 partition | end to end, 8 partitions | bridge from a fake sidecar, 1 partition | bridge from a fake sidecar, 8 partitions | child alone (bare pipe loop) |")
	fmt.Fprintln(w, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, a := range actions {
		for _, n := range procs {
			for _, m := range modes {
				key := fmt.Sprintf("%s/c%d/%s", a, n, m)
				bare := a + "/lockstep"
				delivery := "one at a time"
				if m != "lockstep" {
					bare = a + "/stream"
					delivery = "window 64"
				}
				fmt.Fprintf(w, "| %s echo | %d | %s | %s | %s | %s | %s | %s |\n", a, n, delivery,
					r.rate("E2E/"+key+"/p1"), r.rate("E2E/"+key+"/p8"),
					r.rate("BridgeOnly/"+key+"/p1"), r.rate("BridgeOnly/"+key+"/p8"),
					r.rate("Bare/"+bare))
			}
		}
	}
	fmt.Fprintf(w, "| native Go streamlet, no child (ceiling without the bridge) | – | – | %s | %s | – | – | – |\n", r.rate("Native/p1"), r.rate("Native/p8"))
	fmt.Fprintf(w, "| broker alone: franz-go produce, then consume (ceiling of Kafka) | – | – | %s | %s | – | – | – |\n", r.rate("Broker/p1"), r.rate("Broker/p8"))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Child alone: one delivery at a time rows show the lock-step loop (write one item, read its two answer lines); window rows show the streaming loop (one write per item, answers read as they come).")
	fmt.Fprintln(w)
}

func latency(w io.Writer, r results) {
	if !r.has("Latency/") {
		return
	}
	fmt.Fprintln(w, "### Latency of a quiet stream (one record at a time, produce → outlet record read; 1 process, one delivery at a time, 1 partition)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| streamlet | p50 ms | p99 ms |")
	fmt.Fprintln(w, "| --- | ---: | ---: |")
	for _, s := range []string{"go", "python", "native"} {
		fmt.Fprintf(w, "| %s | %s | %s |\n", map[string]string{"go": "Go echo (bridge)", "python": "Python echo (bridge)", "native": "native Go streamlet"}[s],
			r.num("Latency/"+s, "p50-ms", 2), r.num("Latency/"+s, "p99-ms", 2))
	}
	fmt.Fprintln(w)
}

func memory(w io.Writer, r results) {
	if !r.has("Memory/") {
		return
	}
	fmt.Fprintln(w, "### Memory (peak RSS, VmHWM, of `millrace sidecar` and `millrace bridge` as separate processes)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | sidecar peak MiB | bridge peak MiB | sidecar idle MiB | bridge idle MiB | backlog at the end of production (records) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, c := range []struct{ key, label string }{
		{"Memory/backlog/100k", "100,000 records produced at full speed, Python echo, 1 process, one at a time, 8 partitions"},
		{"Memory/backlog/1000k", "1,000,000 records produced at full speed, same"},
		{"Memory/batches-1MiB/p32/187MiB", "1 MiB batches (100 × 10 KiB), 32 partitions, 19,200 records (6 batches a partition), Go echo, 4 processes, window 64"},
		{"Memory/batches-1MiB/p32/375MiB", "1 MiB batches, 32 partitions, 38,400 records (12 batches a partition), same"},
	} {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", c.label,
			r.num(c.key, "sidecar-peak-MiB", 1), r.num(c.key, "bridge-peak-MiB", 1),
			r.num(c.key, "sidecar-idle-MiB", 1), r.num(c.key, "bridge-idle-MiB", 1),
			r.count(c.key, "backlog-records"))
	}
	fmt.Fprintln(w)
}

func deployed(w io.Writer, r results) {
	if !r.has("Procs/") {
		return
	}
	fmt.Fprintln(w, "### Deployed shape (bridge and sidecar as two processes, as in a pod; CPU of each process per record)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| action | processes | delivery | partitions | records/s | sidecar CPU µs/record | bridge CPU µs/record | child CPU µs/record | sidecar allocs/record | bridge allocs/record | sidecar bytes allocated/record | bridge bytes allocated/record | sidecar peak MiB | bridge peak MiB |")
	fmt.Fprintln(w, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range []struct {
		key, a, n, d, p string
	}{
		{"Procs/go/c2/window64/p8", "go", "2", "window 64", "8"},
		{"Procs/go/c1/window64/p1", "go", "1", "window 64", "1"},
		{"Procs/go/c1/lockstep/p1", "go", "1", "one at a time", "1"},
		{"Procs/python/c2/window64/p8", "python", "2", "window 64", "8"},
		{"Procs/python/c1/lockstep/p1", "python", "1", "one at a time", "1"},
	} {
		fmt.Fprintf(w, "| %s echo | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.a, s.n, s.d, s.p, r.rate(s.key),
			r.num(s.key, "sidecar-cpu-µs/rec", 1), r.num(s.key, "bridge-cpu-µs/rec", 1), r.num(s.key, "child-cpu-µs/rec", 1),
			r.num(s.key, "sidecar-allocs/rec", 1), r.num(s.key, "bridge-allocs/rec", 1),
			r.num(s.key, "sidecar-B/rec", 0), r.num(s.key, "bridge-B/rec", 0),
			r.num(s.key, "sidecar-peak-MiB", 1), r.num(s.key, "bridge-peak-MiB", 1))
	}
	fmt.Fprintln(w)
}

// targets checks the bridge against its ceilings (the child alone, the native streamlet), the
// quiet-stream latency and the memory as the backlog grows. It writes nothing when the run
// measured none of it.
func targets(w io.Writer, r results) {
	if !r.has("BridgeOnly/") && !r.has("E2E/") && !r.has("Latency/") && !r.has("Memory/") {
		return
	}
	fmt.Fprintln(w, "### The bridge against its ceilings, latency, memory: targets computed from this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, a := range actions {
		for _, p := range []string{"p1", "p8"} {
			s, x, ok := r.ratio("BridgeOnly/"+a+"/c1/lockstep/"+p, "Bare/"+a+"/lockstep")
			fmt.Fprintf(w, "| bridge within 10%% of the child alone, %s echo, 1 process, one at a time, %s partition(s) | %s of the lock-step loop | %s |\n", a, strings.TrimPrefix(p, "p"), s, verdict(x >= 0.9, ok))
		}
	}
	for _, a := range actions {
		best, bestKey := 0.0, ""
		for _, n := range procs {
			for _, p := range []string{"p1", "p8"} {
				k := fmt.Sprintf("BridgeOnly/%s/c%d/window64/%s", a, n, p)
				if v, ok := r.get(k, "records/s"); ok && v > best {
					best, bestKey = v, k
				}
			}
		}
		s, x, ok := r.ratio(bestKey, "Bare/"+a+"/stream")
		fmt.Fprintf(w, "| bridge at 70%% of the streaming ceiling with the window, %s echo (best of 1, 2, 4 processes) | %s of the streaming loop (%s) | %s |\n", a, s, strings.TrimPrefix(bestKey, "BridgeOnly/"), verdict(x >= 0.7, ok))
	}
	for _, p := range []string{"p1", "p8"} {
		best, bestKey := 0.0, ""
		for _, n := range procs {
			for _, m := range modes {
				k := fmt.Sprintf("E2E/go/c%d/%s/%s", n, m, p)
				if v, ok := r.get(k, "records/s"); ok && v > best {
					best, bestKey = v, k
				}
			}
		}
		s, x, ok := r.ratio(bestKey, "Native/"+p)
		fmt.Fprintf(w, "| end to end, Go echo, at least half of the native streamlet, %s partition(s) | %s of native (%s) | %s |\n", strings.TrimPrefix(p, "p"), s, strings.TrimPrefix(bestKey, "E2E/"), verdict(x >= 0.5, ok))
	}
	v, ok := r.get("Latency/go", "p50-ms")
	fmt.Fprintf(w, "| quiet-stream p50 under 5 ms (Go echo) | %.2f ms | %s |\n", v, verdict(v < 5, ok))
	s1, ok1 := r.get("Memory/backlog/100k", "sidecar-peak-MiB")
	s2, ok2 := r.get("Memory/backlog/1000k", "sidecar-peak-MiB")
	b1, _ := r.get("Memory/backlog/100k", "bridge-peak-MiB")
	b2, _ := r.get("Memory/backlog/1000k", "bridge-peak-MiB")
	fmt.Fprintf(w, "| memory flat as the backlog grows (10× the backlog) | sidecar %.1f → %.1f MiB, bridge %.1f → %.1f MiB | %s |\n", s1, s2, b1, b2,
		verdict(s2 <= s1*1.25+8 && b2 <= b1*1.25+8, ok1 && ok2))
	fmt.Fprintln(w)
}

// verdict says whether a target was met.
func verdict(ok, measured bool) string {
	switch {
	case !measured:
		return "not measured"
	case ok:
		return "yes"
	}
	return "**no**"
}
