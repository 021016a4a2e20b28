package bench_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// startProc starts argv with the extra environment env, its output in a log named for the
// benchmark and name (kept in BENCH_LOG_DIR when set, else removed at the end). When the
// benchmark ends it is stopped (SIGTERM, then SIGKILL to its group after 30 s), and a kill or
// an exit with an error fails the benchmark.
func startProc(b testing.TB, name string, argv, env []string) *testkit.Proc {
	b.Helper()
	dir := os.Getenv("BENCH_LOG_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	logName := strings.NewReplacer("/", "_", " ", "_").Replace(b.Name()) + "." + name + ".log"
	return testkit.StartProc(b, testkit.ProcSpec{
		Name: name, Argv: argv, Env: env, Log: filepath.Join(dir, logName),
		Grace: 30 * time.Second, Strict: true,
	})
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }

// procPipeline is a streamlet deployed as in a pod: the bridge and the sidecar each a process
// of its own, meeting over gRPC on loopback, the sidecar reading the broker of this process.
type procPipeline struct {
	in, out string
	sidecar *testkit.Proc
	bridge  *testkit.Proc // or the native streamlet in its place
	ready   string        // the sidecar's readiness file
	// changelog is the inlet's changelog topic ("" when it keeps no state), on broker br.
	changelog string
	br        *broker
}

// procs names how to start the two processes: argv of the bridge and of the sidecar, extra
// environment of each, and the descriptor the sidecar is deployed with.
type procs struct {
	streamlet             string // the name of the process in the bridge's place; "" is "bridge"
	bridge, sidecar       []string
	bridgeEnv, sidecarEnv []string
	descriptor            func(b testing.TB, line, path string)
}

// realProcs runs `millrace bridge` and `millrace sidecar`, the descriptor written by
// `millrace describe`.
func realProcs(b testing.TB) procs {
	millrace, _ := binaries(b)
	return procs{
		bridge: []string{millrace, "bridge"}, sidecar: []string{millrace, "sidecar"},
		descriptor: func(b testing.TB, line, path string) {
			if out, err := exec.Command(millrace, "describe", line, "-o", path).CombinedOutput(); err != nil {
				b.Fatalf("millrace describe: %v\n%s", err, out)
			}
		},
	}
}

// startProcs starts the bridge for the config line and a sidecar for it on fresh topics of
// parts partitions; sidecarEnv adds FLOW_* variables. The sidecar is stopped first.
func startProcs(b testing.TB, br *broker, how procs, line string, parts int, sidecarEnv ...string) *procPipeline {
	b.Helper()
	dir := b.TempDir()
	descriptor := filepath.Join(dir, "descriptor.json")
	how.descriptor(b, line, descriptor)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	p := &procPipeline{in: br.topic(b, "in", parts), out: br.topic(b, "out", parts), ready: filepath.Join(dir, "ready"), br: br}
	bridgeEnv := append([]string{"MILLRACE_ACTION=" + line, "FLOW_PROCESS_PORT=" + port}, how.bridgeEnv...)
	bridgeEnv = append(bridgeEnv, strings.Fields(os.Getenv("BENCH_BRIDGE_ENV"))...) // experiments: GOMAXPROCS=1, GOGC=200
	name := how.streamlet
	if name == "" {
		name = "bridge"
	}
	p.bridge = startProc(b, name, how.bridge, bridgeEnv)
	env := []string{
		"FLOW_BROKERS=" + strings.Join(br.Addrs, ","),
		"FLOW_PIPELINE=bench", "FLOW_STREAMLET=bench",
		"FLOW_DESCRIPTOR=" + descriptor,
		"FLOW_INLETS=in=" + p.in, "FLOW_OUTLETS=out=" + p.out,
		"FLOW_CONSUMER_GROUP=" + br.name("group"),
		"FLOW_PROCESS_PORT=" + port,
		"FLOW_READINESS_FILE=" + p.ready,
	}
	env = append(append(env, how.sidecarEnv...), sidecarEnv...)
	env = append(env, strings.Fields(os.Getenv("BENCH_SIDECAR_ENV"))...) // experiments: GOMAXPROCS=1, GOGC=200, FLOW_*
	p.sidecar = startProc(b, "sidecar", how.sidecar, env)                // cleaned up first
	return p
}

// alive fails the benchmark if either process has exited.
func (p *procPipeline) alive(b testing.TB) {
	if err := p.check(); err != nil {
		b.Fatal(err)
	}
}

// check returns an error naming the process that has exited, if one has.
func (p *procPipeline) check() error {
	for _, pr := range []*testkit.Proc{p.sidecar, p.bridge} {
		if pr.Exited() {
			return fmt.Errorf("%s exited early: %v\n%s", pr.Name, pr.Err(), pr.Tail(20))
		}
	}
	return nil
}

// waitReady waits until the sidecar has started its conversation with the bridge (its
// readiness file exists): both processes are up.
func (p *procPipeline) waitReady(b testing.TB) {
	b.Helper()
	ready := func() bool {
		p.alive(b)
		_, err := os.Stat(p.ready) // a file another process writes
		return err == nil
	}
	if !testkit.Eventually(time.Minute, ready) {
		b.Fatalf("the sidecar did not become ready within a minute\n%s", p.sidecar.Tail(20))
	}
}
