package sidecar

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/codec"
	"github.com/ankka-flow/millrace/internal/lifetime"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

// batch is one Batch sent in a conversation.
type batch struct {
	id      uint64
	p       *partition
	epoch   uint64 // the partition's epoch when sent
	n       int    // records
	last    record
	emits   []*kgo.Record
	revoked bool // the partition was revoked while the batch was out: drop its answers

	sentAt    time.Time // for the round trip, Batch to Ack
	emitBytes int64     // of emits, held until they are written

	// Of a batch of a stateful inlet (statejoin.go): its distinct record keys; whether its
	// Ack and its Staged arrived (both: it is answered); its changelog records (held with its
	// emits, among them) and their keys and values (the records' own are let go once written).
	stateful      bool
	keys          map[string]string // each key mapped to itself: the one string the batch's maps share
	acked, staged bool
	state         []*kgo.Record
	stateKeys     [][]byte
	stateNames    []string // stateKeys as the strings of keys
	stateValues   [][]byte
}

// conversation is one Run stream, from Start to its end. Its fields are guarded by
// Sidecar.mu.
type conversation struct {
	start   *flowv1.Start
	stream  flowv1grpc.Streamlet_RunClient
	outlets map[string]string // port → topic
	batches map[uint64]*batch // sent, not yet answered with Ack or Fail
	lastID  uint64
	acked   []*batch     // acknowledged, waiting to be produced and committed
	round   []*batch     // being produced and committed by the committer
	slab    []kgo.Record // where the next emits' records are allocated (newRecord)
	// headerSlab is where the next emits' headers are allocated (newHeaders).
	headerSlab []kgo.RecordHeader
	// produceCtx is the context of every write and commit of the conversation; it is
	// canceled when the conversation's end has waited FLOW_SHUTDOWN_TIMEOUT, so a write that
	// cannot finish (an outlet gone) does not hold the end, nor a shutdown, for longer.
	produceCtx context.Context
	// stopping is set once Stop was sent: no more batches.
	stopping bool
	// ended is set once the receiver and the sender are done: nothing more is acknowledged,
	// and the committer finishes.
	ended bool
	// commitDone is set once the committer has returned: what is acknowledged after it is
	// never written.
	commitDone bool
	// txn holds the batches written into the open transaction (exactly once), their emits
	// held until it ends; txnOpen says one is open.
	txn     []*batch
	txnOpen bool
	// failing holds the partitions whose acknowledged batches could not be written or
	// committed: with those in flight at a failure, they count a failed attempt.
	failing map[*partition]bool

	kick       chan struct{} // wakes the sender
	sendMu     sync.Mutex    // held by whoever sends on the stream: the sender or the receiver
	commitKick chan struct{} // wakes the committer
	err        error         // the first failure
	recvDone   chan struct{} // closed when the receiver has seen the end of the stream

	failed lifetime.Event // fired by the first failure, whichever goroutine has it

	// state is the conversation's State.Attach stream, nil until the process's Open is
	// accepted; stateOpened fires when it is set (the sender is kicked then). attached is set
	// once an Open for this conversation is being answered (a second one is refused), and
	// stateEnd fires when the conversation ends, which ends its State stream.
	state       *stateLink
	stateOpened lifetime.Event
	attached    bool
	stateEnd    lifetime.Event
}

// fail records the first failure of the conversation and wakes everyone; later failures are
// dropped. Called with mu held.
func (c *conversation) fail(err error) {
	if c.failed.Fire() {
		c.err = err
	}
}

func (s *Sidecar) failConv(c *conversation, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.fail(err)
}

// streamFailed is a failed stream's error: errStreamFailed, then format (where %w keeps the
// cause in the chain), labelled with its cause for millrace_sidecar_stream_failures_total.
func streamFailed(cause, format string, args ...any) error {
	return &failure{cause: cause, err: fmt.Errorf("%w: "+format, append([]any{errStreamFailed}, args...)...)}
}

// kickSender wakes the current conversation's sender, if any.
func (s *Sidecar) kickSender() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kickSenderLocked()
}

func (s *Sidecar) kickSenderLocked() {
	if s.conv == nil {
		return
	}
	select {
	case s.conv.kick <- struct{}{}:
	default:
	}
}

