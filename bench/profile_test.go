package bench_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

// The test binary plays the bridge or the sidecar when BENCH_ROLE names it, as `millrace
// bridge` and `millrace sidecar` do (same packages, same environment variables), writing a CPU
// profile of its whole life to BENCH_CPUPROFILE, and its allocations and mutex contention (one
// event in 20 sampled) to BENCH_ALLOCSPROFILE and the same path ending in .mutex instead of
// .allocs, when they are set.
const (
	envProfile = "BENCH_CPUPROFILE"
	envAllocs  = "BENCH_ALLOCSPROFILE"
	// envMemStats names a file where the role writes "SEQ MALLOCS TOTALALLOC" from
	// runtime.MemStats at every SIGUSR1 (SEQ counting the signals).
	envMemStats = "BENCH_MEMSTATS"
)

// runRole runs the role named by testkit.EnvRole until SIGTERM and returns the exit code.
func runRole(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if path := os.Getenv(envProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv(envAllocs); path != "" {
		runtime.SetMutexProfileFraction(20)
		defer func() {
			for profile, path := range map[string]string{"allocs": path, "mutex": strings.TrimSuffix(path, ".allocs") + ".mutex"} {
				f, err := os.Create(path)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				if err := pprof.Lookup(profile).WriteTo(f, 0); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
				f.Close()
			}
		}()
	}
	if path := os.Getenv(envMemStats); path != "" {
		usr := make(chan os.Signal, 1)
		signal.Notify(usr, syscall.SIGUSR1)
		defer signal.Stop(usr)
		done := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(done)
		wg.Go(func() {
			for seq := 1; ; seq++ {
				select {
				case <-done:
					return
				case <-usr:
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				tmp := path + ".tmp"
				if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d %d\n", seq, ms.Mallocs, ms.TotalAlloc), 0o644); err == nil {
					_ = os.Rename(tmp, path)
				}
			}
		})
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	switch role {
	case "bridge":
		err = serveBridgeRole(ctx, logger)
	case "sidecar":
		err = runSidecarRole(ctx, logger)
	case "native":
		err = serveNativeRole(ctx)
	case "spin":
		err = spin()
	default:
		err = fmt.Errorf("%s=%q: want bridge, sidecar, native or spin", testkit.EnvRole, role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func serveBridgeRole(ctx context.Context, logger *slog.Logger) error {
	a, err := actionconf.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	bcfg, err := bridge.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	port := bcfg.Port
	return bridge.ListenAndServe(ctx, port, bridge.Options{Action: a, Version: version, Logger: logger, SidecarPort: bcfg.SidecarPort}, nil)
}

// serveNativeRole serves the native Go streamlet (see native) where the bridge would listen,
// with the descriptor of the bridge's config line: the bridge and its child replaced by a
// process that answers the sidecar itself.
func serveNativeRole(ctx context.Context) error {
	a, err := actionconf.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	bcfg, err := bridge.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	port := bcfg.Port
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("the native streamlet cannot listen on port %d: %w", port, err)
	}
	return serveNative(a)(ctx, lis)
}

func runSidecarRole(ctx context.Context, logger *slog.Logger) error {
	cfg, err := sidecar.ConfigFromEnv(os.Getenv, nil)
	if err != nil {
		return err
	}
	cfg.SidecarVersion = version
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		return err
	}
	return sc.Run(ctx)
}

// roleProcs runs the sidecar and, in the bridge's place, the streamlet process (role "bridge",
// or "native" for the native Go streamlet) as this test binary in their roles, each writing
// its CPU and allocation profiles into dir (none when dir is empty) and its allocation counts
// into statsDir when signalled (see memStats).
func roleProcs(dir, statsDir, tag, streamlet string) procs {
	prof := func(side string) []string {
		if dir == "" {
			return nil
		}
		return []string{envProfile + "=" + filepath.Join(dir, tag+"."+side+".pprof"), envAllocs + "=" + filepath.Join(dir, tag+"."+side+".allocs")}
	}
	self := []string{os.Args[0], "-test.run=^$", "-test.bench=^$"}
	return procs{
		streamlet: streamlet, bridge: self, sidecar: self,
		bridgeEnv:  append([]string{testkit.RoleEnv(streamlet), envMemStats + "=" + filepath.Join(statsDir, tag+"."+streamlet+".memstats")}, prof(streamlet)...),
		sidecarEnv: append([]string{testkit.RoleEnv("sidecar"), envMemStats + "=" + filepath.Join(statsDir, tag+".sidecar.memstats")}, prof("sidecar")...),
		descriptor: func(b testing.TB, line, path string) {
			data, err := protocol.MarshalDescriptor(parseAction(b, line).Spec(version))
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
		},
	}
}

// BenchmarkProcs measures the throughput of the deployed shape: the bridge and the sidecar
// each a process of its own (as in a pod), the broker in this process, with the CPU each
// process and the bridge's child spend per record and their peak RSS (see runDeployed). With BENCH_PROFILE_DIR set, each process writes
// a CPU profile of its life there (TAG.bridge.pprof, TAG.sidecar.pprof) and the allocations
// it made (TAG.bridge.allocs, TAG.sidecar.allocs), to read with `go tool pprof -top`.
func BenchmarkProcs(b *testing.B) {
	cs := children(b)
	type shape struct {
		c         child
		n, window int
		parts     int
	}
	shapes := []shape{{cs[0], 2, 64, 8}, {cs[0], 1, 64, 1}, {cs[0], 1, 1, 1}}
	if len(cs) > 1 {
		shapes = append(shapes, shape{cs[1], 2, 64, 8}, shape{cs[1], 1, 1, 1})
	}
	for _, s := range shapes {
		mode := "lockstep"
		if s.window > 1 {
			mode = fmt.Sprintf("window%d", s.window)
		}
		tag := fmt.Sprintf("%s-c%d-%s-p%d", s.c.name, s.n, mode, s.parts)
		b.Run(strings.ReplaceAll(tag, "-", "/"), func(b *testing.B) {
			runDeployed(b, tag, actionLine(s.c.argv, s.n, s.window), s.parts, deployment{})
		})
	}
}

// deployment is how runDeployed runs a config line besides the line itself.
type deployment struct {
	// native puts the native Go streamlet (no child) in the bridge's place.
	native bool
	// sidecarEnv is the sidecar's extra environment (FLOW_DELIVERY=exactly-once).
	sidecarEnv []string
	// keys keys the records (0: keyless), as produceKeyed does.
	keys int
	// records and warm, when records is not 0, are the records of each run and of the
	// warm-up (else BENCH_RECORDS, and up to 2,000).
	records, warm int
	// state deploys the inlet "in" with a changelog, for a line with --state in: a compacted
	// topic of the inlet's partitions (FLOW_INLET_IN_STATE_TOPIC), a state directory of its
	// own (FLOW_STATE_DIR) and a free FLOW_SIDECAR_PORT in both processes.
	state bool
}

// runDeployed runs one deployed-shape benchmark of the config line on parts partitions and
// reports its figures; tag names its profiles. Each process's figures are what it spent
// during the timed runs (benchFlow's meters), per record of those runs: the sidecar's, the
// streamlet process's (the bridge's own, its children not counted, or the native streamlet's,
// under "native-" instead of "bridge-"), and with the bridge the CPU of its children, the
// action's processes (child-cpu-µs/rec). It returns the processes, still running, and the
// records they moved (warm-up included).
func runDeployed(b *testing.B, tag, line string, parts int, dep deployment) (*procPipeline, int) {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	side := "bridge"
	if dep.native {
		side = "native"
	}
	br := newBroker(b)
	statsDir := b.TempDir()
	pp := deploy(b, br, roleProcs(dir, statsDir, tag, side), line, parts, dep)
	sc, st := pp.sidecar.Pid(), pp.bridge.Pid()
	seq := map[string]int{}
	meters := []meter{}
	for _, x := range []struct {
		side string
		pid  int
		p    *testkit.Proc
	}{{"sidecar", sc, pp.sidecar}, {side, st, pp.bridge}} {
		stats := filepath.Join(statsDir, tag+"."+x.side+".memstats")
		meters = append(meters,
			meter{[]string{x.side + "-cpu-µs/rec"}, func() []float64 { return []float64{micros(procCPU(x.pid))} }},
			meter{[]string{x.side + "-reads/rec", x.side + "-writes/rec", x.side + "-ctxsw/rec"}, func() []float64 {
				n := procIO(x.pid)
				return []float64{float64(n[0]), float64(n[1]), float64(n[2])}
			}},
			meter{[]string{x.side + "-allocs/rec", x.side + "-B/rec"}, func() []float64 {
				seq[x.side]++
				m, bytes := memStats(b, x.p, stats, seq[x.side])
				return []float64{float64(m), float64(bytes)}
			}})
	}
	if !dep.native {
		meters = append(meters, meter{[]string{"child-cpu-µs/rec"}, func() []float64 { return []float64{micros(childrenOf(st))} }})
	}
	var records int
	if dep.records > 0 {
		records = benchFlowOf(b, br, pp.in, pp.out, parts, dep.keys, dep.records, dep.warm, pp.check, meters...)
	} else {
		records = benchFlowKeyed(b, br, pp.in, pp.out, parts, dep.keys, pp.check, meters...)
	}
	pp.alive(b)
	b.ReportMetric(mib(pp.sidecar.Status("VmHWM")), "sidecar-peak-MiB")
	b.ReportMetric(mib(pp.bridge.Status("VmHWM")), side+"-peak-MiB")
	return pp, records
}

// deploy starts the processes how runs for the config line on parts partitions of br, as dep
// says, and waits until they are ready.
func deploy(b *testing.B, br *broker, how procs, line string, parts int, dep deployment) *procPipeline {
	sidecarEnv := dep.sidecarEnv
	changelog := ""
	if dep.state {
		changelog = br.name("state")
		br.create(b, changelog, parts, "cleanup.policy", "compact")
		port := "FLOW_SIDECAR_PORT=" + strconv.Itoa(testkit.FreePort(b))
		how.bridgeEnv = append(how.bridgeEnv, port)
		sidecarEnv = append(slices.Clone(sidecarEnv), port, "FLOW_INLET_IN_STATE_TOPIC="+changelog, "FLOW_STATE_DIR="+b.TempDir())
	}
	pp := startProcs(b, br, how, line, parts, sidecarEnv...)
	pp.changelog = changelog
	pp.waitReady(b)
	return pp
}

// micros is d in microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// procCPU returns the CPU time (user + system, children excluded) pid has used.
func procCPU(pid int) time.Duration {
	own, _ := procTimes(pid)
	return own
}

// childrenOf returns the CPU time pid's children have used: each live child's own (its
// /proc/PID/stat, read while it runs), plus what pid's reaped children used in their lives
// (its cutime + cstime). Between two readings it grows by exactly what the children spent in
// between, a child that exited and was reaped meanwhile included (its last own figure is
// replaced by its whole life's). Of the bridge, it is the CPU of the action's processes.
func childrenOf(pid int) time.Duration {
	_, reaped := procTimes(pid) // first: a child reaped after is then counted in neither
	live := time.Duration(0)
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, s := range strings.Fields(string(data)) {
			if kid, err := strconv.Atoi(s); err == nil {
				live += procCPU(kid)
			}
		}
	}
	return reaped + live
}

// procTimes returns the CPU time pid has used itself (utime + stime) and that its reaped
// children used (cutime + cstime), from /proc/PID/stat; zeros when pid is gone.
func procTimes(pid int) (own, reaped time.Duration) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(stat)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var t [4]int64
	for i := range t {
		t[i], _ = strconv.ParseInt(rest[11+i], 10, 64)
	}
	const tick = time.Second / 100 // USER_HZ
	return time.Duration(t[0]+t[1]) * tick, time.Duration(t[2]+t[3]) * tick
}

// procIO returns the read and write system calls pid has made (syscr, syscw of
// /proc/PID/io) and the context switches of its threads (those still running), or zeros.
func procIO(pid int) [3]int64 {
	var n [3]int64
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return n
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			n[0], _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n[1], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		data, _ := os.ReadFile(t)
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n[2] += c
			}
		}
	}
	return n
}

// memStats signals p (SIGUSR1) and returns the allocation count and bytes it writes to path
// as its answer number seq.
func memStats(b testing.TB, p *testkit.Proc, path string, seq int) (mallocs, bytes uint64) {
	b.Helper()
	if err := syscall.Kill(p.Pid(), syscall.SIGUSR1); err != nil {
		b.Fatal(err)
	}
	answered := func() bool { // a file, not a channel: the process is another one
		var got int
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(data), &got, &mallocs, &bytes)
		return err == nil && got >= seq
	}
	if !testkit.Eventually(10*time.Second, answered) {
		b.Fatalf("%s wrote no memory statistics %d to %s within 10 s of SIGUSR1", p.Name, seq, path)
	}
	return mallocs, bytes
}
