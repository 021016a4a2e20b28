package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/lifetime"
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
	state  *stateLink // the State stream; nil when the line keeps no state

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
	voided lifetime.Event // fired by void, under sendMu: nothing more is sent

	unhealthy  chan error // why the conversation must end (a crash loop, the State stream), at most one waiting
	voidOnce   sync.Once
	finishOnce sync.Once
}

// newConversation checks st and starts the action's pool for it.
func newConversation(ctx context.Context, s *Server, stream grpc.BidiStreamingServer[flowv1.ToProcess, flowv1.FromProcess], st *flowv1.Start) (*conversation, error) {
	a := s.opts.Action
	c := &conversation{
		s:         s,
		id:        st.GetConversationId(),
		start:     st,
		stream:    stream,
		inlets:    map[string]string{},
		outlets:   map[string]string{},
		maxBytes:  int(st.GetMaxMessageBytes()),
		inFlight:  map[uint64]bool{},
		unhealthy: make(chan error, 1),
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
	var err error
	cfg := a.EngineConfig()
	cfg.Version = s.opts.Version
	cfg.Env = s.opts.Env
	cfg.ShutdownGrace = s.opts.ShutdownGrace
	cfg.RetryBackoff = s.opts.RetryBackoff
	cfg.Budget = s.budget
	cfg.Hello = stdio.Hello{Action: a.Name, Version: s.opts.Version, Config: config, Vars: vars}
	cfg.Logger = c.log
	cfg.Hooks = c.eventHooks(s.opts.Metrics.hooks(c.log, s.tracer))
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
	if len(a.State) > 0 {
		// The processes start once the sidecar has said what it keeps, so that hello.state
		// carries the effective limits and the engine checks them.
		c.state, cfg.State, err = openState(ctx, c)
		if err != nil {
			return nil, err
		}
	}
	pool, err := engine.Start(ctx, cfg)
	if err != nil {
		c.state.close()
		if ctx.Err() == nil { // not a start given up for a newer Start or a shutdown
			s.emit(Event{Kind: EventStartFailed, Conversation: c.id, Err: err})
		}
		return nil, rpcErrorf(codes.Unavailable, "conversation %s: the action's processes did not start: %w", c.id, err)
	}
	c.pool = pool
	c.ctx, c.cancel = context.WithCancel(context.Background())
	s.emit(Event{Kind: EventConversationStarted, Conversation: c.id})
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
		c.answer(id, []*flowv1.FromProcess{failMsg(id, fmt.Sprintf("batch %d names inlet %q, to which Start bound no topic; the action declares inlets %s", id, b.GetInlet(), inletNames(c.s.opts.Action)))})
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
	go c.process(b, topic) // it calls c.batches.Done once the batch is answered or abandoned
	return nil
}

// process runs every record of b through the pool and sends each record's output once it
// and the records before it are done, in record order, gathered into runs of up to
// flushBytes (see batchRun.hold), so that the bridge holds little of any batch's output while
// its last record is still out; then it answers the batch with Ack or Fail, sent with the
// last run. A record that fails for good stops the sending of the batch's output (the sidecar
// discards a failed batch's emits). The sending is done by whichever goroutine finishes a
// record (see batchRun), so process returns once the records are handed to the pool; the
// batch is answered, and c.batches.Done called, when its last record is done.
func (c *conversation) process(b *flowv1.Batch, topic string) {
	recs := b.GetRecords()
	var overlay *batchOverlay
	if c.state.keeps(b.GetInlet()) {
		if overlay = c.awaitState(b); overlay == nil {
			c.s.opts.Metrics.items("abandoned", len(recs))
			c.forget(b.GetBatchId())
			c.batches.Done()
			return
		}
	}
	r := &batchRun{c: c, b: b, topic: topic, sending: true, batchBlocks: getBlocks(len(recs)), state: overlay}
	if len(recs) == 0 {
		r.answer()
		return
	}
	// The records go to the pool together (one queueing, one callback), so that a process's
	// worker writes them to the child in runs.
	items, names, ends := r.items, r.names[:0], r.ends
	for i, in := range recs {
		names = c.appendNames(names, b, topic, in)
		ends[i] = len(names)
	}
	r.names = names
	all, start := string(names), 0
	for i, in := range recs {
		items[i] = c.item(b, topic, in, all[start:ends[i]])
		start = ends[i]
	}
	if c.s.dec != nil {
		if pc, ok := c.s.dec[b.GetInlet()]; ok {
			c.submitDecoded(r, pc, topic, items)
			return
		}
	}
	c.submit(r, items, nil)
}

// submit hands items to the pool for r; index, when not nil, maps each item to its record in
// r's batch (some records were not handed over).
func (c *conversation) submit(r *batchRun, items []stdio.Item, index []int) {
	finished := r.finished
	if index != nil {
		finished = func(i int, res engine.Result) { r.finished(index[i], res) }
	}
	var opts []engine.SubmitOption
	if r.state != nil {
		opts = append(opts, r.stateOf(index))
	}
	errs := c.pool.SubmitBatch(c.ctx, items, finished, opts...)
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrBadItem): // not JSON, or too large for a line
			finished(i, engine.Result{Outcome: engine.Failed, Err: fmt.Errorf("the value cannot be handed to the action: %w; produce JSON values to the inlet, or route such records away with --dead-letter", err)})
		default: // the pool is closed or the conversation over
			finished(i, engine.Result{Outcome: engine.Abandoned, Err: err})
		}
	}
}

