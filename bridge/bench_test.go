package bridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

const envNative = "BRIDGE_BENCH_NATIVE"

// benchValue is every record's value: the payload of the stdio benchmarks.
var benchValue = []byte(`{"id":12345,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon"}`)

const benchBatch = 100 // records per batch

// BenchmarkBridge measures records/s through `millrace bridge` (the real binary, a separate
// process) driven by a fake sidecar over loopback gRPC: one 100-record batch per partition in
// flight, over 1, 4 and 16 partitions, with the Go echo action (actions/go-echo) and the Python
// echo loop (stdio/testdata/echo.py), each run one process at a time (c1, the spec's default)
// and with two processes and a window of 64 (c2w64). Beside them, two ceilings: the bare loop
// of the stdio benchmark streaming the same child with nothing else (bare), and a native Go
// streamlet answering the same batches in-process with no child (native). At 4 partitions
// each bridge case runs again with a traceparent header on every record (…/traceparent: the
// items child spans instead of new roots). It reports the
// streamlet process's own CPU per record (children excluded) and its peak RSS.
//
//	go test -run '^$' -bench BenchmarkBridge -benchtime 3s ./bridge/
func BenchmarkBridge(b *testing.B) {
	dir := b.TempDir()
	millrace, goEcho := filepath.Join(dir, "millrace"), filepath.Join(dir, "go-echo")
	for bin, pkg := range map[string]string{millrace: "../cmd/millrace", goEcho: "../actions/go-echo"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	echoPy, err := filepath.Abs("../stdio/testdata/echo.py")
	if err != nil {
		b.Fatal(err)
	}
	children := []struct {
		name string
		argv []string
	}{
		{"go", []string{goEcho}},
		{"python", []string{"python3", echoPy}},
	}
	configs := []struct{ name, flags string }{{"c1", ""}, {"c2w64", "--concurrency 2 --window 64"}}
	partitions := []int{1, 4, 16}
	for _, c := range children {
		if _, err := exec.LookPath(c.argv[0]); err != nil {
			b.Logf("no %s child: %v", c.name, err)
			continue
		}
		b.Run(c.name+"/bare", func(b *testing.B) { benchBare(b, c.argv) })
		for _, cfg := range configs {
			for _, p := range partitions {
				b.Run(fmt.Sprintf("%s/bridge-%s/p%d", c.name, cfg.name, p), func(b *testing.B) {
					line := "bench --in in=bench.v1 --out out=bench.v1 " + cfg.flags + " -- " + actionconf.Join(c.argv)
					addr, cmd := startProc(b, exec.Command(millrace, "bridge"), "MILLRACE_ACTION="+line)
					benchStreamlet(b, addr, cmd, p, nil)
				})
				if p == 4 { // the same with a traceparent on every record: child spans, not roots
					b.Run(fmt.Sprintf("%s/bridge-%s/p%d/traceparent", c.name, cfg.name, p), func(b *testing.B) {
						line := "bench --in in=bench.v1 --out out=bench.v1 " + cfg.flags + " -- " + actionconf.Join(c.argv)
						addr, cmd := startProc(b, exec.Command(millrace, "bridge"), "MILLRACE_ACTION="+line)
						benchStreamlet(b, addr, cmd, p, benchTraceparent)
					})
				}
			}
		}
	}
	for _, p := range partitions {
		b.Run(fmt.Sprintf("native/p%d", p), func(b *testing.B) {
			addr, cmd := startProc(b, exec.Command(os.Args[0], "-test.run=^$"), testkit.RoleEnv("native"))
			benchStreamlet(b, addr, cmd, p, nil)
		})
	}
}

// startProc starts a streamlet process on a free port and waits until it answers Discover. It
// is stopped with SIGTERM when the benchmark ends.
func startProc(b *testing.B, cmd *exec.Cmd, env string) (string, *exec.Cmd) {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd.Env = append(os.Environ(), env, protocol.EnvProcessPort+"="+port)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Errorf("%s: %v\n%s", cmd.Path, err, stderr.String())
		}
	})
	addr := "127.0.0.1:" + port
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := flowv1grpc.NewDiscoveryClient(conn).Discover(ctx, &flowv1.SidecarInfo{})
		cancel()
		if err == nil {
			return addr, cmd
		}
		if i == 200 {
			b.Fatalf("%s never answered Discover: %v\n%s", cmd.Path, err, stderr.String())
		}
		time.Sleep(25 * time.Millisecond) // the sidecar's discovery retry, shortened
	}
}

// procStat returns the CPU time (user + system, children excluded) and peak RSS of pid.
func procStat(b *testing.B, pid int) (time.Duration, int64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(rest[11], 10, 64)
	stime, _ := strconv.ParseInt(rest[12], 10, 64)
	cpu := time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	var hwm int64
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			hwm, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return cpu, hwm << 10
}

