package bench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// Every throughput benchmark moves BENCH_RECORDS records (default 20,000) per run, one run
// per iteration (run them with -benchtime Nx), and reports the median rate of its runs as
// records/s, the CPU this test process spent per record (the broker, sidecar, bridge,
// producer and consumer; action processes excluded) as cpu-µs/rec, and the CPU its child
// processes spent per record (the action's processes end to end; the sidecar and the bridge,
// with the action's processes uncounted, in the deployed shape) as children-cpu-µs/rec.
const defaultRecords = 20000

var (
	concurrencies = []int{1, 2, 4}
	partitionsOf  = []int{1, 8}
)

// BenchmarkE2E measures records/s inlet → outlet through the in-process broker, the real
// sidecar, gRPC over loopback, the real bridge and the echo action, as `millrace run` wires
// them: the Go echo action and the Python echo loop, 1, 2 and 4 processes, one delivery at a
// time and with a window of 64, on 1 and 8 partitions, 200-byte JSON values, keyless.
//
//	go test -run '^$' -bench 'BenchmarkE2E' -benchtime 3x ./bench/
func BenchmarkE2E(b *testing.B) {
	for _, c := range children(b) {
		for _, n := range concurrencies {
			for _, m := range modes {
				for _, parts := range partitionsOf {
					b.Run(fmt.Sprintf("%s/c%d/%s/p%d", c.name, n, m.name, parts), func(b *testing.B) {
						br := newBroker(b)
						a := parseAction(b, actionLine(c.argv, n, m.window))
						p := startPipeline(b, br, a, parts, batchLimits{}, serveBridge(b, a))
						benchFlow(b, br, p.in, p.out, parts, nil)
					})
				}
			}
		}
	}
}

// BenchmarkNative is the ceiling without the bridge: a native Go streamlet (a gRPC server
// echoing every record, no child) behind the same sidecar and broker.
func BenchmarkNative(b *testing.B) {
	for _, parts := range partitionsOf {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			br := newBroker(b)
			a := parseAction(b, actionLine([]string{"native"}, 1, 1))
			p := startPipeline(b, br, a, parts, batchLimits{}, serveNative(a))
			benchFlow(b, br, p.in, p.out, parts, nil)
		})
	}
}

// BenchmarkBroker is the broker alone: the same records produced with franz-go and consumed
// back from the same topic, with nothing in between.
func BenchmarkBroker(b *testing.B) {
	for _, parts := range partitionsOf {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			br := newBroker(b)
			t := br.topic(b, "in", parts)
			benchFlow(b, br, t, t, parts, nil)
		})
	}
}

// A meter is a set of counters of other processes (CPU, system calls, allocations) that
// benchFlow reads just before and just after each timed run: it reports what each grew by over
// the timed runs, per record of those runs, under the unit of the same index. Startup and
// warm-up are left out, as they are of the rate.
type meter struct {
	units []string
	read  func() []float64
}

// benchFlow produces BENCH_RECORDS records per run to in, round-robin over its partitions,
// and times each run from its first produce until the last of its records is read back from
// out. A warm-up of 2,000 records first lets the group join and the processes start. It
// returns the records it moved, warm-up included. check, when not nil, is called while
// waiting and ends the benchmark early with its error; meters are reported beside the rate.
func benchFlow(b *testing.B, br *broker, in, out string, parts int, check func() error, meters ...meter) int {
	return benchFlowKeyed(b, br, in, out, parts, 0, check, meters...)
}

// benchFlowKeyed is benchFlow with records of keys keys (0: keyless), as produceKeyed writes
// them.
func benchFlowKeyed(b *testing.B, br *broker, in, out string, parts, keys int, check func() error, meters ...meter) int {
	n := envInt("BENCH_RECORDS", defaultRecords)
	return benchFlowOf(b, br, in, out, parts, keys, n, min(n, 2000), check, meters...)
}