// converse runs one conversation: Run, Start, batches, emits and acks, until the stream fails
// (returned, wrapping its cause) or ctx ends (graceful: Stop, bounded wait, nil). Whatever
// happens, nothing in flight is committed afterwards and every partition's uncommitted records
// are sent again by the next conversation.
func (s *Sidecar) converse(ctx context.Context, start *flowv1.Start) error {
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	stream, err := flowv1grpc.NewStreamletClient(s.conn).Run(streamCtx, codec.CallOption())
	if err != nil {
		return streamFailed(causeUnreachable, "cannot open Run on the process: %w", err)
	}
	produceCtx, cancelProduce := context.WithCancel(context.Background())
	defer cancelProduce()
	c := &conversation{
		produceCtx: produceCtx,
		start:      start,
		stream:     stream,
		outlets:    map[string]string{},
		batches:    map[uint64]*batch{},
		failing:    map[*partition]bool{},
		kick:       make(chan struct{}, 1),
		commitKick: make(chan struct{}, 1),
		recvDone:   make(chan struct{}),
	}
	for _, o := range start.GetOutlets() {
		c.outlets[o.GetPort()] = o.GetTopic()
	}
	// The conversation is live before its Start is sent: the process may open the State
	// service the moment Start arrives.
	s.mu.Lock()
	s.conv = c
	s.mu.Unlock()
	if err := stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: start}}); err != nil {
		s.mu.Lock()
		s.conv = nil
		s.mu.Unlock()
		c.stateEnd.Fire()
		return streamFailed(causeUnreachable, "cannot send Start to the process: %w", err)
	}
	s.mu.Lock()
	s.stats.Conversations++
	s.mu.Unlock()
	s.metrics.conversations.Inc()
	s.log.Info("conversation started", "conversation", start.GetConversationId())
	s.writeReadiness(start.GetConversationId())

	var wg sync.WaitGroup
	senderCtx, stopSender := context.WithCancel(ctx)
	defer stopSender()
	commitDone := make(chan struct{})
	wg.Go(func() { s.watchOpen(c) })
	wg.Go(func() { s.sweepLoop(senderCtx, c) })
	wg.Go(func() { s.send(senderCtx, c) })
	wg.Go(func() { defer close(c.recvDone); s.receive(c) })
	go func() { defer close(commitDone); s.commitLoop(c) }()

	graceful := false
	var deadline time.Time // the end may take until then; then writes are abandoned
	select {
	case <-c.failed.Done():
		deadline = s.now().Add(s.cfg.ShutdownTimeout)
	case <-ctx.Done():
		graceful = true
		deadline = s.now().Add(s.cfg.ShutdownTimeout)
		// Shutdown: the sender sends Stop and half-closes; wait, bounded, for the process to
		// finish its batches and complete its side.
		t := time.NewTimer(s.cfg.ShutdownTimeout)
		select {
		case <-c.recvDone:
		case <-c.failed.Done():
		case <-t.C:
			s.failConv(c, streamFailed(causeStopTimeout, "the process did not complete the stream within %v of Stop (FLOW_SHUTDOWN_TIMEOUT)", s.cfg.ShutdownTimeout))
		}
		t.Stop()
	}
	s.removeReadiness()
	cancelStream()
	c.stateEnd.Fire()
	stopSender()
	wg.Wait()
	// The committer produces and commits what was acknowledged before the end, then stops.
	s.mu.Lock()
	c.stopping, c.ended = true, true
	select {
	case c.commitKick <- struct{}{}:
	default:
	}
	s.mu.Unlock()
	abandon := time.AfterFunc(max(deadline.Sub(s.now()), 0), cancelProduce)
	<-commitDone
	abandon.Stop()

	s.mu.Lock()
	defer s.mu.Unlock()
	err = c.err
	if graceful && err == nil {
		s.log.Info("conversation stopped", "conversation", start.GetConversationId())
	}
	// Fail every in-flight batch with nothing committed: the next conversation sends the
	// partitions' uncommitted records again, from the last commit.
	now := s.now()
	for _, p := range s.order {
		failed := c.failing[p] || (p.inflight != nil && !p.inflight.revoked)
		if failed && err != nil && p.owned && len(p.queue) > 0 {
			if p.stallSince.IsZero() {
				p.stallSince = now
			}
			p.attempts++
		}
		p.inflight = nil
		p.sent = 0
	}
	s.stats.HeldEmitBytes = 0  // every emit of the conversation is written or dropped
	s.catchUpLocked(!graceful) // a graceful end is the last: nothing to catch up for
	s.conv = nil
	return err
}

// send builds and sends batches whenever a partition has records and no batch in flight,
// until ctx ends (then Stop and half-close) or the stream fails. The receiver sends too, the
// moment an Ack frees a partition (sendReady); sendMu keeps one of them at a time on the
// stream.
func (s *Sidecar) send(ctx context.Context, c *conversation) {
	for {
		c.sendMu.Lock()
		ok := s.sendReadyLocked(c)
		c.sendMu.Unlock()
		if !ok {
			return
		}
		select {
		case <-c.failed.Done():
			return
		case <-ctx.Done():
			s.mu.Lock()
			c.stopping = true
			s.mu.Unlock()
			c.sendMu.Lock()
			defer c.sendMu.Unlock()
			select {
			case <-c.failed.Done():
				return
			default:
			}
			if err := c.stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: "shutdown"}}}); err != nil {
				s.failConv(c, streamFailed(causeUnreachable, "cannot send Stop to the process: %w", err))
				return
			}
			if err := c.stream.CloseSend(); err != nil {
				s.failConv(c, streamFailed(causeUnreachable, "cannot half-close the stream: %w", err))
			}
			return
		case <-c.kick:
		}
	}
}

