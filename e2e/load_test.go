package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// BenchmarkLoad pushes MILLRACE_E2E_LOAD records (100,000 by default) through the pipeline
// with the Go echo action (actions/go-echo) and every default setting, on a 4-partition inlet
// written in full beforehand. It reports records/s from the sidecar's start to the last
// commit (rec/s) and from the first commit to the last (steady_rec/s), and the peak RSS
// (VmHWM) of each process: sidecar, bridge, action, and the broker (the test process itself
// for kfake; the Java process of scripts/kafka for the real broker). Run it once:
//
//	MILLRACE_E2E=1 MILLRACE_E2E_LOAD=1000000 go test ./e2e -run '^$' -bench Load -benchtime 1x
func BenchmarkLoad(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv(envLoad)); err == nil && v > 0 {
		n = v
	}
	for b.Loop() {
		loadOnce(b, n)
	}
}

func loadOnce(b *testing.B, n int) {
	br := openBroker(b, false)
	pl := newPipeline(b, br, goEcho(), 4)
	produceFast(b, pl, n)

	start := time.Now()
	r := pl.start(0)
	var first time.Time
	rss := map[string]int64{}
	var mu sync.Mutex
	sample := func() {
		mu.Lock()
		defer mu.Unlock()
		take := func(name string, pid int) {
			if v := testkit.ProcStatus(pid, "VmHWM") >> 10; v > rss[name] {
				rss[name] = v
			}
		}
		take("sidecar", r.sidecar.Pid())
		take("bridge", r.bridge.Pid())
		for _, c := range testkit.Children(r.bridge.Pid()) {
			take("action", c)
		}
		take("broker", brokerPID(br))
	}
	last, since := -1, time.Now()
	for {
		c, _ := pl.committedCount()
		if c > 0 && first.IsZero() {
			first = time.Now()
		}
		if c >= n {
			break
		}
		if c != last {
			last, since = c, time.Now()
		} else if time.Since(since) > 2*time.Minute {
			b.Fatalf("the pipeline stopped at %d of %d records\n%s", c, n, pl.logTails(20))
		}
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	end := time.Now()
	sample()

	tl := pl.tally()
	tl.check(b)
	total := end.Sub(start).Seconds()
	steady := end.Sub(first).Seconds()
	b.ReportMetric(float64(n)/total, "rec/s")
	b.ReportMetric(float64(n)/steady, "steady_rec/s")
	for _, name := range []string{"sidecar", "bridge", "action", "broker"} {
		b.ReportMetric(float64(rss[name])/1024, name+"_peak_MiB")
	}
	row := fmt.Sprintf("| %s | %d | %.1f s | %.0f | %.0f | %d MiB | %d MiB | %d MiB | %d MiB | %s |", br.Name(), n, total, float64(n)/total, float64(n)/steady,
		rss["sidecar"]/1024, rss["bridge"]/1024, rss["action"]/1024, rss["broker"]/1024, tl)
	b.Log(row)
	writeReport("load", row)
}

// produceFast writes n records to the inlet as fast as the producer goes, and remembers them.
func produceFast(b *testing.B, pl *pipeline, n int) {
	const chunk = 10_000
	for i := 0; i < n; i += chunk {
		rs := pl.records(i, min(chunk, n-i))
		var wg sync.WaitGroup
		var firstErr error
		var mu sync.Mutex
		for _, r := range rs {
			wg.Add(1)
			pl.b.Admin.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				pl.produced = append(pl.produced, pl.input(r))
			})
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatalf("produce to the inlet: %v", firstErr)
		}
	}
}

// brokerPID is the broker's process: this one for kfake, scripts/kafka's Java process else.
func brokerPID(br *broker) int {
	if !br.Real() {
		return os.Getpid()
	}
	home := os.Getenv("MILLRACE_KAFKA_HOME")
	if home == "" {
		home = filepath.Join(os.TempDir(), "millrace-kafka")
	}
	bs, err := os.ReadFile(filepath.Join(home, "broker.pid"))
	if err != nil {
		return -1
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(bs)))
	return pid
}
