package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkThroughput measures records per second through the sidecar: a trivial in-test
// process (each record emitted once, then the Ack) on the in-process broker, every record
// consumed, handed over, produced to the outlet and committed. Producing the input is not
// timed. It runs at FLOW_COMMIT_INTERVAL=0 (a commit after every round) and at the default,
// and reports the offset commits made per 1,000 records.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, interval := range []string{"0", "100ms"} {
			b.Run(fmt.Sprintf("value=%dB/interval=%s", size, interval), func(b *testing.B) {
				benchThroughput(b, size, interval)
			})
		}
	}
}

// benchThroughput is one case of BenchmarkThroughput.
func benchThroughput(b *testing.B, size int, interval string) {
	const parts, chunk = 8, 20000
	k := newBroker(b)
	in, out := k.Topic(b, "in", parts), k.Topic(b, "out", parts)
	f := newProcess(b, echo)
	e := baseEnv(b, k, f, in, out)
	e["FLOW_COMMIT_INTERVAL"] = interval
	r := start(b, e.config(b))
	value := make([]byte, size)
	var total int64
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		rs := make([]*kgo.Record, chunk)
		for i := range rs {
			rs[i] = &kgo.Record{Topic: in, Partition: int32(i % parts), Value: value}
		}
		k.Produce(b, rs...)
		total += chunk
		began := time.Now()
		b.StartTimer()
		for r.sc.Stats().RecordsCommitted < total {
			time.Sleep(200 * time.Microsecond)
		}
		elapsed += time.Since(began)
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(metricCount(b, r.sc.Registry(), commitsMetric))*1000/float64(total), "commits/krecord")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPeakRSS32Partitions runs the sidecar as a child process (the test binary playing
// it) on 32 partitions while a fast producer writes 1 KiB records as fast as it can, and
// reports the child's peak resident memory and its throughput, with Go's default memory
// policy and with a soft limit (GOMEMLIMIT) set for the sidecar's container.
func BenchmarkPeakRSS32Partitions(b *testing.B) {
	for _, limit := range []string{"", "64MiB"} {
		name := "GOMEMLIMIT=" + limit
		if limit == "" {
			name = "GOMEMLIMIT=unset"
		}
		b.Run(name, func(b *testing.B) { peakRSS(b, limit) })
	}
}

func peakRSS(b *testing.B, memLimit string) {
	const parts, n, size = 32, 200000, 1024
	for b.Loop() {
		k := newBroker(b)
		in, out := k.Topic(b, "in", parts), k.Topic(b, "out", parts)
		f := newProcess(b, echo)
		e := baseEnv(b, k, f, in, out)
		cmd := testkit.Command(context.Background(), roleSidecar, "-test.run=^$")
		if memLimit != "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit)
		}
		for key, v := range e {
			cmd.Env = append(cmd.Env, key+"="+v)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		var wg sync.WaitGroup
		for w := range 4 { // the fast producer: four writers, batches of 1000
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n/1000; i += 4 {
					rs := make([]*kgo.Record, 1000)
					for j := range rs {
						rs[j] = &kgo.Record{Topic: in, Partition: int32((i*1000 + j) % parts), Value: randomBytes(size)}
					}
					if err := k.Admin.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		produced := time.Since(began)
		want := map[int32]int64{}
		for p := range int32(parts) {
			want[p] = n / parts
		}
		waitFor(b, "every record committed", func() bool { return allCommitted(b, k, e["FLOW_CONSUMER_GROUP"], in, want) })
		took := time.Since(began)
		// VmHWM of the child's own address space; rusage's maxrss would also count the
		// parent's memory at the moment of exec.
		hwm := vmHWM(b, cmd.Process.Pid)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("child sidecar: %v\n%s", err, stderr.String())
		}
		b.ReportMetric(float64(hwm)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "records/s")
		b.ReportMetric(float64(n)/produced.Seconds(), "produced-records/s")
		b.ReportMetric(0, "ns/op")
	}
}

// vmHWM returns the peak resident set of process pid in KiB, from /proc.
func vmHWM(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
