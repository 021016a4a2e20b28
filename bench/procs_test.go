package bench_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// proc is a process a benchmark started: in its own process group, its output in a log file,
// ended by PID when the benchmark ends (SIGTERM, then SIGKILL to its group).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the exit, once done is closed
}

// startProc starts argv with the extra environment env.
func startProc(b testing.TB, name string, argv, env []string) *proc {
	b.Helper()
	dir := os.Getenv("BENCH_LOG_DIR") // keep the processes' logs there (default: removed at the end)
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	logName := strings.NewReplacer("/", "_", " ", "_").Replace(b.Name()) + "." + name + ".log"
	p := &proc{name: name, log: filepath.Join(dir, logName), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	b.Cleanup(func() {
		if err := p.stop(30 * time.Second); err != nil {
			b.Errorf("%v\n%s", err, p.tail(20))
		}
	})
	return p
}

// cleanEnv is this process's environment without what would change the processes' behaviour.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBERNETES_") || strings.HasPrefix(kv, "FLOW_") || strings.HasPrefix(kv, "MILLRACE_ACTION=") || strings.HasPrefix(kv, testkit.EnvRole+"=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// stop sends SIGTERM and waits up to grace for the exit, then kills the process group. It
// returns an error when the process had to be killed or exited with an error. It may be
// called twice.
func (p *proc) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr()
	default:
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.name, grace)
	}
}

func (p *proc) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("%s exited: %w", p.name, p.err)
	}
	return nil
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// status returns a field of /proc/PID/status in bytes (VmRSS, VmHWM), or 0.
func (p *proc) status(field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// mib is n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }

// procPipeline is a streamlet deployed as in a pod: the bridge and the sidecar each a process
// of its own, meeting over gRPC on loopback, the sidecar reading the broker of this process.
type procPipeline struct {
	in, out string
	sidecar *proc
	bridge  *proc  // or the native streamlet in its place
	ready   string // the sidecar's readiness file
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
	p := &procPipeline{in: br.topic(b, "in", parts), out: br.topic(b, "out", parts), ready: filepath.Join(dir, "ready")}
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
	for _, pr := range []*proc{p.sidecar, p.bridge} {
		select {
		case <-pr.done:
			return fmt.Errorf("%s exited early: %v\n%s", pr.name, pr.err, pr.tail(20))
		default:
		}
	}
	return nil
}

// waitReady waits until the sidecar has started its conversation with the bridge (its
// readiness file exists): both processes are up.
func (p *procPipeline) waitReady(b testing.TB) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(p.ready); err == nil {
			return
		}
		p.alive(b)
		if time.Now().After(deadline) {
			b.Fatalf("the sidecar did not become ready within a minute\n%s", p.sidecar.tail(20))
		}
		time.Sleep(10 * time.Millisecond) // a file another process writes
	}
}