// benchTraceparent is the header of the traced variant's records.
var benchTraceparent = &flowv1.Header{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}

// benchStreamlet drives the streamlet at addr as a sidecar: Start, then rounds of one batch
// per partition, each round waiting for every Ack. header, when not nil, is on every record.
func benchStreamlet(b *testing.B, addr string, cmd *exec.Cmd, partitions int, header *flowv1.Header) {
	benchStreamletOf(b, addr, cmd, partitions, header, benchValue)
}

// benchStreamletOf is benchStreamlet with value as every record's value.
func benchStreamletOf(b *testing.B, addr string, cmd *exec.Cmd, partitions int, header *flowv1.Header, value []byte) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := flowv1grpc.NewStreamletClient(conn).Run(ctx)
	if err != nil {
		b.Fatal(err)
	}
	err = stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: &flowv1.Start{
		ConversationId: "bench", Pipeline: "bench", Streamlet: "bench", ConfigJson: "{}",
		Inlets: []*flowv1.PortBinding{{Port: "in", Topic: "in"}}, Outlets: []*flowv1.PortBinding{{Port: "out", Topic: "out"}},
		MaxMessageBytes: 4 << 20,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	acks := make(chan error, partitions)
	var emits int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				if err != io.EOF {
					acks <- err
				}
				return
			}
			switch m := m.GetMessage().(type) {
			case *flowv1.FromProcess_Emit:
				emits++
			case *flowv1.FromProcess_Ack:
				acks <- nil
			case *flowv1.FromProcess_Fail:
				acks <- errors.New(m.Fail.GetError().GetMessage())
			}
		}
	})
	batches := make([]*flowv1.ToProcess, partitions)
	for p := range batches {
		recs := make([]*flowv1.InputRecord, benchBatch)
		for i := range recs {
			recs[i] = &flowv1.InputRecord{Offset: int64(i), Record: &flowv1.Record{Value: value}}
			if header != nil {
				recs[i].Record.Headers = []*flowv1.Header{header}
			}
		}
		batches[p] = &flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{Inlet: "in", Partition: int32(p), Records: recs}}}
	}
	var (
		id      uint64
		records int
		start   time.Time
		cpu0    time.Duration
	)
	for b.Loop() {
		if records == 0 {
			start = time.Now()
			cpu0, _ = procStat(b, cmd.Process.Pid)
		}
		for _, m := range batches {
			id++
			m.GetBatch().BatchId = id
			if err := stream.Send(m); err != nil {
				b.Fatal(err)
			}
		}
		for range batches {
			if err := <-acks; err != nil {
				b.Fatal(err)
			}
		}
		records += benchBatch * partitions
	}
	elapsed := time.Since(start)
	cpu, rss := procStat(b, cmd.Process.Pid)
	_ = stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{}}})
	_ = stream.CloseSend()
	wg.Wait()
	if emits != records {
		b.Fatalf("%d emits for %d records", emits, records)
	}
	b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64((cpu-cpu0).Microseconds())/float64(records), "proc-cpu-µs/record")
	b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
}

// benchBare is the ceiling of the stdio benchmark: the child streamed with nothing but line
// writes and reads.
func benchBare(b *testing.B, argv []string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReaderSize(stdout, 64<<10)
	w := bufio.NewWriterSize(stdin, 64<<10)
	fmt.Fprintf(w, "%s\n", `{"type":"hello","protocol":1,"action":"bench","config":{}}`)
	w.Flush()
	if _, err := r.ReadSlice('\n'); err != nil {
		b.Fatal(err)
	}
	answers := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if _, err := r.ReadSlice('\n'); err != nil {
				return
			}
			answers++
		}
	})
	items := 0
	start := time.Now()
	for b.Loop() {
		fmt.Fprintf(w, `{"type":"item","delivery":"d%d","id":"bench/0/%d","payload":%s,"partition":0,"offset":%d,"timestamp":0,"attempt":1}`+"\n", items, items, benchValue, items)
		items++
	}
	w.WriteString(`{"type":"shutdown"}` + "\n")
	w.Flush()
	stdin.Close()
	wg.Wait()
	elapsed := time.Since(start)
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	if answers != 2*items {
		b.Fatalf("%d answer lines for %d items", answers, items)
	}
	b.ReportMetric(float64(items)/elapsed.Seconds(), "records/s")
}

// runNative serves the native streamlet on FLOW_PROCESS_PORT until SIGTERM.
func runNative() int {
	cfg, err := bridge.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cfg.Port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The benchmark's native Go streamlet: every record echoed to "out", one goroutine per
	// batch (batches of several partitions at once, as the bridge does), then Ack; no child.
	native := &testkit.Streamlet{Async: true, Options: bridge.GRPCOptions()}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; native.Stop() }()
	if err := native.Serve(context.Background(), lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
