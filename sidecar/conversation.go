package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
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
}

// conversation is one Run stream, from Start to its end. Its fields are guarded by
// Sidecar.mu.
type conversation struct {
	start   *flowv1.Start
	stream  flowv1.Streamlet_RunClient
	outlets map[string]string // port → topic
	batches map[uint64]*batch // sent, not yet answered with Ack or Fail
	lastID  uint64
	acked   []*batch // acknowledged, waiting to be produced and committed
	// produceCtx is the context of every write and commit of the conversation; it is
	// canceled when the conversation's end has waited FLOW_SHUTDOWN_TIMEOUT, so a write that
	// cannot finish (an outlet gone) does not hold the end, nor a shutdown, for longer.
	produceCtx context.Context
	// stopping is set once Stop was sent: no more batches.
	stopping bool
	// failing holds the partitions whose acknowledged batches could not be written or
	// committed: with those in flight at a failure, they count a failed attempt.
	failing map[*partition]bool

	kick       chan struct{} // wakes the sender
	commitKick chan struct{} // wakes the committer
	failed     chan struct{} // closed at the first failure
	err        error         // the first failure
	recvDone   chan struct{} // closed when the receiver has seen the end of the stream
}

// fail records the first failure of the conversation and wakes everyone. Called with mu held.
func (c *conversation) fail(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.failed)
}

func (s *Sidecar) failConv(c *conversation, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.fail(err)
}

func streamFailed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrStreamFailed, fmt.Sprintf(format, args...))
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
	stream, err := flowv1.NewStreamletClient(s.conn).Run(streamCtx)
	if err != nil {
		return streamFailed("cannot open Run on the process: %v", err)
	}
	if err := stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: start}}); err != nil {
		return streamFailed("cannot send Start to the process: %v", err)
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
		failed:     make(chan struct{}),
		recvDone:   make(chan struct{}),
	}
	for _, o := range start.GetOutlets() {
		c.outlets[o.GetPort()] = o.GetTopic()
	}
	s.mu.Lock()
	s.conv = c
	s.stats.Conversations++
	s.mu.Unlock()
	s.log.Info("conversation started", "conversation", start.GetConversationId())
	s.writeReadiness(start.GetConversationId())

	var wg sync.WaitGroup
	senderCtx, stopSender := context.WithCancel(ctx)
	defer stopSender()
	commitDone := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); s.send(senderCtx, c) }()
	go func() { defer wg.Done(); defer close(c.recvDone); s.receive(c) }()
	go func() { defer close(commitDone); s.commitLoop(c) }()

	graceful := false
	var deadline time.Time // the end may take until then; then writes are abandoned
	select {
	case <-c.failed:
		deadline = s.now().Add(s.cfg.ShutdownTimeout)
	case <-ctx.Done():
		graceful = true
		deadline = s.now().Add(s.cfg.ShutdownTimeout)
		// Shutdown: the sender sends Stop and half-closes; wait, bounded, for the process to
		// finish its batches and complete its side.
		t := time.NewTimer(s.cfg.ShutdownTimeout)
		select {
		case <-c.recvDone:
		case <-c.failed:
		case <-t.C:
			s.failConv(c, streamFailed("the process did not complete the stream within %v of Stop (FLOW_SHUTDOWN_TIMEOUT)", s.cfg.ShutdownTimeout))
		}
		t.Stop()
	}
	s.removeReadiness()
	cancelStream()
	stopSender()
	wg.Wait()
	// The committer produces and commits what was acknowledged before the end, then stops.
	s.mu.Lock()
	c.stopping = true
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
	s.conv = nil
	return err
}

// send builds and sends batches whenever a partition has records and no batch in flight,
// until ctx ends (then Stop and half-close) or the stream fails.
func (s *Sidecar) send(ctx context.Context, c *conversation) {
	for {
		for {
			msg, err := s.nextBatch(c)
			if err != nil {
				s.failConv(c, err)
				return
			}
			if msg == nil {
				break
			}
			if err := c.stream.Send(msg); err != nil {
				s.failConv(c, streamFailed("the process is unreachable: sending batch %d: %v", msg.GetBatch().GetBatchId(), err))
				return
			}
		}
		select {
		case <-c.failed:
			return
		case <-ctx.Done():
			s.mu.Lock()
			c.stopping = true
			s.mu.Unlock()
			select {
			case <-c.failed:
				return
			default:
			}
			if err := c.stream.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: "shutdown"}}}); err != nil {
				s.failConv(c, streamFailed("cannot send Stop to the process: %v", err))
				return
			}
			if err := c.stream.CloseSend(); err != nil {
				s.failConv(c, streamFailed("cannot half-close the stream: %v", err))
			}
			return
		case <-c.kick:
		}
	}
}

