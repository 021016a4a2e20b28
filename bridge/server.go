package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/codec"
	"github.com/ankka-flow/millrace/internal/lifetime"
	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// grpcMessageLimit is what the server accepts and sends: a message of the protocol's limit plus
// room for the framing of a batch around its records.
const grpcMessageLimit = protocol.MaxMessageBytes + 1<<20

// Options configure a [Server].
type Options struct {
	// Action is the action served (required).
	Action  *actionconf.Action
	Version string       // millrace's version: the sdk version of discovery and hello's version
	Logger  *slog.Logger // default: discard
	Metrics *Metrics     // where to record metrics; nil records none
	// Tracer exports a span per item attempt; nil exports none. The trace headers of items and
	// outputs are written either way.
	Tracer *Tracer
	Env    []string // extra environment "K=V" for the action's processes

	// ShutdownTimeout bounds [Server.Serve]'s graceful stop: answering the batches in flight and
	// ending the streams (default protocol.StopTimeout).
	ShutdownTimeout time.Duration
	// ShutdownGrace is how long each process gets to exit after shutdown before it is killed
	// (default: the engine's).
	ShutdownGrace time.Duration
	// Budget bounds the output the bridge holds, staged by the action and not yet sent, across
	// every conversation (default: DefaultMaxHeldBytes; see [Config].MaxHeldBytes). While it is
	// full the bridge writes no item to its processes.
	Budget *engine.Budget
	// ReplayGeneration is part of every idempotencyKey (see [actionconf.AppendIdempotencyKey]): 0
	// keeps the keys of [actionconf.IdempotencyKey]; the operator bumps it
	// (FLOW_REPLAY_GENERATION) for a deliberate replay, so that systems deduplicating on the keys
	// apply the replayed records.
	ReplayGeneration uint64
	// RetryBackoff is the first delay before a retry, doubling with jitter (default: the stdio
	// pool's). Tests shorten it.
	RetryBackoff time.Duration
	// Events, when set, is told what happens to the action's processes and records, as typed
	// [Event] values (see [EventKind] for each kind and its fields): what a program running the
	// bridge in-process (millrace run) decides on, instead of reading the log. It is called on
	// the bridge's and the pool's goroutines, possibly concurrently, in the order each goroutine
	// sees things happen; it must return quickly and must not call the Server (a process, or a
	// batch's answer, waits for it).
	Events func(Event)
	// Registry decodes and encodes the action's registry-encoded ports (--decode, --encode; see
	// [RegistryFor]); NewServer refuses such an action without one. Plain JSON ports never
	// use it.
	Registry *schema.Registry
	// SidecarPort is where a line with --state dials the sidecar's State service, on
	// 127.0.0.1, after each Start (default protocol.SidecarPort, FLOW_SIDECAR_PORT). A
	// stateless line dials nothing.
	SidecarPort int
	// stateAfter is the clock of a batch's wait for its BatchState and of the wait for the
	// sidecar to end a finished conversation's State stream (default time.After); tests
	// drive it.
	stateAfter func(time.Duration) <-chan time.Time
	// RegistryRetryFor is how long a registry that does not answer is retried, with backoff,
	// before the batch is failed (default DefaultRegistryRetryFor).
	RegistryRetryFor time.Duration
}

// Server is the streamlet process of one action: the Discovery and Streamlet services of
// ankka.flow.v1. It holds at most one live conversation: a new Start, on the same stream or
// another, voids the previous one. Its methods are safe for concurrent use.
type Server struct {
	flowv1grpc.UnimplementedDiscoveryServer
	flowv1grpc.UnimplementedStreamletServer

	opts   Options
	tracer *Tracer
	log    *slog.Logger
	budget *engine.Budget
	spec   *flowv1.Spec
	dec    map[string]portCodecs // inlet → its codecs; nil when no inlet is encoded
	enc    map[string]portCodecs // outlet → its codecs; nil when no outlet is encoded
	// registryGaveUp is when withRegistry last gave up on the registry (unix ns, 0: never):
	// for RegistryRetryFor after it, a registry that does not answer fails at once, so that
	// the records after the first of a batch do not each wait the whole retry again.
	registryGaveUp atomic.Int64

	mu          sync.Mutex
	current     *conversation
	starts      uint64             // Starts taken: the latest one is the live conversation
	cancelStart context.CancelFunc // ends the wait of the Start whose processes are starting
	terminating lifetime.Event     // fired by shutdown, under mu
	wg          sync.WaitGroup     // receive goroutines of Run
}

var (
	_ flowv1grpc.DiscoveryServer = (*Server)(nil)
	_ flowv1grpc.StreamletServer = (*Server)(nil)
)

