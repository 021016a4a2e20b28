package engine_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// benchPayload is one item's payload in every echo benchmark.
var benchQueue = 0

var benchPayload = []byte(`{"id":12345,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon"}`)

// BenchmarkEcho measures items/s and the engine's CPU per item through the Go echo action
// (actions/go-echo, on the SDK) and the Python echo loop (stdio/testdata/echo.py), each beside its
// ceiling: a bare loop driving the same child over the same pipes with nothing else, one line
// at a time (lockstep) and streaming. The engine runs pools of 1, 2 and 4 processes, one
// delivery at a time (lockstep) and with a window of 64.
//
//	go test -run '^$' -bench BenchmarkEcho -benchtime 2s ./stdio/engine/
func BenchmarkEcho(b *testing.B) {
	goEcho := filepath.Join(b.TempDir(), "go-echo")
	if out, err := exec.Command("go", "build", "-o", goEcho, "../../actions/go-echo").CombinedOutput(); err != nil {
		b.Fatalf("building actions/go-echo: %v\n%s", err, out)
	}
	children := []struct {
		name string
		argv []string
	}{
		{"go", []string{goEcho}},
		{"python", []string{"python3", "../testdata/echo.py"}},
	}
	for _, c := range children {
		if _, err := exec.LookPath(c.argv[0]); err != nil {
			b.Logf("skipping the %s child: %v", c.name, err)
			continue
		}
		b.Run(c.name+"/bare/lockstep", func(b *testing.B) { benchBare(b, c.argv, false) })
		b.Run(c.name+"/bare/stream", func(b *testing.B) { benchBare(b, c.argv, true) })
		for _, n := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/pool%d/lockstep", c.name, n), func(b *testing.B) { benchPool(b, c.argv, n, 1) })
			b.Run(fmt.Sprintf("%s/pool%d/window64", c.name, n), func(b *testing.B) { benchPool(b, c.argv, n, 64) })
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report records items/s and the engine's CPU per item, measured on our own clock from the
// first item to the last answer.
func report(b *testing.B, items int, start time.Time, cpu0 time.Duration) {
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(items)/elapsed.Seconds(), "items/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(items), "cpu-µs/item")
}

func itemLine(dst []byte, i int) []byte {
	n := strconv.Itoa(i)
	dst = append(dst, `{"type":"item","delivery":"d`...)
	dst = append(dst, n...)
	dst = append(dst, `","id":"bench/0/`...)
	dst = append(dst, n...)
	dst = append(dst, `","payload":`...)
	dst = append(dst, benchPayload...)
	return append(dst, `,"partition":0,"offset":0,"timestamp":0,"attempt":1}`+"\n"...)
}

// benchBare drives one child with nothing but writes and line reads: the ceiling.
func benchBare(b *testing.B, argv []string, stream bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
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
	stdin.Write([]byte(`{"type":"hello","protocol":1,"action":"bench","config":{}}` + "\n"))
	if _, err := r.ReadSlice('\n'); err != nil {
		b.Fatal(err)
	}
	var buf []byte
	var readErr error
	answers := 0
	var wg sync.WaitGroup
	if stream {
		wg.Go(func() {
			for {
				if _, readErr = r.ReadSlice('\n'); readErr != nil {
					return
				}
				answers++
			}
		})
	}
	b.ReportAllocs()
	items := 0
	var start time.Time
	var cpu0 time.Duration
	for b.Loop() {
		if items == 0 {
			start, cpu0 = time.Now(), cpuTime()
		}
		buf = itemLine(buf[:0], items)
		items++
		if _, err := stdin.Write(buf); err != nil {
			b.Fatal(err)
		}
		if !stream {
			for range 2 { // emit, done
				if _, err := r.ReadSlice('\n'); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	stdin.Write([]byte(`{"type":"shutdown"}` + "\n"))
	stdin.Close()
	wg.Wait()
	report(b, items, start, cpu0)
	if stream && answers != 2*items {
		b.Fatalf("streaming: %d answer lines for %d items (%v)", answers, items, readErr)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
}

// benchPool pushes keyless items through a pool of n processes.
func benchPool(b *testing.B, argv []string, n, window int) {
	ctx := context.Background()
	p, err := engine.Start(ctx, engine.Config{Name: "bench", Command: argv, Concurrency: n, Window: window, QueueSize: benchQueue})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	done := func(r engine.Result) {
		if r.Outcome != engine.Done {
			mu.Lock()
			failed = fmt.Errorf("%v: %v", r.Outcome, r.Err)
			mu.Unlock()
		}
		wg.Done()
	}
	b.ReportAllocs()
	items := 0
	var start time.Time
	var cpu0 time.Duration
	for b.Loop() {
		if items == 0 {
			start, cpu0 = time.Now(), cpuTime()
		}
		wg.Add(1)
		it := stdio.Item{ID: "bench/0/" + strconv.Itoa(items), Payload: benchPayload, Topic: "bench", Offset: int64(items)}
		items++
		if err := p.Submit(ctx, it, done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	report(b, items, start, cpu0)
	if err := p.Close(ctx, true); err != nil {
		b.Fatal(err)
	}
	if failed != nil {
		b.Fatal(failed)
	}
}