// flushBytes is how much settled output (the emitted values, keys and headers) a batch in
// flight gathers before it is sent: the sidecar does nothing with a batch's Emits before its
// Ack, so sending them in runs costs no latency, and spares a write to the stream, a read by
// the sidecar and a wake-up on each side per record when records finish one by one (one
// delivery at a time, a quiet stream). What a batch gathers stays held of the budget until it
// is sent, so the budget may be passed by up to flushBytes per batch in flight.
const flushBytes = 64 << 10

// batchRun is one batch in flight. Each record's result is settled, and its output sent, by
// the goroutine that finished it (the pool's, or the batch's own for a record the pool
// refused) under mu, together with the run of later records already done: no result is
// handed to another goroutine to be sent, so no goroutine wakes per record. While the
// stream's flow control holds a send, the process whose answer it is waits with it (its
// answers stay in its pipe): that is the backpressure; the sidecar reads Emits without
// waiting on the bridge, and the pool calls finished holding none of its locks.
type batchRun struct {
	c     *conversation
	b     *flowv1.Batch
	topic string

	state *batchOverlay // nil: its inlet keeps no state

	mu sync.Mutex
	*batchBlocks
	next    int  // the first record not settled
	sending bool // false once a record failed for good or was abandoned

	// The size of the settled records' messages not sent yet (batchBlocks.pending) and the
	// budget bytes they hold.
	pendingBytes int
	pendingHeld  int64
}

// batchBlocks are the per-record blocks of a batch in flight, reused from batch to batch
// (blockPool) to spare the collector: once a batch is answered, every record of it is done
// and nothing refers to them any more (the pool lets go of items once they are done).
type batchBlocks struct {
	items   []stdio.Item    // handed to the pool
	results []engine.Result // done out of order: held until those before are
	done    []bool
	settled []settled
	emits   emitScratch           // the Emit messages of the records settled and not sent yet
	pending []*flowv1.FromProcess // those messages, and the routed ones, in record order
	names   []byte                // the items' ids and idempotency keys, before they are one string
	ends    []int                 // where each item's names end in names
}

var blockPool sync.Pool // of *batchBlocks

// getBlocks returns blocks for n records, zeroed.
func getBlocks(n int) *batchBlocks {
	bl, _ := blockPool.Get().(*batchBlocks)
	if bl == nil || cap(bl.items) < n {
		return &batchBlocks{items: make([]stdio.Item, n), results: make([]engine.Result, n), done: make([]bool, n), settled: make([]settled, n), ends: make([]int, n)}
	}
	bl.items, bl.results, bl.done, bl.settled, bl.ends = bl.items[:n], bl.results[:n], bl.done[:n], bl.settled[:n], bl.ends[:n]
	return bl
}

// putBlocks zeroes bl, so that it holds nothing of its batch, and pools it.
func putBlocks(bl *batchBlocks) {
	clear(bl.items)
	clear(bl.results)
	clear(bl.done)
	clear(bl.settled)
	bl.emits.reset()
	clear(bl.pending[:cap(bl.pending)])
	bl.pending = bl.pending[:0]
	blockPool.Put(bl)
}

// finished takes record i's result; the pool calls it exactly once per accepted record.
func (r *batchRun) finished(i int, res engine.Result) {
	res = r.stateDone(i, res)
	r.mu.Lock()
	defer r.mu.Unlock()
	recs := r.b.GetRecords()
	r.results[i], r.done[i] = res, true
	if i != r.next {
		return
	}
	for r.next < len(recs) && r.done[r.next] {
		res := r.results[r.next]
		n := len(r.pending)
		var s settled
		var pre *preEmits
		if r.state != nil && r.state.pre[r.next].built {
			pre = &r.state.pre[r.next]
		}
		s, r.pending = r.c.settle(r.b, r.topic, recs[r.next], res, &r.emits, r.pending, pre)
		r.results[r.next] = engine.Result{} // its emits are now its messages: let them go
		if s.kind == "failed" || s.kind == "abandoned" {
			r.sending = false
		}
		r.hold(n, res.Held)
		r.settled[r.next] = s
		r.next++
	}
	if r.next == len(recs) {
		r.answer()
		return
	}
	if r.pendingBytes >= flushBytes {
		r.flush(nil)
	}
}

