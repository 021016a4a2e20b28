package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// BenchmarkGap measures the batch boundary: how long the child sits idle between the
// batches of one partition, where the protocol allows one batch in flight. It runs the
// deployed shape (BenchmarkProcs) with the gapecho action (bench/gapecho: an echo that declares
// a window of 64 and records every wait for input it has with nothing left to answer), one
// process, on 1 and 8 partitions, and reports the idle periods: how many per 100 records, their
// median and 90th percentile, and the idle time per record, beside the rate and the CPU of the
// sidecar and the bridge.
func BenchmarkGap(b *testing.B) {
	binaries(b)
	for _, parts := range partitionsOf {
		b.Run(fmt.Sprintf("p%d", parts), func(b *testing.B) {
			stats := filepath.Join(b.TempDir(), "idle.txt")
			tag := fmt.Sprintf("gap-c1-window64-p%d", parts)
			pp, records := runDeployed(b, tag, actionLine([]string{bins.gapEcho, stats}, 1, 64), parts, deployment{})
			// The child writes its idle periods when the bridge shuts it down.
			for _, p := range []*testkit.Proc{pp.sidecar, pp.bridge} {
				if err := p.Stop(30 * time.Second); err != nil {
					b.Fatal(err)
				}
			}
			idle, err := readIdle(stats)
			if err != nil {
				b.Fatal(err)
			}
			// The last wait is the one shutdown ended, and waits of 50 ms or more come only
			// where the stream stops (between runs): neither is a boundary of the stream.
			var gaps []time.Duration
			var total time.Duration
			for _, d := range idle[:max(len(idle)-1, 0)] {
				if d < 50*time.Millisecond {
					gaps = append(gaps, d)
					total += d
				}
			}
			b.ReportMetric(100*float64(len(gaps))/float64(records), "idles/100rec")
			b.ReportMetric(float64(percentile(gaps, 50).Microseconds()), "idle-p50-µs")
			b.ReportMetric(float64(percentile(gaps, 90).Microseconds()), "idle-p90-µs")
			b.ReportMetric(float64(total.Microseconds())/float64(records), "idle-µs/rec")
		})
	}
}

// readIdle reads the idle periods gapecho wrote, in nanoseconds one a line.
func readIdle(path string) ([]time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gapecho's idle periods: %w", err)
	}
	var ds []time.Duration
	for _, l := range strings.Fields(string(data)) {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("gapecho's idle periods in %s: %w", path, err)
		}
		ds = append(ds, time.Duration(n))
	}
	return slices.Clip(ds), nil
}
