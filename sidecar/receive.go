package sidecar

import (
	"errors"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// receive reads the process's messages until the stream ends, keeping the rules: emits only
// for batches in flight and declared outlets, exactly one Ack or Fail per batch, nothing empty.
func (s *Sidecar) receive(c *conversation) {
	msg := new(flowv1.FromProcess) // decoded into again and again: handle keeps only its fields' values
	for {
		err := c.stream.RecvMsg(msg)
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.mu.Lock()
				if !c.stopping {
					c.fail(streamFailed(causeUnreachable, "the process closed its side of the stream without being asked (no Stop was sent)"))
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
		if msg.GetEmit() == nil { // an Ack, or a Fail dropped: a partition is free
			s.sendReady(c) // its next batch, at once
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
		if b.acked { // a stateful batch waits for its Staged after its Ack; its emits are all in
			return streamFailed(causeProtocol, "an Emit for batch %d after its Ack (an emit after its batch's ack fails the stream)", b.id)
		}
		if b.revoked {
			return nil // a rebalance discards; the process could not have known
		}
		topic, ok := c.outlets[e.GetOutlet()]
		if !ok {
			return streamFailed(causeProtocol, "an Emit for batch %d names outlet %q, which Start does not bind (outlets: %s)", e.GetBatchId(), e.GetOutlet(), portNames(c.start.GetOutlets()))
		}
		if e.GetRecord() == nil {
			return streamFailed(causeProtocol, "an Emit for batch %d to outlet %q carries no record", e.GetBatchId(), e.GetOutlet())
		}
		r := c.newRecord()
		r.Topic, r.Key, r.Value = topic, e.GetRecord().Key, e.GetRecord().GetValue()
		if r.Value == nil {
			r.Value = []byte{}
		}
		if hs := e.GetRecord().GetHeaders(); len(hs) > 0 {
			r.Headers = c.newHeaders(len(hs))
			for i, h := range hs {
				r.Headers[i] = kgo.RecordHeader{Key: h.GetKey(), Value: h.GetValue()}
			}
		}
		if err := s.limits.fits(r); err != nil {
			// Over Start.max_message_bytes too, or the process would have refused it: the
			// broker would refuse it on every attempt, so the stream fails here, before any of
			// the batch is written, and the partition stalls at this batch.
			return streamFailed(causeMessageLarge, "an Emit for batch %d (topic %s partition %d offsets %d-%d) to outlet %q: %w: the partition stalls at this batch; raise the topic's max.message.bytes, or have the action emit smaller records (Start.max_message_bytes is %d)",
				b.id, b.p.topic, b.p.partition, b.last.in.GetOffset()-int64(b.n-1), b.last.in.GetOffset(), e.GetOutlet(), err, c.start.GetMaxMessageBytes())
		}
		if err := s.hold(b, r); err != nil {
			return err
		}
		s.metrics.outlet(topic).emitted.Inc()
	case *flowv1.FromProcess_Ack:
		b, err := c.lookup(m.Ack.GetBatchId(), "an Ack")
		if err != nil {
			return err
		}
		if b.stateful {
			_, err := s.ackArrived(c, b) // answered once its Staged is in too
			return err
		}
		s.joined(c, b)
	case *flowv1.FromProcess_Fail:
		b, err := c.lookup(m.Fail.GetBatchId(), "a Fail")
		if err != nil {
			return err
		}
		if b.acked {
			return streamFailed(causeProtocol, "a Fail for batch %d, which was already acknowledged", b.id)
		}
		if b.revoked {
			s.answered(c, b)
			s.log.Info("the process failed a batch of a revoked partition; dropped", "batch", b.id, "topic", b.p.topic, "partition", b.p.partition, "error", m.Fail.GetError().GetMessage())
			return nil
		}
		return streamFailed(causeFailedBatch, "the process failed batch %d (topic %s partition %d offsets %d-%d): %s",
			b.id, b.p.topic, b.p.partition, b.last.in.GetOffset()-int64(b.n-1), b.last.in.GetOffset(), m.Fail.GetError().GetMessage())
	default:
		return streamFailed(causeProtocol, "the process sent an empty message (no Emit, Ack or Fail)")
	}
	return nil
}

// answered removes b from the batches in flight and frees its partition for the next batch,
// which the receiver sends next (sendReady). Called with mu held.
func (s *Sidecar) answered(c *conversation, b *batch) {
	delete(c.batches, b.id)
	if b.p.inflight == b {
		b.p.inflight = nil
	}
}

// emitSlab is how many emitted records, or their headers, are allocated at once.
const emitSlab = 128

// fromSlab returns n zero values from *slab, shared with the emits around them (a slab stays
// while one of them waits to be produced), making a new slab when this one is short. Called
// with mu held.
func fromSlab[T any](slab *[]T, n int) []T {
	if len(*slab) < n {
		*slab = make([]T, max(emitSlab, n))
	}
	vs := (*slab)[:n:n]
	*slab = (*slab)[n:]
	return vs
}

// newRecord returns a zero record for an emit (fromSlab). Called with mu held.
func (c *conversation) newRecord() *kgo.Record { return &fromSlab(&c.slab, 1)[0] }

// newHeaders returns n zero headers for an emit (fromSlab). Called with mu held.
func (c *conversation) newHeaders(n int) []kgo.RecordHeader { return fromSlab(&c.headerSlab, n) }

// lookup returns the batch in flight with id, or the error naming why it is not.
func (c *conversation) lookup(id uint64, what string) (*batch, error) {
	if b, ok := c.batches[id]; ok {
		return b, nil
	}
	if id == 0 || id > c.lastID {
		return nil, streamFailed(causeProtocol, "%s for batch %d, which was never sent (the last batch sent is %d)", what, id, c.lastID)
	}
	return nil, streamFailed(causeProtocol, "%s for batch %d, which is no longer in flight: it was already acknowledged or failed (an emit after its batch's ack fails the stream)", what, id)
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
		return streamFailed(causeMessageLarge, "the process sent a message over the message limit of %d bytes (Start.max_message_bytes, FLOW_MAX_MESSAGE_BYTES): %w", s.cfg.MaxMessageBytes, err)
	case codes.Internal:
		return streamFailed(causeProtocol, "the process sent a message the sidecar cannot parse, or the stream broke: %w", err)
	}
	return streamFailed(causeUnreachable, "the process closed the stream or became unreachable: %w", err)
}
