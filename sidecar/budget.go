package sidecar

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The emit budgets. The sidecar holds a batch's emits until its Ack (the spec) and then until
// they are written, so an action's fan-out decides its memory. Two budgets bound it:
// FLOW_MAX_BATCH_EMIT_BYTES per batch (a batch over it fails the stream, and its partition is
// delivered again in halves, down to one record; one record over it alone stalls there) and
// FLOW_MAX_HELD_EMIT_BYTES over every batch of the conversation (past it no new batch is sent
// until held emits are written: backpressure). The global budget only holds new batches back,
// never an answer, so a batch larger than it on its own still goes through, alone.

// hold counts an emit of b against the budgets and keeps it. Called with mu held; it returns
// the stream's failure when b goes over the per-batch budget, and then caps b's partition.
func (s *Sidecar) hold(b *batch, r *kgo.Record) error {
	size := recordBytes(r) // key, value and headers
	if b.emitBytes+size > s.cfg.MaxBatchEmitBytes {
		return s.overBudget(b, b.emitBytes+size)
	}
	b.emitBytes += size
	b.emits = append(b.emits, r)
	s.stats.HeldEmitBytes += size
	s.stats.PeakHeldEmitBytes = max(s.stats.PeakHeldEmitBytes, s.stats.HeldEmitBytes)
	return nil
}

// release uncounts size bytes of emits once written (or dropped), waking the sender when that
// brings the held emits back under the global budget. Called with mu held.
func (s *Sidecar) release(size int64) {
	was := s.stats.HeldEmitBytes
	s.stats.HeldEmitBytes -= size
	if was >= s.cfg.MaxHeldEmitBytes && s.stats.HeldEmitBytes < s.cfg.MaxHeldEmitBytes {
		s.kickSenderLocked()
	}
}

// drop lets go of the emits of a batch once written, or that will not be (its partition
// revoked). Called with mu held.
func (s *Sidecar) drop(b *batch) {
	s.release(b.emitBytes)
	// The records and headers come from slabs shared with other batches' emits (newRecord,
	// newHeaders): their bytes must go, or a slab still in use would keep them.
	for _, r := range b.emits {
		clear(r.Headers)
		r.Key, r.Value, r.Headers = nil, nil, nil
	}
	b.emits, b.emitBytes = nil, 0
}

// heldFull reports whether the held emits fill the global budget: no new batch is sent until
// some are written. Called with mu held.
func (s *Sidecar) heldFull() bool {
	if s.stats.HeldEmitBytes < s.cfg.MaxHeldEmitBytes {
		return false
	}
	s.stats.EmitBudgetWaits++
	return true
}

// overBudget is the failure of a batch whose emits reached size, over the per-batch budget.
// A batch of several records caps its partition's next batches at half as many records,
// until the records it held are committed (bisect); a single record stalls its partition
// (the attempts and the stall warning follow from the failed batch in flight). Called with
// mu held.
func (s *Sidecar) overBudget(b *batch, size int64) error {
	p := b.p
	first, last := b.last.in.GetOffset()-int64(b.n-1), b.last.in.GetOffset()
	if b.n == 1 {
		return fmt.Errorf("%w: %w: topic %s partition %d offset %d: the record's emits reached %d bytes, over the per-batch emit budget of %d bytes (FLOW_MAX_BATCH_EMIT_BYTES) on their own: nothing of it is written and the partition is stalled at this record; raise FLOW_MAX_BATCH_EMIT_BYTES (and the pod's memory limit with it)",
			errStreamFailed, errRecordEmitBudget, p.topic, p.partition, last, size, s.cfg.MaxBatchEmitBytes)
	}
	p.halve(b)
	// The failure fails every batch in flight. One that was past half the budget already is
	// on its way over it too: it is halved as well, rather than sent whole again to fail the
	// next conversation.
	for _, q := range s.order {
		if ob := q.inflight; q != p && ob != nil && !ob.revoked && ob.n > 1 && 2*ob.emitBytes > s.cfg.MaxBatchEmitBytes {
			q.halve(ob)
		}
	}
	return fmt.Errorf("%w: %w: batch %d of topic %s partition %d (offsets %d-%d, %d records) emitted %d bytes, over the per-batch emit budget of %d bytes (FLOW_MAX_BATCH_EMIT_BYTES): nothing of it is written; the partition is delivered again in batches of at most %d records until offset %d is committed",
		errStreamFailed, errBatchEmitBudget, b.id, p.topic, p.partition, first, last, b.n, size, s.cfg.MaxBatchEmitBytes, p.capRecords, p.capUntil)
}

// halve caps the partition's next batches at half the records of b, until b's last offset is
// committed. Called with mu held.
func (p *partition) halve(b *batch) {
	p.capRecords = max(b.n/2, 1)
	p.capUntil = max(p.capUntil, b.last.in.GetOffset())
}

// batchCap is the most records the partition's next batch may hold: the inlet's limit, or
// the bisect's cap. Called with mu held.
func (p *partition) batchCap() int {
	if p.capRecords > 0 {
		return min(p.capRecords, p.inlet.MaxRecords)
	}
	return p.inlet.MaxRecords
}

// committedTo ends the bisect once the records of the batch that went over the budget are
// committed: the next batches are whole again. Called with mu held.
func (p *partition) committedTo(offset int64) {
	if p.capRecords > 0 && offset >= p.capUntil {
		p.capRecords, p.capUntil = 0, 0
	}
}
