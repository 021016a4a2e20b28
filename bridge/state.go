package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/codec"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// stateOpenTimeout bounds the wait for the sidecar's answer to Open: the sidecar answers at
// once (restoring partitions hold their batches, not the answer), so a sidecar silent this long
// is broken.
const stateOpenTimeout = 10 * time.Second

// batchStateWait is how long a batch of a stateful inlet waits for its BatchState after its
// Batch: the sidecar sends it first, so only a broken sidecar or stream is this late.
const batchStateWait = 10 * time.Second

// stateEndWait bounds the wait, once a conversation finished and half-closed its State
// stream, for the sidecar to end the stream: it does as soon as it reads the half-close.
const stateEndWait = 2 * time.Second

var (
	// errStateRefused: the sidecar answered Open with Refused, or does not serve the State
	// service: the deployment and the action line disagree, and a new conversation would too.
	errStateRefused = errors.New("the sidecar serves no state to this action")
	// errStateBroken: the State stream failed, or the sidecar broke its rules on it.
	errStateBroken = errors.New("the State stream with the sidecar broke")
	// errStateLate: a batch's BatchState did not come within batchStateWait of its Batch.
	errStateLate = errors.New("no BatchState for a batch")
)

// stateLink is a conversation's State.Attach stream, once its Open was answered with Opened.
type stateLink struct {
	c      *conversation
	port   int
	conn   *grpc.ClientConn
	stream statev1.State_AttachClient
	cancel context.CancelFunc // ends the stream
	limits map[string]*statev1.InletLimits
	maxMsg int // Opened.max_message_bytes

	sendMu sync.Mutex

	mu      sync.Mutex
	partial map[uint64]*batchStates // BatchState messages of a batch so far (more was set)
	got     map[uint64]*batchStates // complete, its batch not yet waiting
	waiting map[uint64]chan *batchStates
	err     error         // why the stream ended; set once
	broken  chan struct{} // closed when err is set
	closed  bool          // the conversation ended: a stream error is expected

	received chan struct{} // closed when receive returns; nil until it is started
}

// batchStates is one batch's pushed states, by key bytes.
type batchStates struct{ byKey map[string][]byte }

// add takes the entries of one BatchState message. The keys of the map are cut from one
// string of all the message's keys: one allocation a message, not one a key. The values are
// the entries' own bytes: the State codec (internal/codec) decodes them as slices of a copy of
// the message that nothing else holds, so they are the batch's alone.
func (p *batchStates) add(entries []*statev1.Entry) {
	n := 0
	for _, e := range entries {
		if e.Value != nil {
			n += len(e.GetKey())
		}
	}
	buf := make([]byte, 0, n)
	for _, e := range entries {
		if e.Value != nil {
			buf = append(buf, e.GetKey()...)
		}
	}
	all, at := string(buf), 0
	for _, e := range entries {
		if e.Value != nil {
			k := all[at : at+len(e.GetKey())]
			at += len(k)
			p.byKey[k] = e.GetValue()
		}
	}
}