// nextBatch builds the next batch to send, round-robin over the partitions, or returns nil
// when no partition has one. One batch in flight per partition, in offset order: a partition
// is skipped while its batch is out. A batch is whatever is queued, capped by the inlet's
// limits; a record that cannot fit in any batch fails the stream before it is sent.
func (s *Sidecar) nextBatch(c *conversation) (*flowv1.ToProcess, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.err != nil || c.stopping {
		return nil, nil
	}
	for range s.order {
		p := s.order[s.next%len(s.order)]
		s.next++
		if !p.owned || p.inflight != nil || p.sent >= len(p.queue) {
			continue
		}
		limit := s.cfg.MaxMessageBytes - batchOverhead
		recs := p.queue[p.sent:]
		if first := recs[0]; first.size > limit {
			// The record fails every conversation: its partition stalls.
			if p.stallSince.IsZero() {
				p.stallSince = s.now()
			}
			p.attempts++
			return nil, fmt.Errorf("%w: %w: topic %s partition %d offset %d is %d bytes as a Batch record, over the limit of %d bytes (FLOW_MAX_MESSAGE_BYTES=%d): raise FLOW_MAX_MESSAGE_BYTES, or remove the record from the topic",
				ErrStreamFailed, ErrRecordTooLarge, p.topic, p.partition, first.in.GetOffset(), first.size, limit, s.cfg.MaxMessageBytes)
		}
		n, bytes := 0, 0
		for _, r := range recs {
			if n > 0 && (n >= p.inlet.MaxRecords || bytes+r.size > p.inlet.MaxBytes || bytes+r.size > limit) {
				break
			}
			n++
			bytes += r.size
		}
		c.lastID++
		b := &batch{id: c.lastID, p: p, epoch: p.epoch, n: n, last: recs[n-1]}
		msg := &flowv1.Batch{BatchId: b.id, Inlet: p.inlet.Port, Partition: p.partition, Records: make([]*flowv1.InputRecord, n)}
		for i := range n {
			msg.Records[i] = recs[i].in
		}
		p.sent += n
		p.inflight = b
		c.batches[b.id] = b
		s.stats.BatchesSent++
		return &flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: msg}}, nil
	}
	return nil, nil
}

// receive reads the process's messages until the stream ends, keeping the rules: emits only
// for batches in flight and declared outlets, exactly one Ack or Fail per batch, nothing empty.
func (s *Sidecar) receive(c *conversation) {
	for {
		msg, err := c.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.mu.Lock()
				if !c.stopping {
					c.fail(streamFailed("the process closed its side of the stream without being asked (no Stop was sent)"))
				}
				s.mu.Unlock()
				return
			}
			s.failConv(c, s.recvFailure(err))
			return
		}
		s.mu.Lock()
		err = s.handle(c, msg)
		if err != nil {
			c.fail(err)
		}
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// handle applies one message of the process. Called with mu held.
func (s *Sidecar) handle(c *conversation, msg *flowv1.FromProcess) error {
	switch m := msg.GetMessage().(type) {
	case *flowv1.FromProcess_Emit:
		e := m.Emit
		b, err := c.lookup(e.GetBatchId(), "an Emit")
		if err != nil {
			return err
		}
		if b.revoked {
			return nil // a rebalance discards; the process could not have known
		}
		topic, ok := c.outlets[e.GetOutlet()]
		if !ok {
			return streamFailed("an Emit for batch %d names outlet %q, which Start does not bind (outlets: %s)", e.GetBatchId(), e.GetOutlet(), portNames(c.start.GetOutlets()))
		}
		if e.GetRecord() == nil {
			return streamFailed("an Emit for batch %d to outlet %q carries no record", e.GetBatchId(), e.GetOutlet())
		}
		r := &kgo.Record{Topic: topic, Key: e.GetRecord().Key, Value: e.GetRecord().GetValue()}
		if r.Value == nil {
			r.Value = []byte{}
		}
		for _, h := range e.GetRecord().GetHeaders() {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.GetKey(), Value: h.GetValue()})
		}
		b.emits = append(b.emits, r)
	case *flowv1.FromProcess_Ack:
		b, err := c.lookup(m.Ack.GetBatchId(), "an Ack")
		if err != nil {
			return err
		}
		s.answered(c, b)
		if b.revoked || b.p.epoch != b.epoch {
			return nil
		}
		c.acked = append(c.acked, b)
		select {
		case c.commitKick <- struct{}{}:
		default:
		}
	case *flowv1.FromProcess_Fail:
		b, err := c.lookup(m.Fail.GetBatchId(), "a Fail")
		if err != nil {
			return err
		}
		if b.revoked {
			s.answered(c, b)
			s.log.Info("the process failed a batch of a revoked partition; dropped", "batch", b.id, "topic", b.p.topic, "partition", b.p.partition, "error", m.Fail.GetError().GetMessage())
			return nil
		}
		return streamFailed("the process failed batch %d (topic %s partition %d offsets %d-%d): %s",
			b.id, b.p.topic, b.p.partition, b.last.in.GetOffset()-int64(b.n-1), b.last.in.GetOffset(), m.Fail.GetError().GetMessage())
	default:
		return streamFailed("the process sent an empty message (no Emit, Ack or Fail)")
	}
	return nil
}

// answered removes b from the batches in flight and frees its partition for the next batch.
// Called with mu held.
func (s *Sidecar) answered(c *conversation, b *batch) {
	delete(c.batches, b.id)
	if b.p.inflight == b {
		b.p.inflight = nil
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// lookup returns the batch in flight with id, or the error naming why it is not.
func (c *conversation) lookup(id uint64, what string) (*batch, error) {
	if b, ok := c.batches[id]; ok {
		return b, nil
	}
	if id == 0 || id > c.lastID {
		return nil, streamFailed("%s for batch %d, which was never sent (the last batch sent is %d)", what, id, c.lastID)
	}
	return nil, streamFailed("%s for batch %d, which is no longer in flight: it was already acknowledged or failed (an emit after its batch's ack fails the stream)", what, id)
}

func portNames(ps []*flowv1.PortBinding) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.GetPort()
	}
	if s == "" {
		return "none"
	}
	return s
}

// recvFailure names why reading the process's stream failed.
func (s *Sidecar) recvFailure(err error) error {
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return streamFailed("the process sent a message over the message limit of %d bytes (Start.max_message_bytes, FLOW_MAX_MESSAGE_BYTES): %v", s.cfg.MaxMessageBytes, err)
	case codes.Internal:
		return streamFailed("the process sent a message the sidecar cannot parse, or the stream broke: %v", err)
	}
	return streamFailed("the process closed the stream or became unreachable: %v", err)
}
