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
	"github.com/ankka-flow/millrace/stdio/engine"
)

// PortFromEnv returns the port in FLOW_PROCESS_PORT, read through getenv, or protocol.ProcessPort (9010) when
// it is unset.
func PortFromEnv(getenv func(string) string) (int, error) {
	s := getenv(protocol.EnvProcessPort)
	if s == "" {
		return protocol.ProcessPort, nil
	}
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("bridge: %s=%q is not a port number from 1 to 65535", protocol.EnvProcessPort, s)
	}
	return port, nil
}

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
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := opts.Metrics.serve(mctx, metricsLis); err != nil {
				s.log.Error("metrics server stopped", "error", err)
			}
		}()
	}
	if ready != nil {
		ready(lis.Addr())
	}
	err = s.Serve(ctx, lis)
	stopMetrics()
	wg.Wait()
	return err
}

// EnvMaxHeldMiB is the environment variable that sets the bridge's budget of held output, in
// MiB: the emit lines its processes staged and it has not yet sent, across every
// conversation. Unset: DefaultMaxHeldBytes.
const EnvMaxHeldMiB = "MILLRACE_BRIDGE_MAX_HELD_MIB"

// DefaultMaxHeldBytes is the bridge's budget of held output when EnvMaxHeldMiB is unset: 64 MiB.
const DefaultMaxHeldBytes = 64 << 20

// BudgetFromEnv returns the budget of held output EnvMaxHeldMiB sets, read through getenv
// (DefaultMaxHeldBytes when it is unset), for [Options].Budget.
func BudgetFromEnv(getenv func(string) string) (*engine.Budget, error) {
	s := getenv(EnvMaxHeldMiB)
	if s == "" {
		return engine.NewBudget(DefaultMaxHeldBytes), nil
	}
	mib, err := strconv.Atoi(s)
	if err != nil || mib < 1 || mib > 1<<20 {
		return nil, fmt.Errorf("bridge: %s=%q is not a whole number of MiB from 1 to 1048576 (default %d)", EnvMaxHeldMiB, s, DefaultMaxHeldBytes>>20)
	}
	return engine.NewBudget(int64(mib) << 20), nil
}

// EnvReplayGeneration is the environment variable of the replay generation, a whole number
// the operator bumps before a deliberate replay (`millrace replay`); see [IdempotencyKeyAt].
const EnvReplayGeneration = "FLOW_REPLAY_GENERATION"

// ReplayGenerationFromEnv returns the replay generation in EnvReplayGeneration, read through
// getenv (0 when it is unset), for [Options].ReplayGeneration.
func ReplayGenerationFromEnv(getenv func(string) string) (uint64, error) {
	s := getenv(EnvReplayGeneration)
	if s == "" {
		return 0, nil
	}
	gen, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bridge: %s=%q is not a whole number from 0 (the default: the keys of no replay) up; bump it by one for each deliberate replay", EnvReplayGeneration, s)
	}
	return gen, nil
}
