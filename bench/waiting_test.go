package bench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// waitingKeys are the key counts of BenchmarkWaiting's records: keyless, and 97 keys (a prime,
// so keys spread unevenly over 8 partitions as real ones do).
var waitingKeys = []int{0, 97}

// defaultWaitRecords is BENCH_WAIT_RECORDS's default: the records of each run of a row.
const defaultWaitRecords = 2000

// waitingRow is one row of BenchmarkWaiting: an action whose handler waits on a call per
// record, run as its author would, or the hand-written loop.
type waitingRow struct {
	name string
	// peerThreads, when not 0, makes the row the hand-written loop (bench/peer/waitloop.py)
	// with the calls of each consumed batch on that many threads (1: one after another).
	peerThreads int
	argv        []string // the action's program, its call's milliseconds last or next to last
	options     string   // the config line's options before --, e.g. "--concurrency 8"
	// concurrent: the program must declare "concurrent": true in ready (the SDK's concurrent
	// form); a program that does not yet is left out of the run, with a line in the log.
	concurrent bool
	// slow: the row moves a twentieth of the records (one call at a time).
	slow bool
}

// waitingRows returns the rows of BenchmarkWaiting for calls of ms milliseconds: the loop one
// call after another and on 64 threads; each SDK's concurrent form at its defaults (Go,
// Ruby, Python async def, Node.js async); the Python SDK's blocking handler on 32 threads;
// the raw template (`millrace init action --lang raw`, a call added) with --concurrency 8 and
// 64 processes.
func waitingRows(b *testing.B, ms int) []waitingRow {
	binaries(b)
	abs := func(rel string) string {
		p, err := filepath.Abs(rel)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	call := strconv.Itoa(ms)
	raw := rawWaiting(b)
	return []waitingRow{
		{name: "loop-seq", peerThreads: 1, slow: true},
		{name: "loop-64", peerThreads: 64},
		{name: "go-sdk", argv: []string{bins.waitGo, call}, concurrent: true},
		{name: "ruby-sdk", argv: []string{"ruby", abs("testdata/wait.rb"), call}, concurrent: true},
		{name: "python-async", argv: []string{"python3", abs("testdata/wait_async.py"), call}, concurrent: true},
		{name: "node-async", argv: []string{"node", abs("testdata/wait.js"), call}, concurrent: true},
		{name: "python-threads32", argv: []string{"python3", abs("testdata/wait_threads.py"), call, "32"}, concurrent: true},
		{name: "raw-c8", argv: []string{"python3", raw, call}, options: "--param greeting:string=Hello --ready-timeout 60s --concurrency 8"},
		{name: "raw-c64", argv: []string{"python3", raw, call}, options: "--param greeting:string=Hello --ready-timeout 60s --concurrency 64"},
	}
}

// rawWaiting writes the raw template (`millrace init action --lang raw`) into a folder of its
// own with a call added: before each item's answer it sleeps the milliseconds of its first
// argument; its greeting carries the record's number. It returns the program's path; its
// line needs --param greeting:string=Hello, as the template's own line has (and --ready-timeout
// 60s: 64 Python processes starting at once on 2 cores may take longer than the default 10s).
func rawWaiting(b *testing.B) string {
	dir := filepath.Join(b.TempDir(), "wait-raw")
	if out, err := exec.Command(bins.millrace, "init", "action", dir, "--lang", "raw").CombinedOutput(); err != nil {
		b.Fatalf("millrace init action --lang raw: %v\n%s", err, out)
	}
	prog := filepath.Join(dir, "main.py")
	src, err := os.ReadFile(prog)
	if err != nil {
		b.Fatal(err)
	}
	text := string(src)
	for _, edit := range [][2]string{
		{"import sys\n", "import sys\nimport time\n\nCALL = float(sys.argv[1]) / 1000\n"},
		{"    elif kind == \"item\":\n", "    elif kind == \"item\":\n        time.sleep(CALL)  # the call\n"},
		// the record's number first in the output, as the benchmarks count outputs by it
		{`"payload": {"message": f"{greeting}, {name}!"}`, `"payload": {"id": payload.get("id"), "message": f"{greeting}, {name}!"}`},
	} {
		if strings.Count(text, edit[0]) != 1 {
			b.Fatalf("the raw template's main.py no longer has %q once: update rawWaiting to add its call", edit[0])
		}
		text = strings.Replace(text, edit[0], edit[1], 1)
	}
	if err := os.WriteFile(prog, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	return prog
}

// declaresConcurrent starts argv, says hello and reports whether its ready declares
// "concurrent": true, or why not.
func declaresConcurrent(argv []string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return false, err.Error()
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err.Error()
	}
	if err := cmd.Start(); err != nil {
		return false, err.Error()
	}
	defer func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if _, err := in.Write([]byte(`{"type":"hello","protocol":1,"action":"probe"}` + "\n")); err != nil {
		return false, "writing hello: " + err.Error()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return false, "no ready: " + err.Error()
	}
	var ready struct {
		Type       string `json:"type"`
		Concurrent bool   `json:"concurrent"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.Type != "ready" {
		return false, "not a ready line: " + strings.TrimSpace(line)
	}
	if !ready.Concurrent {
		return false, "its ready does not declare \"concurrent\": true: " + strings.TrimSpace(line)
	}
	return true, ""
}

// BenchmarkWaiting measures steps that wait on a call per record (an HTTP API, a database,
// a model server), the common case: each row's handler takes BENCH_CALL_MS milliseconds a
// record (default 20; a list such as "20 200" runs each) by sleeping, on keyless records and
// on records of 97 keys, 1 and 8 partitions, BENCH_WAIT_RECORDS records a run (default 2,000;
// the loop one call at a time a twentieth of them). Beside the records/s it reports the CPU
// per record and the peak RSS of each process: the loop's; or the sidecar's, the bridge's and
// the action's (child-peak-MiB, the sum over its processes, child-procs of them). A row whose
// program does not yet declare "concurrent" in ready (an SDK without the concurrent form) is
// left out, with a line in the log saying why. bench/table prints them side by side.
//
//	BENCH_CALL_MS=20 go test -run '^$' -bench 'BenchmarkWaiting' -benchtime 1x ./bench/
func BenchmarkWaiting(b *testing.B) {
	n := envInt("BENCH_WAIT_RECORDS", defaultWaitRecords)
	for _, word := range strings.Fields(cmpString(os.Getenv("BENCH_CALL_MS"), "20")) {
		ms, err := strconv.Atoi(word)
		if err != nil || ms < 1 {
			b.Fatalf("BENCH_CALL_MS %q: want milliseconds, e.g. 20 or \"20 200\"", word)
		}
		rows := waitingRows(b, ms)
		var measured []waitingRow
		for _, r := range rows {
			if r.argv != nil {
				if _, err := exec.LookPath(r.argv[0]); err != nil {
					b.Logf("no %s: the %s row is left out (scripts/setup installs it): %v", r.argv[0], r.name, err)
					continue
				}
			}
			if r.concurrent {
				if ok, why := declaresConcurrent(r.argv); !ok {
					b.Logf("the %s row is left out, its program not yet concurrent: %s", r.name, why)
					continue
				}
			}
			measured = append(measured, r)
		}
		for _, keys := range waitingKeys {
			for _, r := range measured {
				for _, parts := range partitionsOf {
					records, warm := n, min(n, 200)
					if r.slow {
						records, warm = max(n/20, 20), min(n/20, 50)
					}
					b.Run(fmt.Sprintf("call%dms/%s/%s/p%d", ms, keysName(keys), r.name, parts), func(b *testing.B) {
						if r.peerThreads > 0 {
							waitingPeer(b, r.peerThreads, ms, parts, keys, records, warm)
							return
						}
						line := "bench --in in=bench.v1 --out out=bench.v1 " + r.options + " -- " + actionconf.Join(r.argv)
						pp, _ := runDeployed(b, fmt.Sprintf("waiting-%dms-%s-%s-p%d", ms, keysName(keys), r.name, parts), line, parts,
							deployment{keys: keys, records: records, warm: warm})
						var peak int64
						kids := testkit.Children(pp.bridge.Pid())
						for _, pid := range kids {
							peak += testkit.ProcStatus(pid, "VmHWM")
						}
						b.ReportMetric(mib(peak), "child-peak-MiB")
						b.ReportMetric(float64(len(kids)), "child-procs")
					})
				}
			}
		}
	}
}

// waitingPeer runs the hand-written loop with its calls on threads threads.
func waitingPeer(b *testing.B, threads, ms, parts, keys, records, warm int) {
	python := cmpString(os.Getenv(envPeerPython), "python3")
	if out, err := exec.Command(python, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		b.Fatalf("%s cannot import confluent_kafka (%v: %s): run scripts/bench, which installs it into a virtual environment, or set %s to a Python that has it",
			python, err, strings.TrimSpace(string(out)), envPeerPython)
	}
	loop, err := filepath.Abs("peer/waitloop.py")
	if err != nil {
		b.Fatal(err)
	}
	br := newBroker(b)
	in, out := br.topic(b, "in", parts), br.topic(b, "out", parts)
	p := startProc(b, "waitloop", []string{python, loop, strings.Join(br.Addrs, ","), in, out, br.name("group"), strconv.Itoa(ms), strconv.Itoa(threads)}, nil)
	alive := func() error {
		if p.Exited() {
			return fmt.Errorf("the loop exited early: %v\n%s", p.Err(), p.Tail(20))
		}
		return nil
	}
	pid := p.Pid()
	benchFlowOf(b, br, in, out, parts, keys, records, warm, alive, meter{[]string{"peer-cpu-µs/rec"}, func() []float64 { return []float64{micros(procCPU(pid))} }})
	if err := alive(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(mib(p.Status("VmHWM")), "peer-peak-MiB")
}

func keysName(keys int) string {
	if keys == 0 {
		return "keyless"
	}
	return fmt.Sprintf("keys%d", keys)
}

// cmpString returns a when it is not empty, else b.
func cmpString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
