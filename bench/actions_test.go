package bench_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/sidecar"
)

// actionUnderTest is one action of BenchmarkActions: an echo, run as its author would.
type actionUnderTest struct {
	name   string
	argv   []string // the program; none for the native streamlet
	native bool     // the native Go streamlet in the bridge's place
	// exactlyOnce: the action also runs with the sidecar at FLOW_DELIVERY=exactly-once.
	exactlyOnce bool
}

// actionsUnderTest returns the actions BenchmarkActions runs: the echo of each SDK (Python,
// Node.js and Ruby: sdk/*/examples; Go: actions/go-echo), two raw scripts that declare
// nothing and answer one line at a time (stdio/testdata/echo.py, the stdlib loop of the stdio
// benchmarks, and testdata/echo.awk), and the native Go streamlet. An action whose
// interpreter is missing is left out with a line in the log (scripts/setup installs them all).
func actionsUnderTest(b *testing.B) []actionUnderTest {
	_, goEcho := binaries(b)
	abs := func(rel string) string {
		p, err := filepath.Abs(rel)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	awk := []string{"awk", "-f", abs("testdata/echo.awk")}
	if _, err := exec.LookPath("mawk"); err == nil {
		awk = []string{"mawk", "-W", "interactive", "-f", abs("testdata/echo.awk")}
	}
	all := []actionUnderTest{
		{name: "python-sdk", argv: []string{"python3", abs("../sdk/python/examples/echo.py")}, exactlyOnce: true},
		{name: "node-sdk", argv: []string{"node", abs("../sdk/node/examples/echo.js")}},
		{name: "ruby-sdk", argv: []string{"ruby", abs("../sdk/ruby/examples/echo.rb")}},
		{name: "go-echo", argv: []string{goEcho}, exactlyOnce: true},
		{name: "echo.py", argv: []string{"python3", abs("../stdio/testdata/echo.py")}},
		{name: "awk", argv: awk},
		{name: "native", native: true, exactlyOnce: true},
	}
	var as []actionUnderTest
	for _, a := range all {
		if a.argv != nil {
			if _, err := exec.LookPath(a.argv[0]); err != nil {
				b.Logf("no %s: the %s echo is left out (scripts/setup installs it): %v", a.argv[0], a.name, err)
				continue
			}
		}
		as = append(as, a)
	}
	return as
}

// BenchmarkActions runs the actions as their authors run them, each at its defaults (its config
// line names no --concurrency and no --window: one process, and what the program declares in
// ready), in the deployed shape (runDeployed: the sidecar and the bridge each a process of its
// own, the CPU per record of the sidecar, of the bridge and of the bridge's child, the action,
// each measured apart), on 1 and 8 partitions, with the sidecar at its default delivery
// (at-least-once) and, for the Python SDK's echo, go-echo and the native streamlet, at
// FLOW_DELIVERY=exactly-once too. The actions are those of actionsUnderTest; the native Go
// streamlet serves the sidecar in the bridge's place (no bridge, no child): the ceiling. Its
// rows are set against BenchmarkPeer's loop in the same run by bench/table.
//
//	go test -run '^$' -bench 'BenchmarkActions' -benchtime 3x ./bench/
func BenchmarkActions(b *testing.B) {
	as := actionsUnderTest(b)
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		for _, a := range as {
			if d == sidecar.ExactlyOnce && !a.exactlyOnce {
				continue
			}
			for _, parts := range partitionsOf {
				b.Run(fmt.Sprintf("%s/%s/p%d", d, a.name, parts), func(b *testing.B) {
					argv := a.argv
					if a.native {
						argv = []string{"native"} // never run: the native streamlet takes the bridge's place
					}
					dep := deployment{native: a.native}
					if d != sidecar.AtLeastOnce { // the default: left unset
						dep.sidecarEnv = []string{"FLOW_DELIVERY=" + string(d)}
					}
					line := "bench --in in=bench.v1 --out out=bench.v1 -- " + actionconf.Join(argv)
					runDeployed(b, fmt.Sprintf("actions-%s-%s-p%d", d, a.name, parts), line, parts, dep)
				})
			}
		}
	}
}
