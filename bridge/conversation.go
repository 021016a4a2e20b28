package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// voidTimeout bounds the shutdown of a voided conversation's processes.
const voidTimeout = 10 * time.Second

// conversation is one Start and what follows it: a pool of the action's processes and the
// batches in flight. It ends by finish (Stop, half-close, shutdown: in-flight batches are
// answered) or void (a new Start, the stream gone: nothing more of it is sent).
type conversation struct {
	s      *Server
	id     string
	start  *flowv1.Start
	stream grpc.BidiStreamingServer[flowv1.ToProcess, flowv1.FromProcess]
	log    *slog.Logger
	pool   *engine.Pool

	ctx    context.Context // ends when the conversation is voided
	cancel context.CancelFunc

	inlets   map[string]string // port → topic
	outlets  map[string]string // port → topic
	maxBytes int

	mu       sync.Mutex
	inFlight map[uint64]bool
	closing  bool           // finish or void began: no batch is taken any more
	batches  sync.WaitGroup // added to under mu while !closing

	sendMu sync.Mutex
	voided atomic.Bool

	superseded chan struct{} // closed when the conversation is voided
	unhealthy  chan error    // the pool's crash-loop report, at most one waiting
	voidOnce   sync.Once
	finishOnce sync.Once
	closeOnce  sync.Once
}

// newConversation checks st and starts the action's pool for it.
func newConversation(ctx context.Context, s *Server, stream grpc.BidiStreamingServer[flowv1.ToProcess, flowv1.FromProcess], st *flowv1.Start) (*conversation, error) {
	a := s.opts.Action
	c := &conversation{
		s:          s,
		id:         st.GetConversationId(),
		start:      st,
		stream:     stream,
		inlets:     map[string]string{},
		outlets:    map[string]string{},
		maxBytes:   int(st.GetMaxMessageBytes()),
		inFlight:   map[uint64]bool{},
		superseded: make(chan struct{}),
		unhealthy:  make(chan error, 1),
	}
	if c.maxBytes <= 0 {
		c.maxBytes = protocol.MaxMessageBytes
	}
	c.log = s.log.With("pipeline", st.GetPipeline(), "conversation", c.id)
	if st.GetStreamlet() != "" && st.GetStreamlet() != a.Name {
		c.log.Warn("Start names another streamlet than the action config line; serving it all the same", "start_streamlet", st.GetStreamlet(), "action", a.Name)
	}
	for _, b := range st.GetInlets() {
		c.inlets[b.GetPort()] = b.GetTopic()
	}
	for _, b := range st.GetOutlets() {
		c.outlets[b.GetPort()] = b.GetTopic()
	}
	for _, p := range a.Inlets {
		if _, ok := c.inlets[p.Name]; !ok {
			c.log.Warn("Start binds no topic to a declared inlet; its batches will be failed", "inlet", p.Name)
		}
	}
	for _, p := range a.Outlets {
		if _, ok := c.outlets[p.Name]; !ok {
			c.log.Warn("Start binds no topic to a declared outlet; records emitted to it will fail", "outlet", p.Name)
		}
	}
	config := json.RawMessage(st.GetConfigJson())
	if len(config) == 0 {
		config = json.RawMessage("{}")
	}
	if !json.Valid(config) {
		return nil, status.Errorf(codes.InvalidArgument, "Start.config_json of conversation %s is not JSON: %.200q", c.id, st.GetConfigJson())
	}
	vars := map[string]any{
		"pipeline":     st.GetPipeline(),
		"streamlet":    st.GetStreamlet(),
		"conversation": c.id,
		"inlets":       c.inlets,
		"outlets":      c.outlets,
	}
	cfg := a.engineConfig()
	cfg.Version = s.opts.Version
	cfg.Env = s.opts.Env
	cfg.ShutdownGrace = s.opts.ShutdownGrace
	cfg.RetryBackoff = s.opts.RetryBackoff
	cfg.Budget = s.budget
	cfg.Hello = stdio.Hello{Action: a.Name, Version: s.opts.Version, Config: config, Vars: vars}
	cfg.Logger = c.log
	cfg.Hooks = s.opts.Metrics.hooks(c.log, s.tracer)
	logHealth := cfg.Hooks.Health
	cfg.Hooks.Health = func(err error) {
		logHealth(err)
		if errors.Is(err, engine.ErrCrashLoop) {
			select {
			case c.unhealthy <- err:
			default:
			}
		}
	}
	pool, err := engine.Start(ctx, cfg)
	if err != nil {
		return nil, rpcErrorf(codes.Unavailable, "conversation %s: the action's processes did not start: %w", c.id, err)
	}
	c.pool = pool
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.log.Info("started", "streamlet_name", st.GetStreamlet(), "processes", a.Concurrency, "window", pool.Window(), "max_message_bytes", c.maxBytes)
	s.opts.Metrics.conversationStarted()
	s.opts.Metrics.poolStarted(pool)
	return c, nil
}