// openState dials the sidecar's State service, sends Open for c's stateful inlets and waits
// for Opened. It returns the link and the engine's limits (the line's, lowered to what the
// changelog takes), or a status error that ends the conversation: the sidecar refused, does
// not serve the service, or cannot be reached.
func openState(ctx context.Context, c *conversation) (*stateLink, map[string]engine.StateLimits, error) {
	a := c.s.opts.Action
	port := c.s.opts.SidecarPort
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// No keepalive pings: the sidecar's gRPC ping policy is never provoked, as the sidecar's
	// own dial of the process provokes none of the bridge's.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMessageLimit), grpc.MaxCallSendMsgSize(grpcMessageLimit),
			codec.StateCallOption())) // a BatchState's entries decoded in a few allocations for the whole message
	if err != nil {
		return nil, nil, rpcErrorf(codes.Internal, "conversation %s: cannot dial the sidecar's State service at %s: %w", c.id, addr, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	l := &stateLink{c: c, port: port, conn: conn, cancel: cancel, partial: map[uint64]*batchStates{}, got: map[uint64]*batchStates{}, waiting: map[uint64]chan *batchStates{}, broken: make(chan struct{})}
	limits, err := l.open(ctx, sctx, a)
	if err != nil {
		l.close()
		return nil, nil, err
	}
	l.startReceive()
	return l, limits, nil
}

// open is openState's exchange: Attach, Open, and Opened or Refused.
func (l *stateLink) open(ctx, sctx context.Context, a *actionconf.Action) (map[string]engine.StateLimits, error) {
	c := l.c
	octx, ocancel := context.WithTimeout(ctx, stateOpenTimeout)
	defer ocancel()
	stop := context.AfterFunc(octx, l.cancel) // a newer Start, a shutdown or the timeout gives up
	defer stop()
	fail := func(err error) error {
		switch {
		case status.Code(err) == codes.Unimplemented:
			return rpcErrorf(codes.FailedPrecondition, "conversation %s: %w: the sidecar on port %d does not serve millrace.state.v1.State: run the millrace sidecar (this action keeps state: --state %s)", c.id, errStateRefused, l.port, statePorts(a))
		case errors.Is(octx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			return rpcErrorf(codes.Unavailable, "conversation %s: %w: the sidecar's State service on 127.0.0.1:%d did not answer Open within %s", c.id, errStateBroken, l.port, stateOpenTimeout)
		case ctx.Err() != nil:
			return rpcErrorf(codes.Aborted, "conversation %s: given up while opening the State service: %w", c.id, ctx.Err())
		}
		return rpcErrorf(codes.Unavailable, "conversation %s: %w: cannot open the sidecar's State service on 127.0.0.1:%d (%s): %w", c.id, errStateBroken, l.port, protocol.EnvSidecarPort, err)
	}
	stream, err := statev1.NewStateClient(l.conn).Attach(sctx)
	if err != nil {
		return nil, fail(err)
	}
	l.stream = stream
	open := &statev1.Open{ConversationId: c.id}
	for _, p := range a.State {
		open.Inlets = append(open.Inlets, &statev1.InletState{Inlet: p.Port, TtlMs: uint64(p.TTL / time.Millisecond), MaxValueBytes: uint32(p.MaxBytes)})
	}
	if err := stream.Send(&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Open{Open: open}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, fail(err) // io.EOF: the stream ended, and Recv says why
	}
	m, err := stream.Recv()
	if err != nil {
		return nil, fail(err)
	}
	switch m := m.GetMessage().(type) {
	case *statev1.SidecarMessage_Refused:
		probs := m.Refused.GetProblems()
		for i, p := range probs {
			c.log.Error("the sidecar refused this action's state", "problem", i+1, "of", len(probs), "message", p)
		}
		return nil, rpcErrorf(codes.FailedPrecondition, "conversation %s: %w: the sidecar refused Open (%s): make the action line's --state (%s) and the deployment's FLOW_INLET_<PORT>_STATE_TOPIC variables name the same inlets", c.id, errStateRefused, strings.Join(probs, "; "), statePorts(a))
	case *statev1.SidecarMessage_Opened:
		return l.opened(m.Opened, a)
	default:
		return nil, rpcErrorf(codes.FailedPrecondition, "conversation %s: %w: the sidecar answered Open with %T, not Opened or Refused", c.id, errStateBroken, m)
	}
}

// opened takes the sidecar's limits: each stateful inlet's must be there.
func (l *stateLink) opened(o *statev1.Opened, a *actionconf.Action) (map[string]engine.StateLimits, error) {
	// Only the line's inlets keep state here, whatever else Opened names (the sidecar checks
	// Open's inlets against its own; a disagreement is its Refused).
	l.limits = map[string]*statev1.InletLimits{}
	given := map[string]*statev1.InletLimits{}
	for _, in := range o.GetInlets() {
		given[in.GetInlet()] = in
	}
	l.maxMsg = int(o.GetMaxMessageBytes())
	if l.maxMsg <= 0 {
		l.maxMsg = protocol.MaxMessageBytes
	}
	limits := a.StateLimits()
	for _, p := range a.State {
		in, ok := given[p.Port]
		if !ok {
			return nil, rpcErrorf(codes.FailedPrecondition, "conversation %s: %w: the sidecar's Opened gives no limits for inlet %s (--state %s)", l.c.id, errStateBroken, p.Port, p.Port)
		}
		l.limits[p.Port] = in
		lim := limits[p.Port]
		if v := int(in.GetMaxValueBytes()); v > 0 && v < lim.MaxValueBytes {
			lim.MaxValueBytes = v
		}
		lim.MaxRecordBytes = int(in.GetMaxRecordBytes())
		limits[p.Port] = lim
		l.c.log.Info("state served", "inlet", p.Port, "changelog", in.GetChangelogTopic(), "max_value_bytes", lim.MaxValueBytes, "max_record_bytes", lim.MaxRecordBytes)
	}
	return limits, nil
}

// statePorts names the line's stateful inlets for a message.
func statePorts(a *actionconf.Action) string {
	names := make([]string, len(a.State))
	for i, p := range a.State {
		names[i] = p.Port
	}
	return strings.Join(names, ", ")
}

// keeps reports whether batches of inlet carry state.
func (l *stateLink) keeps(inlet string) bool {
	if l == nil {
		return false
	}
	_, ok := l.limits[inlet]
	return ok
}

// startReceive starts the receive loop; close waits for it.
func (l *stateLink) startReceive() {
	l.received = make(chan struct{})
	go func() { defer close(l.received); l.receive() }()
}

// receive reads BatchState messages until the stream ends, joining each batch's parts.
func (l *stateLink) receive() {
	for {
		m, err := l.stream.Recv()
		if err != nil {
			l.broke(err)
			return
		}
		bs := m.GetBatchState()
		if bs == nil {
			l.broke(fmt.Errorf("the sidecar sent %T after Opened, where only BatchState may come", m.GetMessage()))
			return
		}
		id := bs.GetBatchId()
		l.mu.Lock()
		p := l.partial[id]
		if p == nil {
			p = &batchStates{byKey: make(map[string][]byte, len(bs.GetEntries()))}
		}
		p.add(bs.GetEntries())
		switch {
		case bs.GetMore():
			l.partial[id] = p
		default:
			delete(l.partial, id)
			if w, ok := l.waiting[id]; ok {
				delete(l.waiting, id)
				w <- p // buffered: never blocks
			} else {
				l.got[id] = p
			}
		}
		l.mu.Unlock()
	}
}

// broke records why the stream ended and, unless the conversation is ending anyway, ends it.
func (l *stateLink) broke(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = fmt.Errorf("%w: %w", errStateBroken, err)
	close(l.broken)
	closed := l.closed
	l.mu.Unlock()
	if !closed {
		l.c.fail(l.err)
	}
}

// await returns batch id's pushed states: at once when they came first (as the sidecar sends
// them), else when they come. after is the clock of the wait; an error when the stream broke,
// the conversation ended (ctx) or the states are late.
func (l *stateLink) await(ctx context.Context, b *flowv1.Batch, after <-chan time.Time) (*batchStates, error) {
	id := b.GetBatchId()
	l.mu.Lock()
	if p, ok := l.got[id]; ok {
		delete(l.got, id)
		l.mu.Unlock()
		return p, nil
	}
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	w := make(chan *batchStates, 1)
	l.waiting[id] = w
	l.mu.Unlock()
	forget := func() {
		l.mu.Lock()
		delete(l.waiting, id)
		l.mu.Unlock()
	}
	select {
	case p := <-w:
		return p, nil
	case <-after:
		forget()
		return nil, fmt.Errorf("%w: batch %d of inlet %s (partition %d) has had no BatchState on the State stream %s after its Batch: the sidecar sends it before the Batch, so the sidecar or its stream is broken", errStateLate, id, b.GetInlet(), b.GetPartition(), batchStateWait)
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	case <-l.broken:
		forget()
		return nil, l.err
	}
}

// sendStaged sends batch id's Staged: the last state staged for each key it changed, in
// messages under Opened.max_message_bytes (split with more, never within an entry).
func (l *stateLink) sendStaged(id uint64, inlet string, o *batchOverlay) error {
	const room = 32 // the message's own tags and lengths, the batch id, more
	entries := o.entries()
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	send := func(part []*statev1.Entry, more bool) error {
		m := &statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: id, Entries: part, More: more}}}
		if err := l.stream.Send(m); err != nil {
			return fmt.Errorf("%w: batch %d's Staged cannot be sent: %w", errStateBroken, id, err)
		}
		return nil
	}
	start, size := 0, room
	for i, e := range entries {
		n := proto.Size(e) + 6 // its tag and length within Staged
		if i > start && size+n > l.maxMsg {
			if err := send(entries[start:i], true); err != nil {
				return err
			}
			start, size = i, room
		}
		size += n
	}
	if err := send(entries[start:], false); err != nil {
		return err
	}
	for _, e := range entries {
		kind := "set"
		if e.Value == nil {
			kind = "delete"
		}
		l.c.s.opts.Metrics.stateStaged(inlet, kind)
	}
	return nil
}