// hold counts the messages a record just added to the batch's unsent output (pending[n:])
// and the bytes its result holds of the budget; once the batch stops sending (a record failed
// for good: the sidecar would discard them), they and what was pending are let go instead.
// r.mu is held.
func (r *batchRun) hold(n int, held int64) {
	if !r.sending {
		r.c.s.budget.Release(held + r.pendingHeld)
		r.drop()
		return
	}
	for _, m := range r.pending[n:] {
		r.pendingBytes += outputBytes(m)
	}
	r.pendingHeld += held
}

// drop lets go of the pending output, sent or not (the bytes it held are the caller's to
// release). r.mu is held.
func (r *batchRun) drop() {
	r.emits.reset()
	clear(r.pending)
	r.pending, r.pendingBytes, r.pendingHeld = r.pending[:0], 0, 0
}

// flush sends the pending output, then last if not nil, and releases the bytes they held.
// Their messages are encoded when the sends return, so their room is reused after. r.mu is
// held.
func (r *batchRun) flush(last *flowv1.FromProcess) {
	msgs := r.pending
	if last != nil {
		msgs = append(msgs, last)
	}
	r.c.send(r.b.GetBatchId(), msgs)
	r.c.s.budget.Release(r.pendingHeld)
	r.pending = msgs
	r.drop()
}

// outputBytes is what a message to send carries: its record's value, key and headers.
func outputBytes(m *flowv1.FromProcess) int {
	rec := m.GetEmit().GetRecord()
	n := len(rec.GetValue()) + len(rec.GetKey())
	for _, h := range rec.GetHeaders() {
		n += len(h.GetKey()) + len(h.GetValue())
	}
	return n
}

// answer sends the batch's pending output and its last message once every record is settled,
// and takes the batch out of flight. r.mu is held, or the batch has no records.
func (r *batchRun) answer() {
	c, id := r.c, r.b.GetBatchId()
	defer c.batches.Done()
	final := c.finalFor(r.b, r.topic, r.settled)
	abandoned := final == nil
	if !abandoned && final.GetAck() != nil && r.state != nil && !c.voided.HasFired() {
		// Staged goes before the Ack, so that the sidecar's join of the two rarely waits.
		if err := c.state.sendStaged(id, r.b.GetInlet(), r.state); err != nil {
			c.log.Warn("batch not answered: its Staged cannot be sent", "batch", id, "error", err)
			c.fail(err)
			final = nil
		}
	}
	if r.state != nil {
		c.s.budget.Release(r.state.held)
	}
	if final == nil {
		if abandoned {
			c.log.Info("batch abandoned: the conversation ended before its records did", "batch", id)
		}
		c.s.budget.Release(r.pendingHeld)
		r.drop()
	} else {
		r.flush(final)
	}
	putBlocks(r.batchBlocks)
	r.batchBlocks = nil
	c.forget(id)
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
	if c.voided.HasFired() {
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
		case <-c.voided.Done():
			<-answered
		}
		c.closePool(true)
		switch {
		case c.state == nil:
		case c.voided.HasFired():
			c.state.close() // void closes it too: its batches were abandoned
		default:
			c.state.finish(ctx, c.s.opts.stateAfter(stateEndWait))
		}
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
		c.voided.Fire()
		if sameStream {
			c.sendMu.Unlock()
		}
		c.stopTaking()
		c.cancel()
		c.closePool(false)
		c.batches.Wait()
		c.state.close()
		c.s.release(c)
	})
}

// stopTaking makes batch refuse new batches, so that batches.Wait may begin.
func (c *conversation) stopTaking() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
}

// closePool closes the pool; finish and void may both call it. Pool.Close and poolClosed may
// be called twice: a later call waits for the first and reports nothing.
func (c *conversation) closePool(drain bool) {
	ctx, cancel := context.WithTimeout(context.Background(), voidTimeout)
	defer cancel()
	if err := c.pool.Close(ctx, drain); err != nil {
		c.log.Warn("the action's processes did not all shut down in time", "error", err)
	}
	c.s.opts.Metrics.poolClosed(c.pool)
}

// inletNames lists the action's inlets for an error message about a batch's inlet.
func inletNames(a *actionconf.Action) string {
	names := make([]string, len(a.Inlets))
	for i, p := range a.Inlets {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
