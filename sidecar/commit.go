package sidecar

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitTimeout bounds one offset commit.
const commitTimeout = 30 * time.Second

// pending is a partition's confirmed, uncommitted work: the offset to commit and how many
// batches and records it covers.
type pending struct {
	offset  kgo.EpochOffset
	batches int
	records int64
}

// commitLoop produces acknowledged batches in rounds, every batch acknowledged since the last
// round at once, and commits at most once per FLOW_COMMIT_INTERVAL. At least once, a round's
// emits are written as soon as it is taken and its offsets wait, confirmed, for the next
// commit, which covers every round confirmed since the last; in exactly-once mode rounds are
// written into one open transaction, which ends when the interval has passed (txn.go). Once
// the conversation has ended (failed, or stopped and drained) it writes what was acknowledged
// before the end (those acks were valid), commits what is confirmed and returns; exactly
// once, a failed conversation aborts its open transaction instead. A produce or commit
// failure of its own ends it at once.
func (s *Sidecar) commitLoop(c *conversation) {
	defer func() {
		s.commitMu.Lock()
		s.mu.Lock()
		c.round, c.commitDone = nil, true
		s.forgetWritten()
		s.handed.Broadcast()
		s.mu.Unlock()
		s.commitMu.Unlock()
	}()
	var (
		tick   <-chan time.Time
		tickAt time.Time
	)
	for {
		s.mu.Lock()
		for len(c.acked) == 0 && c.err == nil && !c.ended {
			dueAt, waiting := s.commitDueLocked(c)
			if waiting && (!s.now().Before(dueAt) || s.commitEarlyLocked(c)) {
				break
			}
			if !waiting {
				tick = nil
			} else if tick == nil || !tickAt.Equal(dueAt) {
				tick, tickAt = s.after(dueAt.Sub(s.now())), dueAt
			}
			s.mu.Unlock()
			select {
			case <-c.commitKick:
			case <-c.failed.Done():
			case <-tick:
				tick = nil
			}
			s.mu.Lock()
		}
		round := c.acked
		c.acked = nil
		ending := c.err != nil || c.ended
		// Exactly once: a stream failure aborts; what was acknowledged is delivered again.
		abandon := s.kafka.txn != nil && c.err != nil
		c.round = round
		s.mu.Unlock()

		var err error
		switch {
		case abandon:
			s.abandonTxn(c, round)
		case s.kafka.txn != nil:
			err = s.txnStep(c, round, ending)
		default:
			err = s.step(c, round, ending)
		}
		s.mu.Lock()
		c.round = nil
		s.handed.Broadcast()
		if err != nil {
			c.fail(err)
			c.acked = nil
			for _, b := range round {
				if !b.revoked && b.p.epoch == b.epoch {
					c.failing[b.p] = true // a batch whose write keeps failing stalls its partition too
				}
			}
		}
		done := err != nil || abandon || (ending && len(c.acked) == 0)
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// commitDueLocked returns when the next commit is due and whether anything waits for it:
// confirmed offsets (at least once) or an open transaction. Called with mu held.
func (s *Sidecar) commitDueLocked(c *conversation) (time.Time, bool) {
	waiting := c.txnOpen
	if s.kafka.txn == nil {
		for _, p := range s.order {
			if p.owned && p.pend.batches > 0 {
				waiting = true
				break
			}
		}
	}
	return s.lastCommit.Add(max(s.cfg.CommitInterval, 0)), waiting
}

// commitDue reports whether the commit interval has passed since the last commit, or the
// commit should come early (commitEarlyLocked).
func (s *Sidecar) commitDue(c *conversation) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.now().Before(s.lastCommit.Add(max(s.cfg.CommitInterval, 0))) || s.commitEarlyLocked(c)
}

// step is one round at least once: the round's emits are written and, all confirmed, its
// offsets join the confirmed ones; those are committed when the interval has passed or the
// conversation is ending. A produce failure still commits what earlier rounds confirmed.
func (s *Sidecar) step(c *conversation, round []*batch, ending bool) error {
	if len(round) > 0 {
		if err := s.produceRound(c.produceCtx, round); err != nil {
			if cerr := s.commitPending(c.produceCtx, s.kafka.cl); cerr != nil {
				s.log.Warn("cannot commit the offsets confirmed before a produce failure; they are delivered again", "error", cerr)
			}
			return err
		}
	}
	if ending || s.commitDue(c) {
		return s.commitPending(c.produceCtx, s.kafka.cl)
	}
	return nil
}

// produceRound writes the emits of acknowledged batches and waits for the broker to confirm
// every one; then the batches' offsets are confirmed (confirm). A batch of a partition no
// longer owned is written (its Ack came while it was owned) but never confirmed.
func (s *Sidecar) produceRound(ctx context.Context, round []*batch) error {
	prod := s.kafka.prod
	var w roundWrites
	// One body for the callbacks of every record of the round (they are all produced now);
	// each batch's callback adds its id, frees its emits and counts it done (release, below).
	began := s.now()
	done := func(r *kgo.Record, err error, batchID uint64) {
		if err == nil {
			if !s.changelogs[r.Topic] {
				s.metrics.outlet(r.Topic).produced.Inc()
			}
			s.metrics.produce.Observe(s.now().Sub(began).Seconds())
			return
		}
		w.fail(r, s.denied(err, r.Topic), "nothing of the batch was committed", func() uint64 { return batchID })
	}
	var refused refusals // emits refused as too large, written again split (limits.go)
	for _, b := range round {
		w.add(b)
		// Once the batch's last emit is written (or failed), its emits are no longer held:
		// the budgets free them, one lock and one callback a batch.
		left := new(atomic.Int64)
		left.Store(int64(len(b.emits)))
		var release func(r *kgo.Record, err error)
		release = func(r *kgo.Record, err error) {
			defer w.wg.Done()
			s.limits.done(r)
			if refused.keep(r, err, release) {
				return
			}
			done(r, err, b.id)
			if left.Add(-1) == 0 {
				s.mu.Lock()
				s.drop(b)
				s.mu.Unlock()
			}
		}
		for _, r := range b.emits {
			s.limits.admit(ctx, r)
			prod.Produce(ctx, r, release)
		}
	}
	w.wg.Wait()
	for s.rewriteRefused(ctx, &refused, &w.wg, prod.Produce) {
		w.wg.Wait()
	}
	if w.err != nil {
		return w.err
	}
	s.mu.Lock()
	s.stats.EmitsProduced += w.emits
	s.mu.Unlock()
	s.confirm(round)
	return nil
}

// roundWrites is what the callbacks of one round's emits share: the wait for every emit, how
// many there are and the first failure, which the round returns.
type roundWrites struct {
	wg    sync.WaitGroup
	emits int64
	mu    sync.Mutex
	err   error // the first failure
}

// add counts the emits of b, whose callbacks each call wg.Done.
func (w *roundWrites) add(b *batch) {
	w.wg.Add(len(b.emits))
	w.emits += int64(len(b.emits))
}

// fail keeps the first failure, an emit r of the batch batchID names (asked only then) that
// failed with err; lost says what the failure leaves uncommitted.
func (w *roundWrites) fail(r *kgo.Record, err error, lost string, batchID func() uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("%w: %w: an emit of batch %d (%d bytes) to topic %s: %w: %s; check the outlet topic exists, is writable and accepts records this large",
			errStreamFailed, errProduce, batchID(), len(r.Value), r.Topic, err, lost)
	}
}