// finish ends the stream of a conversation that finished cleanly, every batch answered (no
// Staged is to come): it half-closes the process's side, so that the sidecar reads the end
// of a process done with the stream rather than a canceled one (which it takes for a broken
// link), and waits for the sidecar to end its side, at most stateEndWait (on after, the
// State stream's clock) or until ctx ends; then it closes.
func (l *stateLink) finish(ctx context.Context, after <-chan time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.sendMu.Lock()
	err := l.stream.CloseSend()
	l.sendMu.Unlock()
	if err == nil {
		select {
		case <-l.broken:
		case <-after:
			l.c.log.Warn("the sidecar did not end the State stream after the conversation finished; closing it", "waited", stateEndWait)
		case <-ctx.Done():
		}
	}
	l.close()
}

// close ends the stream and the connection, and waits for the receive loop, which the
// stream's cancel ends; the conversation is over. It may be called more than once.
func (l *stateLink) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	if l.received != nil {
		<-l.received
	}
	l.conn.Close()
}

// batchOverlay is the state of one batch of a stateful inlet in flight: the states the
// sidecar pushed for its keys, and over them what its done records staged. The batch's
// WithState hook reads it, its done callback writes it, and its Staged is made of what it
// staged. It belongs to the batch: a batch still running after its partition moved on reads
// only its own states.
type batchOverlay struct {
	pushed  *batchStates
	records int

	mu     sync.Mutex
	staged map[string]stagedKey // by key: the last state a done record staged
	pre    []preEmits           // by record: emits built when it was done with a state
	held   int64                // the budget bytes of the staged states, until Staged is sent
	// emits is the room of the pre-built Emit messages, one block for the batch (sized to
	// its records) instead of one a record; its messages live as long as the batch.
	emits emitScratch
}

