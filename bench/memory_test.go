package bench_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkMemory measures the peak RSS (VmHWM) of `millrace sidecar` and `millrace bridge`,
// each its own process as in a pod, in two cases:
//
//   - backlog/N: a producer writes N 200-byte records to 8 partitions as fast as it can while
//     the slowest action (the Python echo loop, one process, one delivery at a time) drains
//     them; the backlog (records produced and not yet out) at the end of the production is
//     reported beside the peaks. Memory is flat when the peaks do not grow with N.
//   - batches-1MiB/p32/N: N MiB of 10 KiB records on 32 partitions (6 and 12 batches a
//     partition, above the sidecar's high water of 4), so that every batch is 1 MiB (the
//     default batch limit: 100 records, 1 MiB), through the Go echo action with 4 processes
//     and a window of 64, until every record is out.
//
// It also reports each process's RSS when idle (after a warm-up of 1,000 records). Run it
// with -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	cs := children(b)
	slow := cs[len(cs)-1] // Python when there is python3
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("backlog/%dk", n/1000), func(b *testing.B) {
			benchMemory(b, actionLine(slow.argv, 1, 1), 8, n, valueSize, false)
		})
	}
	for _, n := range []int{32 * 100 * 6, 32 * 100 * 12} { // 6 and 12 batches a partition
		b.Run(fmt.Sprintf("batches-1MiB/p32/%dMiB", n*10/1024), func(b *testing.B) {
			benchMemory(b, actionLine(cs[0].argv, 4, 64), 32, n, 10<<10, true,
				"FLOW_INLET_IN_BATCH_MAX_RECORDS=100", "FLOW_INLET_IN_BATCH_MAX_BYTES=1Mi")
		})
	}
}

// benchMemory runs line as two processes on parts partitions, produces n records of size
// bytes as fast as it can, and then either waits until every record is out (drain) or polls
// 3 s more, and reports the peaks.
func benchMemory(b *testing.B, line string, parts, n, size int, drain bool, sidecarEnv ...string) {
	br := newBroker(b)
	pp := startProcs(b, br, realProcs(b), line, parts, sidecarEnv...)
	prod := br.producer(b)
	cnt := br.counter(b, pp.out)
	cnt.check = pp.check
	const warm = 1000
	if err := produce(prod, pp.in, parts, 0, warm, size); err != nil {
		b.Fatal(err)
	}
	if err := cnt.waitFor(warm, 2*time.Minute); err != nil {
		pp.alive(b)
		b.Fatalf("warm-up: %v", err)
	}
	idleS, idleB := pp.sidecar.Status("VmRSS"), pp.bridge.Status("VmRSS")
	first := warm
	var backlog int
	for b.Loop() {
		done := make(chan error, 1)
		go func(first int) { done <- produce(prod, pp.in, parts, first, n, size) }(first)
		for produced := false; !produced; {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				produced = true
			default:
				if err := cnt.pollFor(50 * time.Millisecond); err != nil {
					b.Fatal(err)
				}
			}
		}
		first += n
		backlog = max(backlog, first-cnt.seen)
		if drain {
			if err := cnt.waitFor(first, 5*time.Minute); err != nil {
				pp.alive(b)
				b.Fatal(err)
			}
		} else if err := cnt.pollFor(3 * time.Second); err != nil {
			b.Fatal(err)
		}
		pp.alive(b)
	}
	b.ReportMetric(mib(pp.sidecar.Status("VmHWM")), "sidecar-peak-MiB")
	b.ReportMetric(mib(pp.bridge.Status("VmHWM")), "bridge-peak-MiB")
	b.ReportMetric(mib(idleS), "sidecar-idle-MiB")
	b.ReportMetric(mib(idleB), "bridge-idle-MiB")
	b.ReportMetric(float64(backlog), "backlog-records")
}