// benchFlowOf is benchFlowKeyed with n records a run after a warm-up of warm.
func benchFlowOf(b *testing.B, br *broker, in, out string, parts, keys, n, warm int, check func() error, meters ...meter) int {
	prod := br.producer(b)
	cnt := br.counter(b, out)
	cnt.check = check
	if err := produceKeyed(prod, in, parts, keys, 0, warm, valueSize); err != nil {
		b.Fatal(err)
	}
	if err := cnt.waitFor(warm, 2*time.Minute); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	next := warm
	var rates runs
	var cpu, kids time.Duration
	grown := make([][]float64, len(meters))
	for i, m := range meters {
		grown[i] = make([]float64, len(m.units))
	}
	for b.Loop() {
		at := make([][]float64, len(meters))
		for i, m := range meters {
			at[i] = m.read()
		}
		start, cpu0, kids0 := time.Now(), cpuTime(), childrenCPU()
		errc := make(chan error, 1)
		go func(first int) { errc <- produceKeyed(prod, in, parts, keys, first, n, valueSize) }(next)
		err := cnt.waitFor(next+n, 5*time.Minute)
		if perr := <-errc; perr != nil {
			b.Fatalf("producing: %v", perr)
		}
		if err != nil {
			b.Fatal(err)
		}
		rates = append(rates, float64(n)/time.Since(start).Seconds())
		cpu += cpuTime() - cpu0
		kids += childrenCPU().since(kids0)
		for i, m := range meters {
			for j, v := range m.read() {
				grown[i][j] += v - at[i][j]
			}
		}
		next += n
	}
	timed := float64(n * len(rates))
	b.Logf("records/s of each run: %.0f", rates)
	b.ReportMetric(rates.median(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/timed, "cpu-µs/rec")
	b.ReportMetric(float64(kids.Microseconds())/timed, "children-cpu-µs/rec")
	for i, m := range meters {
		for j, unit := range m.units {
			b.ReportMetric(grown[i][j]/timed, unit)
		}
	}
	return next
}

// cpuTime is the CPU this process has used (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBridgeOnly is the ceiling without Kafka: the same bridge and action driven over
// loopback gRPC by a fake sidecar that keeps one 100-record batch in flight per partition (the
// sidecar's rule and default batch size), sending a partition's next batch as soon as its
// previous one is acknowledged.
func BenchmarkBridgeOnly(b *testing.B) {
	for _, c := range children(b) {
		for _, n := range concurrencies {
			for _, m := range modes {
				for _, parts := range partitionsOf {
					b.Run(fmt.Sprintf("%s/c%d/%s/p%d", c.name, n, m.name, parts), func(b *testing.B) {
						a := parseAction(b, actionLine(c.argv, n, m.window))
						benchFakeSidecar(b, serveBridge(b, a), parts)
					})
				}
			}
		}
	}
}

// fakeSidecar is the client side of a Streamlet.Run conversation, with no Kafka.
type fakeSidecar struct {
	stream *testkit.Stream
	acks   chan uint64 // batch ids, as acknowledged
	emits  int         // written by the receiver; read after it ends
	errc   chan error  // the receiver's end
}

// batchRecords is the default of records per batch of the fake sidecar: the sidecar's
// default; BENCH_BATCH_RECORDS changes it.
const batchRecords = 100

func benchFakeSidecar(b *testing.B, serve func(context.Context, net.Listener) error, parts int) {
	n := envInt("BENCH_RECORDS", defaultRecords)
	perBatch := envInt("BENCH_BATCH_RECORDS", batchRecords)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, lis) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			b.Errorf("the streamlet process: %v", err)
		}
	}()
	conn := testkit.DialProcess(b, lis.Addr().String())
	streamCtx, cancelStream := context.WithCancel(context.Background())
	defer cancelStream()
	stream, err := conn.Run(streamCtx)
	if err != nil {
		b.Fatal(err)
	}
	err = stream.Start(&flowv1.Start{
		ConversationId: "bench", Pipeline: "bench", Streamlet: "bench", ConfigJson: "{}",
		Inlets: []*flowv1.PortBinding{{Port: "in", Topic: "in"}}, Outlets: []*flowv1.PortBinding{{Port: "out", Topic: "out"}},
		MaxMessageBytes: 4 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	fs := &fakeSidecar{stream: stream, acks: make(chan uint64, parts), errc: make(chan error, 1)}
	go fs.receive()

	var (
		id     uint64
		offset = make([]int64, parts)
		sent   int
	)
	// send sends partition p's next batch, if records are left in this run; it returns
	// whether it did.
	partOf := map[uint64]int{}
	send := func(p, left int) bool {
		if left <= 0 {
			return false
		}
		k := min(perBatch, left)
		recs := make([]*flowv1.InputRecord, k)
		for i := range recs {
			recs[i] = &flowv1.InputRecord{Offset: offset[p], TimestampMs: time.Now().UnixMilli(), Record: &flowv1.Record{Value: value(sent+i, valueSize)}}
			offset[p]++
		}
		id++
		partOf[id] = p
		if err := stream.Batch(&flowv1.Batch{BatchId: id, Inlet: "in", Partition: int32(p), Records: recs}); err != nil {
			b.Fatal(err)
		}
		sent += k
		return true
	}
	// run moves total records: one batch in flight per partition.
	run := func(total int) {
		target := sent + total
		inflight := 0
		for p := range parts {
			if send(p, target-sent) {
				inflight++
			}
		}
		for inflight > 0 {
			var bid uint64
			select {
			case bid = <-fs.acks:
			case err := <-fs.errc:
				b.Fatalf("the stream ended: %v", err)
			}
			inflight--
			p := partOf[bid]
			delete(partOf, bid)
			if send(p, target-sent) {
				inflight++
			}
		}
	}
	run(min(n, 2000)) // warm-up: the processes start on the first items
	var rates runs
	var cpu, kids time.Duration
	for b.Loop() {
		start, cpu0, kids0 := time.Now(), cpuTime(), childrenCPU()
		run(n)
		rates = append(rates, float64(n)/time.Since(start).Seconds())
		cpu += cpuTime() - cpu0
		kids += childrenCPU().since(kids0)
	}
	if err := stream.Stop("done"); err != nil {
		b.Fatal(err)
	}
	if err := <-fs.errc; err != nil {
		b.Fatalf("the stream ended: %v", err)
	}
	if fs.emits != sent {
		b.Fatalf("%d emits for %d records", fs.emits, sent)
	}
	b.Logf("records/s of each run: %.0f", rates)
	b.ReportMetric(rates.median(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*len(rates)), "cpu-µs/rec")
	b.ReportMetric(float64(kids.Microseconds())/float64(n*len(rates)), "children-cpu-µs/rec")
}

// receive counts emits and passes acks on until the stream ends; a Fail ends it too.
func (f *fakeSidecar) receive() {
	for {
		m, err := f.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			f.errc <- err
			return
		}
		switch m := m.GetMessage().(type) {
		case *flowv1.FromProcess_Emit:
			f.emits++
		case *flowv1.FromProcess_Ack:
			f.acks <- m.Ack.GetBatchId()
		case *flowv1.FromProcess_Fail:
			f.errc <- fmt.Errorf("batch %d failed: %s", m.Fail.GetBatchId(), m.Fail.GetError().GetMessage())
			return
		}
	}
}

