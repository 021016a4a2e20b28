package bench_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envPeerPython names the Python interpreter that has confluent-kafka (scripts/bench installs
// it into a virtual environment of its own and sets this); default python3.
const envPeerPython = "BENCH_PEER_PYTHON"

// BenchmarkPeer is the same work written by hand, the contender millrace is measured against: the
// confluent-kafka loop of bench/peer/loop.py (consume 100 → json.loads/dumps each → produce →
// flush → commit sync; one process) on the same in-process broker, with the same records,
// timed the same way as BenchmarkE2E, on 1 and 8 partitions. It reports the loop process's
// CPU per record during the timed runs (peer-cpu-µs/rec, as runDeployed measures each process)
// and its peak RSS beside the rate.
func BenchmarkPeer(b *testing.B) {
	python := os.Getenv(envPeerPython)
	if python == "" {
		python = "python3"
	}
	if out, err := exec.Command(python, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		b.Fatalf("%s cannot import confluent_kafka (%v: %s): run scripts/bench, which installs it into a virtual environment, or set %s to a Python that has it",
			python, err, strings.TrimSpace(string(out)), envPeerPython)
	}
	loop, err := filepath.Abs("peer/loop.py")
	if err != nil {
		b.Fatal(err)
	}
	for _, parts := range partitionsOf {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			br := newBroker(b)
			in, out := br.topic(b, "in", parts), br.topic(b, "out", parts)
			p := startProc(b, "loop", []string{python, loop, strings.Join(br.Addrs, ","), in, out, br.name("group")}, nil)
			alive := func() error {
				if p.Exited() {
					return fmt.Errorf("the loop exited early: %v\n%s", p.Err(), p.Tail(20))
				}
				return nil
			}
			pid := p.Pid()
			benchFlow(b, br, in, out, parts, alive, meter{[]string{"peer-cpu-µs/rec"}, func() []float64 { return []float64{micros(procCPU(pid))} }})
			if err := alive(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(mib(p.Status("VmHWM")), "peer-peak-MiB")
		})
	}
}