// NewServer returns a server for opts.Action. It starts nothing: [Server.Serve] serves it.
func NewServer(opts Options) (*Server, error) {
	if opts.Action == nil {
		return nil, errors.New("bridge: NewServer needs an Action")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = protocol.StopTimeout
	}
	if opts.Budget == nil {
		opts.Budget = engine.NewBudget(DefaultMaxHeldBytes)
	}
	if opts.RegistryRetryFor <= 0 {
		opts.RegistryRetryFor = DefaultRegistryRetryFor
	}
	if opts.Action.Encoded() && opts.Registry == nil {
		return nil, ErrNoRegistry
	}
	if opts.SidecarPort <= 0 {
		opts.SidecarPort = protocol.SidecarPort
	}
	if opts.stateAfter == nil {
		opts.stateAfter = time.After
	}
	dec, err := codecsOf(opts.Action.Inlets)
	if err != nil {
		return nil, err
	}
	enc, err := codecsOf(opts.Action.Outlets)
	if err != nil {
		return nil, err
	}
	s := &Server{
		dec:    dec,
		enc:    enc,
		opts:   opts,
		tracer: opts.Tracer,
		budget: opts.Budget,
		log:    opts.Logger.With("streamlet", opts.Action.Name),
		spec:   opts.Action.Spec(opts.Version),
	}
	opts.Metrics.budgetIs(s.budget)
	return s, nil
}

// grpcOptions returns the server options the bridge needs: message limits above the protocol's
// 4 MiB, the protocol's codec (the same bytes, encoded without reflection) and its buffer pool
// (frames read into buffers that are not zeroed first; see codec.Pool). Keepalive is left at
// the gRPC library's defaults, as the protocol asks.
func grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcMessageLimit), grpc.MaxSendMsgSize(grpcMessageLimit), codec.ServerOption(), experimental.BufferPool(codec.Pool)}
}

// register registers the Discovery and Streamlet services on gs.
func (s *Server) register(gs grpc.ServiceRegistrar) {
	flowv1grpc.RegisterDiscoveryServer(gs, s)
	flowv1grpc.RegisterStreamletServer(gs, s)
}

// Serve serves on lis until ctx ends, then shuts down gracefully: in-flight batches are
// answered within ShutdownTimeout, the processes are shut down, the streams end, and Serve
// returns nil. It returns an error only when serving fails. It closes lis.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer(grpcOptions()...)
	s.register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	s.log.Info("serving", "address", lis.Addr().String(), "protocol", protocol.Version)
	select {
	case err := <-served:
		s.shutdown(context.Background())
		return fmt.Errorf("bridge: serving on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down: answering in-flight batches", "timeout", s.opts.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	s.shutdown(sctx)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
		<-stopped
	}
	<-served
	s.wg.Wait()
	s.log.Info("stopped")
	return nil
}

// shutdown ends the live conversation, if any: it answers the batches in flight (those not
// answered when ctx ends are abandoned and will be redelivered), shuts the processes down and
// ends the stream with UNAVAILABLE. Batches that arrive meanwhile are not taken. It may be
// called more than once; it returns when the conversation is over.
func (s *Server) shutdown(ctx context.Context) {
	s.mu.Lock()
	s.terminating.Fire()
	c := s.current
	if s.cancelStart != nil {
		s.cancelStart()
	}
	s.mu.Unlock()
	if c != nil {
		c.finish(ctx)
	}
}

// Discover answers the Spec built from the action config: sdk millrace, protocol
// protocol.Version when the line keeps state, else protocol.BaseVersion.
func (s *Server) Discover(_ context.Context, info *flowv1.SidecarInfo) (*flowv1.Spec, error) {
	s.log.Info("discovered", "sidecar_version", info.GetSidecarVersion(), "sidecar_protocol", info.GetProtocolVersion())
	s.logStateVersion(info)
	return s.spec, nil
}

// ReportError logs every problem the sidecar found, each on its own line, then a summary of
// what to change; the bridge keeps serving.
func (s *Server) ReportError(_ context.Context, ps *flowv1.Problems) (*flowv1.Empty, error) {
	probs := ps.GetProblems()
	for i, p := range probs {
		s.log.Error("sidecar refused this streamlet", "problem", i+1, "of", len(probs), "message", p.GetMessage())
	}
	s.log.Error("the sidecar refused the streamlet this bridge describes: make the action config line (--in, --out, --param, the name) match the descriptor the streamlet was deployed with, or redeploy with this one; the bridge keeps serving",
		"problems", len(probs), "line", s.opts.Action.Line())
	return &flowv1.Empty{}, nil
}

type received struct {
	msg *flowv1.ToProcess
	err error
}