// stagedKey is a key's last staged state, with the key's bytes (the record's, which the
// batch's message holds) for its Staged entry.
type stagedKey struct {
	key []byte
	st  *stdio.StagedState
}

// preEmits are the Emit messages of a record done with a state, built when it was done
// rather than when it settles: its state is recorded only if they are good, so a state is
// never seen by the key's next record, nor sent in Staged, for a record that then fails.
type preEmits struct {
	msgs  []*flowv1.FromProcess
	err   error
	built bool // false: the record was not done with a state, its emits are built as it settles
}

func newBatchOverlay(pushed *batchStates, records int) *batchOverlay {
	return &batchOverlay{pushed: pushed, records: records, staged: map[string]stagedKey{}, pre: make([]preEmits, records)}
}

// of is the state a record of key sees: its batch's last staged, else the pushed one; nil
// when none.
func (o *batchOverlay) of(key []byte) json.RawMessage {
	o.mu.Lock()
	sk, ok := o.staged[string(key)]
	o.mu.Unlock()
	if ok {
		return sk.st.Value // nil: deleted
	}
	return o.pushed.byKey[string(key)]
}

// record keeps the state a done record of key staged, with the budget bytes it holds. name
// is key as a string when the caller has one (the item's), else empty.
func (o *batchOverlay) record(key []byte, name *string, st *stdio.StagedState, held int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if name != nil && len(*name) == len(key) {
		o.staged[*name] = stagedKey{key, st}
	} else {
		o.staged[string(key)] = stagedKey{key, st}
	}
	o.held += held
}

// room returns room for n Emit messages of a record done with a state.
func (o *batchOverlay) room(n int) []emitMessage {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.emits.msgs == nil {
		o.emits.msgs = make([]emitMessage, max(n, o.records))
	}
	return o.emits.next(n)
}