// BenchmarkBare is the ceiling of the child alone: the bare pipe loop of the stdio benchmark,
// the same item lines written to the action and its answers read with nothing else, one item
// at a time (lockstep) and streaming (one write per item, answers read as they come).
func BenchmarkBare(b *testing.B) {
	for _, c := range children(b) {
		for _, stream := range []bool{false, true} {
			name := c.name + "/lockstep"
			if stream {
				name = c.name + "/stream"
			}
			b.Run(name, func(b *testing.B) { benchBare(b, c.argv, stream) })
		}
	}
}

func benchBare(b *testing.B, argv []string, stream bool) {
	n := envInt("BENCH_RECORDS", defaultRecords)
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
	if _, err := stdin.Write([]byte(`{"type":"hello","protocol":1,"action":"bench","config":{}}` + "\n")); err != nil {
		b.Fatal(err)
	}
	if _, err := r.ReadSlice('\n'); err != nil {
		b.Fatal(err)
	}
	var buf []byte
	items := 0
	item := func() {
		buf = itemLine(buf[:0], items)
		items++
		if _, err := stdin.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	run := func(total int) {
		if !stream {
			for range total {
				item()
				for range 2 { // emit, done
					if _, err := r.ReadSlice('\n'); err != nil {
						b.Fatal(err)
					}
				}
			}
			return
		}
		var wg sync.WaitGroup
		var rerr error
		wg.Go(func() {
			for range 2 * total {
				if _, rerr = r.ReadSlice('\n'); rerr != nil {
					return
				}
			}
		})
		for range total {
			item()
		}
		wg.Wait()
		if rerr != nil {
			b.Fatal(rerr)
		}
	}
	run(min(n, 2000))
	var rates runs
	var kids time.Duration
	for b.Loop() {
		start, kids0 := time.Now(), procCPU(cmd.Process.Pid)
		run(n)
		rates = append(rates, float64(n)/time.Since(start).Seconds())
		kids += procCPU(cmd.Process.Pid) - kids0
	}
	if _, err := stdin.Write([]byte(`{"type":"shutdown"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	stdin.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("records/s of each run: %.0f", rates)
	b.ReportMetric(rates.median(), "records/s")
	b.ReportMetric(float64(kids.Microseconds())/float64(n*len(rates)), "children-cpu-µs/rec")
}

// itemLine appends the item line of record i: what the bridge writes for a keyless record.
func itemLine(dst []byte, i int) []byte {
	n := strconv.Itoa(i)
	dst = append(dst, `{"type":"item","delivery":"d`...)
	dst = append(dst, n...)
	dst = append(dst, `","id":"bench/0/`...)
	dst = append(dst, n...)
	dst = append(dst, `","run":"bench","payload":`...)
	dst = append(dst, value(i, valueSize)...)
	dst = append(dst, `,"inlet":"in","topic":"bench","partition":0,"offset":`...)
	dst = append(dst, n...)
	dst = append(dst, `,"timestamp":0,"attempt":1,"idempotencyKey":"bench-`...)
	dst = append(dst, n...)
	return append(dst, `"}`+"\n"...)
}