// confirm records batches whose every emit the broker confirmed (at least once): their
// offsets wait for the next commit, their records stay queued until it (written).
func (s *Sidecar) confirm(round []*batch) {
	s.promote(round) // the states Kafka now holds move into the stores
	s.mu.Lock()
	for _, b := range round {
		if p := b.p; !b.revoked && p.owned && p.epoch == b.epoch && !b.swept() {
			p.pend.offset = kgo.EpochOffset{Epoch: b.last.leaderEpoch, Offset: b.last.in.GetOffset() + 1}
			p.pend.batches++
			p.pend.records += int64(b.n)
		}
	}
	s.mu.Unlock()
	s.written(round)
}

// written marks the records of batches whose emits are written, and wait for their commit
// (done): fetching resumes where that brings a partition below low water.
func (s *Sidecar) written(round []*batch) {
	resume := false
	s.mu.Lock()
	for _, b := range round {
		p := b.p
		if b.revoked || !p.owned || p.epoch != b.epoch {
			continue // a rebalance discards: the new owner reads these records again
		}
		p.done = min(p.done+b.n, len(p.queue))
		if p.paused && p.belowLowWater() {
			p.paused = false
			resume = true
		}
	}
	s.mu.Unlock()
	if resume {
		s.applyPauses(s.kafka.cl)
	}
}

