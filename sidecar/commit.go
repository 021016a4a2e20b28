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

// commitLoop produces and commits acknowledged batches, in rounds: every batch acknowledged
// since the last round is produced, all confirmed, and only then committed together. Once the
// conversation has ended (failed or stopping) it drains what was acknowledged before the end
// (those acks were valid) and returns; a produce or commit failure of its own ends it at once,
// committing nothing more.
func (s *Sidecar) commitLoop(c *conversation) {
	for {
		s.mu.Lock()
		for len(c.acked) == 0 && c.err == nil && !c.stopping {
			s.mu.Unlock()
			select {
			case <-c.commitKick:
			case <-c.failed:
			}
			s.mu.Lock()
		}
		round := c.acked
		c.acked = nil
		// Exactly once: a stream failure aborts; what was acknowledged is delivered again.
		abandon := s.kafka.txn != nil && c.err != nil
		c.round = round
		s.mu.Unlock()
		if len(round) == 0 || abandon {
			s.mu.Lock()
			for _, b := range round {
				s.drop(b) // never written: the budgets let go of them
			}
			s.mu.Unlock()
			return
		}
		err := s.commit(c, round)
		s.mu.Lock()
		c.round = nil
		s.mu.Unlock()
		if err != nil {
			s.mu.Lock()
			c.fail(err)
			c.acked = nil
			for _, b := range round {
				if !b.revoked && b.p.epoch == b.epoch {
					c.failing[b.p] = true // a batch whose write keeps failing stalls its partition too
				}
			}
			s.mu.Unlock()
			return
		}
	}
}

// commit is one commit round: a transaction in exactly-once mode, else produce then commit.
func (s *Sidecar) commit(c *conversation, round []*batch) error {
	if s.kafka.txn != nil {
		// The emits are held until the round ends (an aborted attempt writes them again), then
		// the budgets let go of them, committed or not.
		err := s.commitTxnRound(c, round)
		s.mu.Lock()
		for _, b := range round {
			s.drop(b)
		}
		s.mu.Unlock()
		return err
	}
	return s.commitRound(c.produceCtx, round)
}

// commitRound writes the emits of acknowledged batches and commits their offsets. Commit after
// the write: offsets only after every emit is confirmed by the broker; never a commit for a
// partition no longer owned (checked under commitMu, which revocation takes too).
func (s *Sidecar) commitRound(ctx context.Context, round []*batch) error {
	cl, prod := s.kafka.cl, s.kafka.prod
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
		emits    int64
	)
	// One body for the callbacks of every record of the round (they are all produced now);
	// each batch's callback adds its id, frees its emits and counts it done (release, below).
	began := s.now()
	done := func(r *kgo.Record, err error, batchID uint64) {
		if err == nil {
			s.metrics.outlet(r.Topic).produced.Inc()
			s.metrics.produce.Observe(s.now().Sub(began).Seconds())
			return
		}
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = fmt.Errorf("%w: %w: an emit of batch %d (%d bytes) to topic %s: %w: nothing of the batch was committed; check the outlet topic exists, is writable and accepts records this large",
				errStreamFailed, errProduce, batchID, len(r.Value), r.Topic, err)
		}
	}
	var refused refusals // emits refused as too large, written again split (limits.go)
	for _, b := range round {
		wg.Add(len(b.emits))
		emits += int64(len(b.emits))
		// Once the batch's last emit is written (or failed), its emits are no longer held:
		// the budgets free them, one lock and one callback a batch.
		left := new(atomic.Int64)
		left.Store(int64(len(b.emits)))
		var release func(r *kgo.Record, err error)
		release = func(r *kgo.Record, err error) {
			defer wg.Done()
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
	wg.Wait()
	for s.rewriteRefused(ctx, &refused, &wg, prod.Produce) {
		wg.Wait()
	}
	if firstErr != nil {
		return firstErr
	}

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var committed []*batch
	s.mu.Lock()
	s.stats.EmitsProduced += emits
	for _, b := range round {
		if b.revoked || !b.p.owned || b.p.epoch != b.epoch {
			continue // a rebalance discards: the new owner reads these records again
		}
		if offsets[b.p.topic] == nil {
			offsets[b.p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[b.p.topic][b.p.partition] = kgo.EpochOffset{Epoch: b.last.leaderEpoch, Offset: b.last.in.GetOffset() + 1}
		b.p.commits++
		committed = append(committed, b)
	}
	s.mu.Unlock()
	if len(committed) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	var problems commitProblems
	began = s.now()
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			problems = append(problems, err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					problems = append(problems, fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, err))
				}
			}
		}
	})
	s.metrics.commit.Observe(s.now().Sub(began).Seconds())
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w for group %s: %w: the records are delivered again from the last commit",
			errStreamFailed, errCommit, s.cfg.ConsumerGroup, problems)
	}

	s.settle(committed)
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

// settle records committed batches: their records leave the queues (fetching resumes below
// low water), their partitions' stall tracking is reset, and the counters move.
func (s *Sidecar) settle(committed []*batch) {
	resume := map[string][]int32{}
	s.mu.Lock()
	for _, b := range committed {
		if b.p.epoch != b.epoch {
			continue
		}
		if s.dropHead(b.p, b.n) {
			resume[b.p.topic] = append(resume[b.p.topic], b.p.partition)
		}
		b.p.stallSince, b.p.attempts, b.p.warned = time.Time{}, 0, false
		b.p.committedTo(b.last.in.GetOffset())
		b.p.committed = b.last.in.GetOffset() + 1
		s.stats.BatchesCommitted++
		s.stats.RecordsCommitted += int64(b.n)
		s.metrics.inlet(b.p.topic).committed.Add(float64(b.n))
	}
	s.mu.Unlock()
	if len(resume) > 0 {
		s.kafka.cl.ResumeFetchPartitions(resume)
	}
}