// sendReady sends the batches that are ready, if no one else is sending: the receiver calls
// it on an Ack, so a partition's next batch leaves without waiting for the sender to wake.
// When the sender is busy, it is kicked instead.
func (s *Sidecar) sendReady(c *conversation) {
	if !c.sendMu.TryLock() {
		s.kickSender()
		return
	}
	s.sendReadyLocked(c)
	c.sendMu.Unlock()
}

// sendReadyLocked sends every batch that is ready, with sendMu held. It returns false when
// the stream failed.
func (s *Sidecar) sendReadyLocked(c *conversation) bool {
	for {
		msg, read, err := s.nextBatch(c)
		if err != nil {
			s.failConv(c, err)
			return false
		}
		if msg == nil {
			return true
		}
		if read != nil {
			if err := s.sendStates(c, msg.GetBatch(), read); err != nil {
				s.failConv(c, err)
				return false
			}
		}
		if err := c.stream.Send(msg); err != nil {
			s.failConv(c, streamFailed(causeUnreachable, "the process is unreachable: sending batch %d: %w", msg.GetBatch().GetBatchId(), err))
			return false
		}
	}
}

// nextBatch builds the next batch to send, round-robin over the partitions, or returns nil
// when no partition has one. One batch in flight per partition, in offset order: a partition
// is skipped while its batch is out. A batch is whatever is queued, capped by the inlet's
// limits; a record that cannot fit in any batch fails the stream before it is sent. A batch of
// a stateful inlet waits for its partition's restore and for the State service, and comes
// with what its states are read from (read; sendStates sends them).
func (s *Sidecar) nextBatch(c *conversation) (*flowv1.ToProcess, *stateRead, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.err != nil || c.stopping {
		return nil, nil, nil
	}
	for range s.order {
		p := s.order[s.next%len(s.order)]
		s.next++
		if !p.owned || p.revoking || p.inflight != nil || p.sent >= len(p.queue) || !p.stateReady(c) {
			continue
		}
		if s.heldFull() {
			s.next-- // this partition is next once written emits wake the sender (release)
			return nil, nil, nil
		}
		limit := s.cfg.MaxMessageBytes - batchOverhead
		recs := p.queue[p.sent:]
		if first := recs[0]; first.size > limit {
			// The record fails every conversation: its partition stalls.
			if p.stallSince.IsZero() {
				p.stallSince = s.now()
			}
			p.attempts++
			return nil, nil, fmt.Errorf("%w: %w: topic %s partition %d offset %d is %d bytes as a Batch record, over the limit of %d bytes (FLOW_MAX_MESSAGE_BYTES=%d): raise FLOW_MAX_MESSAGE_BYTES, or remove the record from the topic",
				errStreamFailed, errRecordTooLarge, p.topic, p.partition, first.in.GetOffset(), first.size, limit, s.cfg.MaxMessageBytes)
		}
		n, bytes := 0, 0
		for _, r := range recs {
			if n > 0 && (n >= p.batchCap() || bytes+r.size > p.inlet.MaxBytes || bytes+r.size > limit) {
				break
			}
			n++
			bytes += r.size
		}
		c.lastID++
		b := &batch{id: c.lastID, p: p, epoch: p.epoch, n: n, last: recs[n-1], sentAt: s.now(), emits: make([]*kgo.Record, 0, n)}
		msg := &flowv1.Batch{BatchId: b.id, Inlet: p.inlet.Port, Partition: p.partition, Records: make([]*flowv1.InputRecord, n)}
		for i := range n {
			msg.Records[i] = recs[i].in
		}
		p.sent += n
		p.inflight = b
		p.lastSent = b.sentAt
		c.batches[b.id] = b
		s.stats.BatchesSent++
		if s.dropBatch != nil && s.dropBatch(p.topic, p.partition) {
			// A test's stranded partition: the batch counts as sent, yet nothing is in flight.
			p.inflight = nil
			delete(c.batches, b.id)
			continue
		}
		out := &flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: msg}}
		if p.stateful() {
			// Counted once trimmed to its states (sendStates).
			return out, s.readFor(c, b, recs[:n]), nil
		}
		s.metrics.inlet(p.topic).sent.Add(float64(n))
		return out, nil, nil
	}
	return nil, nil, nil
}