// commitEarlyLocked reports whether what waits for the commit should not wait for the
// interval's end: a partition holds as many written records as the high water mark allows
// unwritten ones (they count by bytes only, done), or its fetching paused at high water by
// the bytes its written records hold, which only the commit lets go; or, exactly once, the
// open transaction's emits fill FLOW_MAX_HELD_EMIT_BYTES, past which no batch is sent. The
// queues and the held emits stay within their bounds. Called with mu held.
func (s *Sidecar) commitEarlyLocked(c *conversation) bool {
	if s.kafka.txn != nil {
		if !c.txnOpen {
			return false
		}
		if s.stats.HeldEmitBytes >= s.cfg.MaxHeldEmitBytes {
			return true
		}
	}
	for _, p := range s.order {
		if !p.owned || p.done == 0 {
			continue
		}
		if p.done >= highWaterBatches*p.inlet.MaxRecords || (p.paused && len(p.queue)-p.done < highWaterBatches*p.inlet.MaxRecords) {
			return true
		}
	}
	return false
}

// forgetWritten is the end of a conversation: what is written and could not be committed
// is sent again by the next conversation, from the last commit. Called with commitMu and mu
// held.
func (s *Sidecar) forgetWritten() {
	for _, p := range s.order {
		p.pend, p.done = pending{}, 0
	}
}

// commitPending commits the confirmed offsets of every owned partition in one request. Never
// a commit for a partition no longer owned: ownership is checked under commitMu, which
// revocation takes too. What is confirmed while the commit is out waits for the next one.
func (s *Sidecar) commitPending(ctx context.Context, cl *kgo.Client) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	sent := map[*partition]pending{}
	s.mu.Lock()
	for _, p := range s.order {
		if !p.owned || p.pend.batches == 0 {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.partition] = p.pend.offset
		sent[p] = p.pend
	}
	s.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	var problems commitProblems
	began := s.now()
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			problems = append(problems, s.denied(err, ""))
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					problems = append(problems, fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, s.denied(err, t.Topic)))
				}
			}
		}
	})
	s.metrics.commit.Observe(s.now().Sub(began).Seconds())
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w for group %s: %w: the records are delivered again from the last commit",
			errStreamFailed, errCommit, s.cfg.ConsumerGroup, problems)
	}

	s.clearDenial()
	resume := false
	s.mu.Lock()
	s.lastCommit = s.now()
	for p, was := range sent {
		p.pend.batches -= was.batches
		p.pend.records -= was.records
		if s.dropHead(p, int(was.records)) {
			resume = true
		}
		p.commits++
		p.committed = was.offset.Offset
		p.committedTo(was.offset.Offset - 1)
		p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
		s.stats.BatchesCommitted += was.batches
		s.stats.RecordsCommitted += was.records
		s.metrics.inlet(p.topic).committed.Add(float64(was.records))
	}
	s.mu.Unlock()
	if resume {
		s.applyPauses(cl)
	}
	return nil
}

// commitProblems are the errors of one offset commit, written on one line; errors.Is and
// errors.As see each of them (kerr's codes among them).
type commitProblems []error

func (ps commitProblems) Error() string {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return strings.Join(msgs, "; ")
}

func (ps commitProblems) Unwrap() []error { return ps }

// settle records batches committed in a transaction: their records leave the queues (fetching
// resumes below low water), their partitions' stall tracking is reset, and the counters move.
func (s *Sidecar) settle(committed []*batch) {
	s.clearDenial()
	resume := false
	s.mu.Lock()
	s.lastCommit = s.now()
	for _, b := range committed {
		if b.p.epoch != b.epoch || b.swept() {
			continue
		}
		if s.dropHead(b.p, b.n) {
			resume = true
		}
		b.p.stallSince, b.p.attempts, b.p.warned = time.Time{}, 0, false
		b.p.committedTo(b.last.in.GetOffset())
		b.p.committed = b.last.in.GetOffset() + 1
		s.stats.BatchesCommitted++
		s.stats.RecordsCommitted += int64(b.n)
		s.metrics.inlet(b.p.topic).committed.Add(float64(b.n))
	}
	s.mu.Unlock()
	if resume {
		s.applyPauses(s.kafka.cl)
	}
}

// kickCommitterLocked wakes the current conversation's committer, if any. Called with mu
// held.
func (s *Sidecar) kickCommitterLocked() {
	if s.conv == nil {
		return
	}
	select {
	case s.conv.commitKick <- struct{}{}:
	default:
	}
}