// Run holds one conversation of the sidecar: Start, then Batches, then Stop.
func (s *Server) Run(stream grpc.BidiStreamingServer[flowv1.ToProcess, flowv1.FromProcess]) error {
	ctx := stream.Context()
	// Receiving runs on its own goroutine so that a superseding conversation or a shutdown
	// can end this stream while it waits for the sidecar.
	msgs := make(chan received)
	done := make(chan struct{})
	defer close(done)
	s.wg.Go(func() {
		for {
			m, err := stream.Recv()
			select {
			case msgs <- received{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	})

	var c *conversation
	defer func() {
		if c != nil {
			// Voided after the handler returns: a batch blocked in Send on this stream is
			// released only when the stream's context ends.
			s.wg.Go(func() { c.void("the stream ended", false) })
		}
	}()
	for {
		var (
			superseded <-chan struct{}
			unhealthy  <-chan error
		)
		if c != nil {
			superseded, unhealthy = c.voided.Done(), c.unhealthy
		}
		var r received
		select {
		case r = <-msgs:
		case <-superseded:
			return status.Errorf(codes.Aborted, "conversation %s was voided by a newer Start", c.id)
		case err := <-unhealthy:
			// Waiting on a crash-looping action would stall every partition in silence; ending
			// the conversation makes the sidecar back off and start over, and shows why.
			return rpcErrorf(codes.Unavailable, "conversation %s ended: %w", c.id, err)
		case <-s.terminating.Done():
			if c != nil {
				c.finish(ctx) // shutdown bounds it
				c = nil
			}
			return status.Error(codes.Unavailable, "the bridge is shutting down; in-flight batches were answered, the rest will be redelivered")
		}
		if r.err == io.EOF {
			if c == nil {
				return nil
			}
			c.finish(ctx)
			c = nil
			return nil
		}
		if r.err != nil {
			return r.err
		}
		switch m := r.msg.GetMessage().(type) {
		case *flowv1.ToProcess_Start:
			if c != nil {
				c.void("a new Start arrived on its stream", true)
				c = nil
			}
			nc, err := s.start(ctx, stream, m.Start)
			if err != nil {
				return err
			}
			c = nc
		case *flowv1.ToProcess_Batch:
			if c == nil {
				return status.Error(codes.FailedPrecondition, "a Batch arrived before Start: the sidecar must send Start first")
			}
			if err := c.batch(m.Batch); err != nil {
				return err
			}
		case *flowv1.ToProcess_Stop:
			if c == nil {
				return nil
			}
			c.log.Info("stop", "reason", m.Stop.GetReason())
			c.finish(ctx)
			c = nil
			return nil
		default:
			return status.Error(codes.InvalidArgument, "an empty ToProcess message: expected Start, Batch or Stop")
		}
	}
}

// start begins a conversation for st, voiding the server's previous one. The latest Start
// always wins: a conversation whose processes are still starting when a newer Start arrives
// stops waiting for them and is voided, whichever of the two would finish starting first.
func (s *Server) start(ctx context.Context, stream grpc.BidiStreamingServer[flowv1.ToProcess, flowv1.FromProcess], st *flowv1.Start) (*conversation, error) {
	s.mu.Lock()
	if s.terminating.HasFired() {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the bridge is shutting down and takes no new conversation")
	}
	s.starts++
	n := s.starts
	old := s.current
	s.current = nil
	if s.cancelStart != nil {
		s.cancelStart() // an older Start still starting: void from now on
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancelStart = cancel
	s.mu.Unlock()
	if old != nil {
		old.void("a new Start arrived on another stream", false)
	}
	c, err := newConversation(sctx, s, stream, st)
	s.mu.Lock()
	latest := s.starts == n && !s.terminating.HasFired()
	if s.starts == n {
		s.cancelStart = nil
	}
	if !latest {
		s.mu.Unlock()
		if c != nil {
			c.void("a newer Start arrived while its processes started", false)
		}
		if s.isTerminated() {
			return nil, status.Error(codes.Unavailable, "the bridge is shutting down and takes no new conversation")
		}
		return nil, status.Errorf(codes.Aborted, "conversation %s was voided by a newer Start while its processes started", st.GetConversationId())
	}
	if err != nil {
		s.mu.Unlock()
		s.log.Error("cannot start the conversation", "conversation", st.GetConversationId(), "error", err)
		return nil, err
	}
	s.current = c
	s.mu.Unlock()
	return c, nil
}

// Abort ends the live conversation at once, as a new Start would: its deliveries are
// abandoned (the sidecar redelivers their batches), its processes stopped, and nothing more of
// it is sent; a conversation still starting gives up. The server keeps serving. A program that
// runs the bridge in-process calls it when it stops on a fault that can only repeat, rather
// than wait for the retries of batches that cannot succeed. It may be called at any time, more
// than once, concurrently.
func (s *Server) Abort() {
	s.mu.Lock()
	c := s.current
	if s.cancelStart != nil {
		s.cancelStart()
	}
	s.mu.Unlock()
	if c != nil {
		c.void("aborted by the program running the bridge", false)
	}
}

func (s *Server) isTerminated() bool {
	return s.terminating.HasFired()
}

// release forgets c if it is the live conversation.
func (s *Server) release(c *conversation) {
	s.mu.Lock()
	if s.current == c {
		s.current = nil
	}
	s.mu.Unlock()
}