// batch takes one batch: it checks it and hands its records to the pool on a goroutine of its
// own, so batches of several partitions run at once. An error ends the stream.
func (c *conversation) batch(b *flowv1.Batch) error {
	id := b.GetBatchId()
	c.mu.Lock()
	if c.inFlight[id] {
		c.mu.Unlock()
		return status.Errorf(codes.InvalidArgument, "batch %d arrived while a batch with the same batch_id is in flight: batch ids are unique within a conversation", id)
	}
	if c.closing {
		c.mu.Unlock()
		c.log.Info("batch not taken: the conversation is ending; the sidecar redelivers it", "batch", id)
		return nil
	}
	c.inFlight[id] = true
	c.mu.Unlock()
	topic, ok := c.inlets[b.GetInlet()]
	if !ok {
		c.s.opts.Metrics.batch("fail")
		c.answer(id, []*flowv1.FromProcess{failMsg(id, fmt.Sprintf("batch %d names inlet %q, to which Start bound no topic; the action declares inlets %s", id, b.GetInlet(), portList(c.s.opts.Action.Inlets)))})
		return nil
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	c.batches.Add(1)
	c.mu.Unlock()
	c.log.Debug("batch taken", "batch", id, "inlet", b.GetInlet(), "partition", b.GetPartition(), "records", len(b.GetRecords()))
	go func() {
		defer c.batches.Done()
		c.process(b, topic)
	}()
	return nil
}

// process runs every record of b through the pool and sends each record's output as soon as
// it and the records before it are done, in record order, so that the bridge holds no
// batch's output waiting on the batch's last record; then it answers the batch with Ack or
// Fail. A record that fails for good stops the sending of the batch's output (the sidecar
// discards a failed batch's emits).
func (c *conversation) process(b *flowv1.Batch, topic string) {
	recs := b.GetRecords()
	type finished struct {
		i   int
		res engine.Result
	}
	results := make(chan finished, len(recs)) // never blocks the pool's goroutine
	// The records go to the pool together (one queueing, one callback), so that a process's
	// worker writes them to the child in runs.
	items := make([]stdio.Item, len(recs))
	for i, r := range recs {
		items[i] = c.item(b, topic, r)
	}
	errs := c.pool.SubmitBatch(c.ctx, items, func(i int, res engine.Result) {
		results <- finished{i, res}
	})
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrBadItem): // not JSON, or too large for a line
			results <- finished{i, engine.Result{Outcome: engine.Failed, Err: fmt.Errorf("the value cannot be handed to the action: %w; produce JSON values to the inlet, or route such records away with --dead-letter", err)}}
		default: // the pool is closed or the conversation over
			results <- finished{i, engine.Result{Outcome: engine.Abandoned, Err: err}}
		}
	}
	settledAll := make([]settled, len(recs))
	waiting := make([]*engine.Result, len(recs)) // done out of order: held until those before are
	next, sending := 0, true
	for range recs {
		f := <-results
		waiting[f.i] = &f.res
		for next < len(recs) && waiting[next] != nil {
			r := c.settle(b, topic, recs[next], *waiting[next], sending)
			waiting[next] = nil
			settledAll[next] = r
			if r.kind == "failed" || r.kind == "abandoned" {
				sending = false
			}
			next++
		}
	}
	final := c.finalFor(b, topic, settledAll)
	if final == nil {
		c.log.Info("batch abandoned: the conversation ended before its records did", "batch", b.GetBatchId())
		c.forget(b.GetBatchId())
		return
	}
	c.send(b.GetBatchId(), []*flowv1.FromProcess{final})
	c.forget(b.GetBatchId())
}

// answer sends msgs, the whole answer of one batch, unless the conversation is void.
func (c *conversation) answer(id uint64, msgs []*flowv1.FromProcess) {
	c.send(id, msgs)
	c.forget(id)
}

// send sends msgs of batch id, unless the conversation is void. A new Start voids everything:
// nothing of this conversation goes out after it.
func (c *conversation) send(id uint64, msgs []*flowv1.FromProcess) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.voided.Load() {
		return
	}
	for _, m := range msgs {
		if err := c.stream.Send(m); err != nil {
			c.log.Warn("cannot answer a batch: the stream is gone", "batch", id, "error", err)
			return
		}
	}
}

// forget takes batch id out of flight, once it is answered or abandoned.
func (c *conversation) forget(id uint64) {
	c.mu.Lock()
	delete(c.inFlight, id)
	c.mu.Unlock()
}

// finish ends the conversation cleanly: it waits for the batches in flight to be answered
// (those left when ctx ends are abandoned), then shuts the processes down. It may be called
// more than once and concurrently; later calls wait for the first.
func (c *conversation) finish(ctx context.Context) {
	c.finishOnce.Do(func() {
		c.stopTaking()
		answered := make(chan struct{})
		go func() { c.batches.Wait(); close(answered) }()
		select {
		case <-answered:
		case <-ctx.Done():
			c.log.Warn("batches still in flight at the deadline are abandoned; the sidecar redelivers them")
			c.void("the shutdown deadline passed", false)
			<-answered
		case <-c.superseded:
			<-answered
		}
		c.closePool(true)
		c.s.release(c)
		c.log.Info("conversation finished")
	})
}

// void ends the conversation at once: nothing more of it is sent, its deliveries are
// abandoned and its processes shut down. It may be called more than once and concurrently.
//
// On its own stream (sameStream), a batch being sent completes before the void takes effect, so
// that nothing of it follows the new Start; another stream's sends are simply cut off.
func (c *conversation) void(reason string, sameStream bool) {
	c.voidOnce.Do(func() {
		c.log.Info("conversation voided", "reason", reason)
		if sameStream {
			c.sendMu.Lock()
		}
		c.voided.Store(true)
		if sameStream {
			c.sendMu.Unlock()
		}
		close(c.superseded)
		c.stopTaking()
		c.cancel()
		c.closePool(false)
		c.batches.Wait()
		c.s.release(c)
	})
}

// stopTaking makes batch refuse new batches, so that batches.Wait may begin.
func (c *conversation) stopTaking() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
}

func (c *conversation) closePool(drain bool) {
	c.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), voidTimeout)
		defer cancel()
		if err := c.pool.Close(ctx, drain); err != nil {
			c.log.Warn("the action's processes did not all shut down in time", "error", err)
		}
		c.s.opts.Metrics.poolClosed(c.pool)
	})
}