// entries are the batch's Staged entries, in key order: the order records of different keys
// finish in is the pool's, not the batch's, and a Staged should say the same for the same
// batch. Called once every record is done.
func (o *batchOverlay) entries() []*statev1.Entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys := slices.Sorted(maps.Keys(o.staged))
	slab := make([]statev1.Entry, len(keys)) // one allocation for the batch's entries
	entries := make([]*statev1.Entry, len(keys))
	for i, k := range keys {
		sk := o.staged[k]
		e := &slab[i]
		e.Key = sk.key
		if e.Key == nil {
			e.Key = []byte{} // an empty key is a key
		}
		if sk.st.Value != nil {
			e.Value = sk.st.Value
		}
		entries[i] = e
	}
	return entries
}

// stateDone is the part of a record's done callback that keeps state: for a Done result with
// a state, it builds the record's emits now and, if they are good, records the state in the
// batch's overlay before the pool releases the key's next record. It returns the result with
// the state's bytes taken out of Held (the overlay holds them until Staged is sent).
func (r *batchRun) stateDone(i int, res engine.Result) engine.Result {
	c := r.c
	in := r.b.GetRecords()[i]
	if res.Outcome == engine.Failed && errors.Is(res.Err, engine.ErrState) {
		c.s.opts.Metrics.stateRefused(r.b.GetInlet(), refusedReason(in, r.state != nil))
	}
	if r.state == nil || res.Outcome != engine.Done || res.State == nil || in.GetRecord().GetKey() == nil {
		return res
	}
	msgs, err := c.emitsInto(r.b.GetBatchId(), res.Emits, &res.Trace, emitTracestate(&res, in), r.state.room(len(res.Emits)), nil)
	r.state.pre[i] = preEmits{msgs: msgs, err: err, built: true}
	if err != nil {
		return res
	}
	held := min(int64(len(res.State.Value)), res.Held)
	res.Held -= held
	var name *string // the item's key as a string, made when the item was: not made again
	if i < len(r.items) {
		name = r.items[i].Key
	}
	r.state.record(in.GetRecord().GetKey(), name, res.State, held)
	return res
}

// refusedReason is the reason label of a state the engine refused (engine.ErrState), from the
// record and the line: no key, an inlet without --state, else a state over its limits.
func refusedReason(in *flowv1.InputRecord, stateful bool) string {
	switch {
	case in.GetRecord().GetKey() == nil:
		return "keyless"
	case !stateful:
		return "undeclared"
	}
	return "too-large"
}

// stateOf is the WithState hook of r's items; index, when not nil, maps each item to its
// record.
func (r *batchRun) stateOf(index []int) engine.SubmitOption {
	recs := r.b.GetRecords()
	return engine.WithState(func(i int) json.RawMessage {
		if index != nil {
			i = index[i]
		}
		return r.state.of(recs[i].GetRecord().GetKey())
	})
}

// awaitState waits for the BatchState of b, a batch of a stateful inlet, and returns its
// overlay; nil when the batch is not to run (the conversation ended, or ends now: its
// BatchState is late or the stream broke).
func (c *conversation) awaitState(b *flowv1.Batch) *batchOverlay {
	t0 := time.Now()
	pushed, err := c.state.await(c.ctx, b, c.s.opts.stateAfter(batchStateWait))
	c.s.opts.Metrics.stateWaited(time.Since(t0))
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("batch not run: its states did not come", "batch", b.GetBatchId(), "error", err)
			c.fail(err)
		}
		return nil
	}
	return newBatchOverlay(pushed, len(b.GetRecords()))
}

// fail ends the conversation: the Run stream ends with UNAVAILABLE and err, and the sidecar
// starts over.
func (c *conversation) fail(err error) {
	select {
	case c.unhealthy <- err:
	default:
	}
}

// logStateVersion says, at discovery, why a stateful action needs a sidecar of the state
// minor when the sidecar speaks an earlier one (the sidecar refuses the process then).
func (s *Server) logStateVersion(info *flowv1.SidecarInfo) {
	a := s.opts.Action
	if len(a.State) == 0 {
		return
	}
	if err := protocol.CheckVersionAgainst(info.GetProtocolVersion(), s.spec.GetProtocolVersion()); err != nil {
		s.log.Error("this action keeps state, which needs a sidecar speaking the process's protocol version or later",
			"state", statePorts(a), "process_version", s.spec.GetProtocolVersion(), "sidecar_version", info.GetProtocolVersion(), "error", err)
	}
}
