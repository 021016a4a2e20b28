package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkThroughput measures records per second through the sidecar: a trivial in-test
// process (each record emitted once, then the Ack) on the in-process broker, every record
// consumed, handed over, produced to the outlet and committed. Producing the input is not
// timed.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("value=%dB", size), func(b *testing.B) {
			const parts, chunk = 8, 20000
			k := newBroker(b)
			in, out := k.topic(b, "in", parts), k.topic(b, "out", parts)
			f := newProcess(b, echo)
			e := baseEnv(b, k, f, in, out)
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
				k.produce(b, rs...)
				total += chunk
				began := time.Now()
				b.StartTimer()
				for r.sc.Stats().RecordsCommitted < total {
					time.Sleep(200 * time.Microsecond)
				}
				elapsed += time.Since(began)
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkPeakRSS32Partitions runs the sidecar as a child process (the test binary playing
// it) on 32 partitions while a fast producer writes 1 KiB records as fast as it can, and
// reports the child's peak resident memory and its throughput.
func BenchmarkPeakRSS32Partitions(b *testing.B) {
	const parts, n, size = 32, 200000, 1024
	for b.Loop() {
		k := newBroker(b)
		in, out := k.topic(b, "in", parts), k.topic(b, "out", parts)
		f := newProcess(b, echo)
		e := baseEnv(b, k, f, in, out)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1")
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
					if err := k.admin.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
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
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("child sidecar: %v\n%s", err, stderr.String())
		}
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
		b.ReportMetric(float64(rss)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "records/s")
		b.ReportMetric(float64(n)/produced.Seconds(), "produced-records/s")
		b.ReportMetric(0, "ns/op")
	}
}
