package state_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvBenchKeys sets the keys BenchmarkStateRestore restores (10,000 by default; the design's
// figure is taken with 1000000, e.g. MILLRACE_STATE_BENCH_KEYS=1000000 go test -run '^$'
// -bench StateRestore -benchtime 1x ./sidecar/internal/state/).
const EnvBenchKeys = "MILLRACE_STATE_BENCH_KEYS"

// catchUpRecords is how many records the catch-up restores on top of the keys.
const catchUpRecords = 10_000

// BenchmarkStateRestore restores a changelog partition of N keys with 100-byte states (kfake,
// or the broker MILLRACE_KAFKA_BROKERS names): "full" into an empty file, "catch-up" the last
// 10,000 records into a file restored before them. It reports keys (records) per second, the
// file's size and the most the Go heap grew during a restore, which must not grow with N.
func BenchmarkStateRestore(b *testing.B) {
	n := 10_000
	if v := os.Getenv(EnvBenchKeys); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of keys, e.g. 1000000", EnvBenchKeys, v)
		}
	}
	br := testkit.NewBroker(b, testkit.BrokerOptions{})
	topic := br.Topic(b, "state", 1, "cleanup.policy", "compact")
	// A million keys are about 110 MB on a real broker: give them back.
	b.Cleanup(func() {
		if err := br.DeleteTopic(context.Background(), topic); err != nil {
			b.Logf("the benchmark's changelog is left on the broker: %v", err)
		}
	})
	kopts := []kgo.Opt{kgo.SeedBrokers(br.Addrs...)}
	value := make([]byte, 100)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	produceKeys(b, kopts, topic, 0, n, value)

	// The catch-up's starting point: a file restored to the N keys.
	base := b.TempDir()
	p, _, err := state.Open(base, topic, 0, state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := state.Restore(context.Background(), p, kopts, state.RestoreOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	produceKeys(b, kopts, topic, n-catchUpRecords, catchUpRecords, value) // the last keys, written again

	b.Run(fmt.Sprintf("full/keys=%d", n), func(b *testing.B) {
		benchRestore(b, topic, kopts, "", n+catchUpRecords)
	})
	b.Run(fmt.Sprintf("catch-up/keys=%d", n), func(b *testing.B) {
		benchRestore(b, topic, kopts, state.Path(base, topic, 0), catchUpRecords)
	})
}

// benchRestore restores topic into a new directory per iteration, starting from a copy of
// from when it is set.
func benchRestore(b *testing.B, topic string, kopts []kgo.Opt, from string, records int) {
	var fileBytes, grew int64
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		if from != "" {
			copyFile(b, from, state.Path(dir, topic, 0))
		}
		p, _, err := state.Open(dir, topic, 0, state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		heap := watchHeap()
		b.StartTimer()
		start := time.Now()
		r, err := state.Restore(context.Background(), p, kopts, state.RestoreOptions{})
		elapsed += time.Since(start)
		b.StopTimer()
		grew = max(grew, heap())
		if err != nil {
			b.Fatal(err)
		}
		if r.Records != int64(records) {
			b.Fatalf("Restore = %+v; want %d records", r, records)
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(state.Path(dir, topic, 0))
		if err != nil {
			b.Fatal(err)
		}
		fileBytes = st.Size()
		b.StartTimer()
	}
	b.ReportMetric(float64(records)*float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(fileBytes), "file-bytes")
	b.ReportMetric(float64(grew)/(1<<20), "heap-growth-MiB")
}

// produceKeys writes count records of keys first, first+1, … to partition 0 of topic.
func produceKeys(b *testing.B, kopts []kgo.Opt, topic string, first, count int, value []byte) {
	b.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(100_000)}, kopts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var first1 error
	for i := first; i < first+count; i++ {
		cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "key-%09d", i), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first1 = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if first1 != nil {
		b.Fatalf("produce to %s: %v", topic, first1)
	}
}

func copyFile(b *testing.B, from, to string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		b.Fatal(err)
	}
	src, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}

// watchHeap samples the live heap every 5 ms from now on; the function it returns stops the
// sampling and says how far the heap grew over what it was at the start.
func watchHeap() func() int64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 { metrics.Read(sample); return int64(sample[0].Value.Uint64()) }
	base := read()
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return max(peak, read()) - base
	}
}
