package bridge

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/ankka-flow/millrace/protocol"
)

// ListenAndServe runs the bridge of opts.Action until ctx ends: the streamlet services on
// 127.0.0.1:port (loopback only), and, when the action's --metrics names an address, the
// Prometheus metrics at /metrics there. When ctx ends it shuts down gracefully (see
// [Server.Serve]) and returns nil. port 0 picks a free port (tests); ready, when not nil, is
// called with the address once it listens. When it returns it shuts opts.Tracer down, the
// spans still buffered flushed within a bounded time.
func ListenAndServe(ctx context.Context, port int, opts Options, ready func(addr net.Addr)) error {
	if opts.Action == nil {
		return fmt.Errorf("bridge: ListenAndServe needs an Action")
	}
	if opts.Tracer != nil {
		defer opts.Tracer.shutdownTracer(cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)))
	}
	var metricsLis net.Listener
	if opts.Action.Metrics != "" {
		if opts.Metrics == nil {
			opts.Metrics = NewMetrics(0)
		}
		l, err := net.Listen("tcp", opts.Action.Metrics)
		if err != nil {
			return fmt.Errorf("bridge: cannot serve metrics on --metrics %s: %w; pick a free address", opts.Action.Metrics, err)
		}
		metricsLis = l
	}
	s, err := NewServer(opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if metricsLis != nil {
			metricsLis.Close()
		}
		return fmt.Errorf("bridge: cannot listen on 127.0.0.1:%d: %w; set %s to a free port", port, err, protocol.EnvProcessPort)
	}
	var wg sync.WaitGroup
	mctx, stopMetrics := context.WithCancel(context.Background())
	if metricsLis != nil {
		s.log.Info("serving metrics", "address", metricsLis.Addr().String(), "path", "/metrics")
		wg.Go(func() {
			if err := opts.Metrics.serve(mctx, metricsLis); err != nil {
				s.log.Error("metrics server stopped", "error", err)
			}
		})
	}
	if ready != nil {
		ready(lis.Addr())
	}
	err = s.Serve(ctx, lis)
	stopMetrics()
	wg.Wait()
	return err
}
