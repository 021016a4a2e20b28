package main

import (
	"fmt"
	"io"
	"strings"
)

// contenders are BenchmarkActions' actions, in the order of the table, with their labels.
var contenders = []struct{ name, label string }{
	{"python-sdk", "Python SDK echo (`sdk/python/examples/echo.py`), defaults"},
	{"node-sdk", "Node.js SDK echo (`sdk/node/examples/echo.js`), defaults"},
	{"ruby-sdk", "Ruby SDK echo (`sdk/ruby/examples/echo.rb`), defaults"},
	{"go-echo", "go-echo (Go SDK, `actions/go-echo`), defaults"},
	{"echo.py", "raw script that declares nothing: `stdio/testdata/echo.py` (one at a time)"},
	{"awk", "raw script that declares nothing: `bench/testdata/echo.awk` (one at a time)"},
	{"native", "sidecar + native Go streamlet, no bridge, no child (the ceiling)"},
}

// deliveries are the sidecar's delivery modes, as BenchmarkActions names its rows.
var deliveries = []string{"at-least-once", "exactly-once"}

// action is the key of BenchmarkActions' row of action name on parts partitions ("p1").
func action(delivery, name, parts string) string {
	return "Actions/" + delivery + "/" + name + "/" + parts
}

// has says whether any benchmark whose name starts with prefix was measured.
func (r results) has(prefix string) bool {
	for name := range r {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// cpu returns a row's CPU per record in the deployed shape: the sidecar's, the bridge's (its
// own, its child not counted), and the action's: the bridge's child, or the native streamlet's
// process in the bridge's place, or for the loop its one process. Each is false when not
// measured (the bridge of the native row and the loop, the sidecar of the loop).
type cpu struct {
	sidecar, bridge, action       float64
	hasSidecar, hasBridge, hasAct bool
}

func (r results) cpu(key string) cpu {
	var c cpu
	c.sidecar, c.hasSidecar = r.get(key, "sidecar-cpu-µs/rec")
	c.bridge, c.hasBridge = r.get(key, "bridge-cpu-µs/rec")
	if c.action, c.hasAct = r.get(key, "child-cpu-µs/rec"); !c.hasAct {
		if c.action, c.hasAct = r.get(key, "native-cpu-µs/rec"); !c.hasAct {
			c.action, c.hasAct = r.get(key, "peer-cpu-µs/rec")
		}
	}
	return c
}

// cell formats v with one decimal, or "–" when not measured.
func cell(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// actionRows prints BenchmarkActions' rows beside the loop of BenchmarkPeer, each with its
// ratio to the loop on as many partitions and the CPU per record of each of its processes. It
// writes nothing when the run has neither.
func actionRows(w io.Writer, r results) {
	if !r.has("Actions/") && !r.has("Peer/") {
		return
	}
	fmt.Fprintln(w, "### The actions at their defaults against the hand-written loop (deployed shape; records/s, median of the runs; CPU µs per record of each process, in the same run)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each row is its own processes on the same in-process broker, with the same 200-byte JSON records: the sidecar and the bridge each a process (as in a pod), the bridge's child the action. CPU is what each process spent during the timed runs (startup and warm-up left out) per record: *sidecar*, *bridge* (its own, its child not counted), and *action*: the bridge's child, or the native streamlet's process in the bridge's place, or the loop's one process. *Sum* adds the three. The broker, producer and counter of the benchmark are in none of them.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | delivery | partitions | records/s | ÷ loop | sidecar | bridge | action | sum |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	row := func(label, delivery, key, parts string) {
		x, _, _ := r.times(key, "Peer/"+parts)
		c := r.cpu(key)
		sum, hasSum := c.sidecar+c.bridge+c.action, c.hasSidecar || c.hasBridge || c.hasAct
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, delivery, strings.TrimPrefix(parts, "p"), r.rate(key), x,
			cell(c.sidecar, c.hasSidecar), cell(c.bridge, c.hasBridge), cell(c.action, c.hasAct), cell(sum, hasSum))
	}
	for _, p := range []string{"p1", "p8"} {
		row("hand-written confluent-kafka loop (`bench/peer/loop.py`: consume 100 → `json.loads`/`dumps` each → produce → flush → commit sync), 1 process", "commit sync", "Peer/"+p, p)
	}
	for _, d := range deliveries {
		for _, c := range contenders {
			for _, p := range []string{"p1", "p8"} {
				key := action(d, c.name, p)
				if _, ok := r[key]; !ok && d != "at-least-once" {
					continue // exactly once runs only some of the actions
				}
				label := d
				if d != "at-least-once" {
					if x, _, ok := r.times(key, action("at-least-once", c.name, p)); ok {
						label += fmt.Sprintf(" (%s at-least-once)", x)
					}
				}
				row(c.label, label, key, p)
			}
		}
	}
	fmt.Fprintln(w)
}

// actionTargets checks the targets of the actions at their defaults, each figure from this run
// alone: rates as ratios to the loop on as many partitions; for each rate, the CPU per record
// every process of the row may spend at it on the run's cores beside what they spend now (the
// three of the table and the test process: broker, producer and counter); the Python SDK
// child's CPU per record against the loop process's; the bridge's CPU with go-echo against
// the native streamlet's. The raw scripts get no verdict: "no slower" is a comparison with a
// run before the change.
func actionTargets(w io.Writer, r results) {
	if !r.has("Actions/") && !r.has("Peer/") {
		return
	}
	fmt.Fprintln(w, "### Targets of the actions at their defaults, computed from this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | met |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, t := range []struct {
		name, label, parts string
		want               float64
	}{
		{"python-sdk", "Python SDK echo", "p1", 1.0},
		{"python-sdk", "Python SDK echo", "p8", 1.5},
		{"node-sdk", "Node.js SDK echo", "p8", 1.5},
		{"ruby-sdk", "Ruby SDK echo", "p8", 1.5},
		{"go-echo", "go-echo", "p1", 1.8},
		{"go-echo", "go-echo", "p8", 2.5},
	} {
		key := action("at-least-once", t.name, t.parts)
		s, x, ok := r.times(key, "Peer/"+t.parts)
		if ok {
			s += budget(r, key, t.want)
		}
		fmt.Fprintf(w, "| %s, %s, ≥ %.1f× the loop | %s | %s |\n", t.label, partitions(t.parts), t.want, s, verdict(x >= t.want, ok))
	}
	for _, p := range []string{"p1", "p8"} {
		child, ok1 := r.get(action("at-least-once", "python-sdk", p), "child-cpu-µs/rec")
		loop, ok2 := r.get("Peer/"+p, "peer-cpu-µs/rec")
		ok := ok1 && ok2 && loop > 0
		fig := "–"
		if ok {
			fig = fmt.Sprintf("%.1f µs against %.1f µs: %.2f×", child, loop, child/loop)
		}
		fmt.Fprintf(w, "| Python SDK echo's child, CPU per record ≤ 0.5× the loop process's, %s | %s | %s |\n", partitions(p), fig, verdict(ok && child <= 0.5*loop, ok))
	}
	for _, p := range []string{"p1", "p8"} {
		g, n := r.cpu(action("at-least-once", "go-echo", p)), r.cpu(action("at-least-once", "native", p))
		ok := g.hasSidecar && g.hasBridge && n.hasSidecar && n.hasAct && n.sidecar+n.action > 0
		fig := "–"
		if ok {
			fig = fmt.Sprintf("(%.1f + %.1f) µs against (%.1f + %.1f) µs: %.2f×", g.sidecar, g.bridge, n.sidecar, n.action, (g.sidecar+g.bridge)/(n.sidecar+n.action))
		}
		fmt.Fprintf(w, "| sidecar + bridge CPU per record with go-echo ≤ 2.0× sidecar + native streamlet, %s | %s | %s |\n", partitions(p), fig,
			verdict(ok && g.sidecar+g.bridge <= 2*(n.sidecar+n.action), ok))
	}
	for _, c := range contenders {
		if c.name != "echo.py" && c.name != "awk" {
			continue
		}
		for _, p := range []string{"p1", "p8"} {
			key := action("at-least-once", c.name, p)
			x, _, _ := r.times(key, "Peer/"+p)
			fmt.Fprintf(w, "| %s no slower than before, %s | %s records/s (%s the loop) | against the run before the change |\n", strings.TrimSuffix(c.label, " (one at a time)"), partitions(p), r.rate(key), x)
		}
	}
	fmt.Fprintln(w)
}

// budget says, for a row whose target is want times the loop's rate, what CPU per record
// every process of the row together may spend at that rate on the run's cores, and what they
// spend now: the sidecar, the bridge and the child, and the test process (the broker, the
// benchmark's producer and counter). Empty when a figure is missing.
func budget(r results, key string, want float64) string {
	parts := key[strings.LastIndexByte(key, '/')+1:]
	loop, ok1 := r.get("Peer/"+parts, "records/s")
	cores, ok2 := r.get(key, "gomaxprocs")
	rest, ok3 := r.get(key, "cpu-µs/rec")
	c := r.cpu(key)
	if !ok1 || !ok2 || !ok3 || loop == 0 || !c.hasSidecar || !c.hasBridge || !c.hasAct {
		return ""
	}
	need := want * loop
	return fmt.Sprintf("; at %s records/s, %.0f cores leave %.1f µs of CPU a record for all the row's processes, which spend %.1f now (%.1f + %.1f + %.1f, and the broker, producer and counter %.1f)",
		group(need), cores, cores*1e6/need, c.sidecar+c.bridge+c.action+rest, c.sidecar, c.bridge, c.action, rest)
}

// partitions names "p1" or "p8" in words.
func partitions(p string) string {
	if p == "p1" {
		return "1 partition"
	}
	return strings.TrimPrefix(p, "p") + " partitions"
}
