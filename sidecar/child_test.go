package sidecar_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/ankka-flow/millrace/sidecar"
)

// roleSidecar makes the test binary play `millrace sidecar` in a child process, configured by
// FLOW_* variables, so its memory can be measured apart from the in-process broker.
const roleSidecar = "sidecar"

// play is the role the test binary was started to play.
func play(role string) int {
	if role != roleSidecar {
		fmt.Fprintf(os.Stderr, "sidecar tests: no role %q\n", role)
		return 2
	}
	return runChild()
}

func runChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := sidecar.ConfigFromEnv(os.Getenv, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if path := os.Getenv("MILLRACE_SIDECAR_TEST_HEAPPROFILE"); path != "" {
		go func() {
			var peak uint64
			for ctx.Err() == nil {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak {
					peak = ms.HeapInuse
					f, _ := os.Create(path)
					pprof.WriteHeapProfile(f)
					f.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	if err := sc.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
