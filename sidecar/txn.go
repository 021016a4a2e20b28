package sidecar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Exactly once (FLOW_DELIVERY=exactly-once): the rounds of one commit interval
// (FLOW_COMMIT_INTERVAL) are one Kafka transaction. The
// sidecar uses one client for it, franz-go's GroupTransactSession, rather than its two
// clients of at-least-once mode: the session's offset commit carries the group's generation,
// member id and instance id (KIP-447), so the broker refuses it from a member whose
// partitions moved; it adds the offsets to the transaction and ends a transaction that holds
// offsets only; it aborts when any partition is revoked or lost between Begin and End, and
// holds revocation back while EndTxn is out. A separate producer would need all of that
// written by hand (and franz-go's EndTransaction on a client without a group sends no EndTxn
// for a transaction without records). The session commits what was polled by default; the
// sidecar polls ahead of its batches, so the commit is rewritten to the round's batches
// (PreTxnCommitFnContext).

// txnTimeout is the transaction timeout (transaction.timeout.ms): how long the broker lets a
// transaction stay open before aborting it itself. It bounds how long a sidecar that died
// mid-round holds back read_committed readers of its outlets when no successor with its
// transactional id fences it sooner. A round must end within it: it covers produceTimeout.
const txnTimeout = produceTimeout + commitTimeout

// txnAttempts bounds the transactions one interval's batches may take: they are aborted and
// written again, those still owned, when a rebalance touches them.
const txnAttempts = 5

// txnOpts are the exactly-once client's options beyond the consumer's.
func (s *Sidecar) txnOpts() []kgo.Opt {
	return append(s.producerOpts(),
		kgo.TransactionalID(s.cfg.TransactionalID),
		kgo.TransactionTimeout(txnTimeout),
		// Read only committed records: an aborted write upstream is never a record here.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
}

// initProducer fences this replica's predecessor at start-up: asking for the transactional
// id's producer id makes the broker abort whatever transaction an earlier sidecar with the
// same id left open (its outlets' read_committed readers go on at once) and refuse that
// sidecar's writes from now on. It retries until ctx ends, and fails only when the broker
// refuses the id.
func (s *Sidecar) initProducer(ctx context.Context) error {
	b := s.newBackoff(s.cfg.DiscoveryBackoff)
	for {
		ictx, cancel := context.WithTimeout(ctx, commitTimeout)
		id, epoch, err := s.kafka.cl.ProducerID(ictx)
		cancel()
		if err == nil {
			s.log.Info("transactional producer ready; an earlier sidecar with this transactional id is fenced",
				"transactional_id", s.cfg.TransactionalID, "producer_id", id, "epoch", epoch)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return fmt.Errorf("sidecar: the broker refuses transactional id %q (FLOW_DELIVERY=exactly-once): %w: grant the sidecar's principal Write and Describe on that TransactionalId (a PREFIXED ACL on %q covers every replica), or use FLOW_DELIVERY=at-least-once",
				s.cfg.TransactionalID, err, s.cfg.ConsumerGroup+".")
		}
		wait := b.NextBackOff()
		s.log.Warn("no producer id for the transactional id yet; retrying", "transactional_id", s.cfg.TransactionalID, "wait", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// txnStep is one round in exactly-once mode: the round's emits are written into the open
// transaction (one is begun if none is), held until it ends, and the transaction ends when the
// interval has passed, the conversation is ending, or what it holds would hold the stream
// back (commitEarlyLocked). Emits held until the Ack, offsets only with the writes: a produce failure
// aborts, and so does a stream failure; an abort loses the whole transaction's work, which is
// delivered again. A fenced producer (another sidecar took this transactional id) returns
// ErrFenced.
func (s *Sidecar) txnStep(c *conversation, round []*batch, ending bool) error {
	sess := s.kafka.txn
	// A batch revoked since its Ack is not written at all.
	if kept := s.owned(round); len(kept) < len(round) {
		s.mu.Lock()
		for _, b := range round {
			if !slices.Contains(kept, b) {
				s.drop(b)
			}
		}
		s.mu.Unlock()
		round = kept
	}
	if len(round) > 0 {
		if !c.txnOpen {
			if err := sess.Begin(); err != nil {
				s.dropTxn(c, round)
				return s.txnFailure("cannot begin a transaction", err)
			}
			c.txnOpen = true
		}
		s.mu.Lock()
		c.txn = append(c.txn, round...)
		s.mu.Unlock()
		if _, err := s.produceTxn(c.produceCtx, sess, round); err != nil {
			if err := s.rewriteTooLarge(c, err); err != nil {
				return err
			}
		}
		s.written(round)
	}
	if c.txnOpen && (ending || s.commitDue(c)) {
		return s.endTxn(c)
	}
	return nil
}

// rewriteTooLarge handles a write of the open transaction that failed with err. When the broker
// refused emits as too large (an outlet's limit was lowered), the limits are read again, the
// transaction is aborted with its emits kept, and all of them are written again in a new one,
// split under the new limits; an emit over its topic's new limit on its own, or any other
// failure, aborts the transaction and fails the stream.
func (s *Sidecar) rewriteTooLarge(c *conversation, err error) error {
	retry, ferr := s.refusedTooLarge(c.produceCtx, c.txn, err)
	if !retry || ferr != nil {
		s.abortTxn(c)
		if ferr != nil {
			return ferr
		}
		return s.txnFailure("", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	_, aerr := s.kafka.txn.End(ctx, kgo.TryAbort)
	cancel()
	c.txnOpen = false
	if aerr != nil {
		s.abortUnconfirmed(s.kafka.txn)
		s.dropTxn(c, nil)
		return s.txnFailure("cannot abort the transaction", aerr)
	}
	if err := s.rewrite(c, c.txn); err != nil {
		s.dropTxn(c, nil)
		return err
	}
	return nil
}

// abandonTxn ends a failed conversation's work in exactly-once mode: the open transaction is
// aborted and round, acknowledged but never written, is let go; all of it is delivered again.
func (s *Sidecar) abandonTxn(c *conversation, round []*batch) {
	if c.txnOpen {
		s.log.Info("stream failed: the open transaction is aborted; its batches are delivered again", "batches", len(c.txn))
		s.abortTxn(c)
	}
	s.dropTxn(c, round)
}

// abortTxn aborts the open transaction and lets its emits go.
func (s *Sidecar) abortTxn(c *conversation) {
	sess := s.kafka.txn
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	_, err := sess.End(ctx, kgo.TryAbort)
	cancel()
	if err != nil {
		s.abortUnconfirmed(sess)
	}
	s.dropTxn(c, nil)
}

// dropTxn lets go of the emits of the open transaction's batches and of extra, and forgets
// the transaction: the budgets free them, committed or not.
func (s *Sidecar) dropTxn(c *conversation, extra []*batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range c.txn {
		s.drop(b)
	}
	for _, b := range extra {
		s.drop(b)
	}
	c.txn, c.txnOpen = nil, false
}

// endTxn commits the open transaction: its emits and the offsets of its batches together. A
// stream failure since it began aborts it, and so does a batch whose partition was revoked
// while it was open; the batches still owned are then written again in a new transaction, so
// nothing of a revoked batch ever commits.
func (s *Sidecar) endTxn(c *conversation) error {
	sess := s.kafka.txn
	defer s.dropTxn(c, nil)
	batches := c.txn
	for attempt := 1; ; attempt++ {
		// Offsets only with the writes, and only for partitions still owned: what a rebalance
		// took aborts the whole transaction (its emits are in it).
		s.mu.Lock()
		failed := c.err != nil
		s.mu.Unlock()
		kept := s.owned(batches)
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		if failed || len(kept) < len(batches) {
			_, err := sess.End(ctx, kgo.TryAbort)
			cancel()
			c.txnOpen = false
			if err != nil {
				s.abortUnconfirmed(sess)
				return s.txnFailure("cannot abort the transaction", err)
			}
			if failed {
				s.log.Info("stream failed: the open transaction is aborted; its batches are delivered again", "batches", len(batches))
				return nil
			}
			s.log.Info("a rebalance took partitions of the open transaction: aborted; the batches still owned are written again", "revoked", len(batches)-len(kept), "kept", len(kept))
			if batches = kept; len(batches) == 0 {
				return nil
			}
			if err := s.rewrite(c, batches); err != nil {
				return err
			}
			continue
		}
		began := s.now()
		ok, err := sess.End(kgo.PreTxnCommitFnContext(ctx, commitOnly(batches)), kgo.TryCommit)
		cancel()
		c.txnOpen = false
		s.metrics.commit.Observe(s.now().Sub(began).Seconds())
		if err != nil {
			s.abortUnconfirmed(sess)
			return s.txnFailure("cannot commit the transaction", err)
		}
		if ok {
			var emits int64
			s.mu.Lock()
			for _, b := range batches {
				b.p.commits++
				emits += int64(len(b.emits))
				for _, r := range b.emits {
					if !s.changelogs[r.Topic] {
						s.metrics.outlet(r.Topic).produced.Inc() // confirmed, and committed
					}
				}
			}
			s.stats.EmitsProduced += emits
			s.mu.Unlock()
			s.promote(batches) // committed: the transaction's states move into the stores
			s.settle(batches)
			return nil
		}
		// Not committed and no error: the group rebalanced (or the broker refused the offsets of
		// an old generation) since Begin. Try again with what is still owned.
		if attempt >= txnAttempts {
			return streamFailed(causeCommit, "%w for group %s: %d transactions of one commit interval aborted by rebalances; the records are delivered again from the last commit", errCommit, s.cfg.ConsumerGroup, attempt)
		}
		s.log.Info("the transaction was aborted: the group rebalanced while it was open; writing the batches still owned again", "attempt", attempt)
		if batches = s.owned(batches); len(batches) == 0 {
			return nil
		}
		if err := s.rewrite(c, batches); err != nil {
			return err
		}
	}
}

// rewrite begins a new transaction and writes batches into it again (their emits are still
// held), after an abort.
func (s *Sidecar) rewrite(c *conversation, batches []*batch) error {
	sess := s.kafka.txn
	if err := sess.Begin(); err != nil {
		return s.txnFailure("cannot begin a transaction", err)
	}
	c.txnOpen = true
	if _, err := s.produceTxn(c.produceCtx, sess, batches); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		if _, aerr := sess.End(ctx, kgo.TryAbort); aerr != nil {
			s.abortUnconfirmed(sess)
		}
		cancel()
		c.txnOpen = false
		return s.txnFailure("", err)
	}
	return nil
}

// owned returns the batches of round whose partitions are still owned as when they were sent.
// It holds commitMu, as revocation does.
func (s *Sidecar) owned(round []*batch) []*batch {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]*batch, 0, len(round))
	for _, b := range round {
		if !b.revoked && b.p.owned && b.p.epoch == b.epoch {
			kept = append(kept, b)
		}
	}
	return kept
}

// produceTxn produces the emits of round in the open transaction and waits for every one (a
// record of an aborted attempt is produced again only after its promise ran). It returns the
// number of emits and the first failure. One callback serves the round, as in commitRound.
func (s *Sidecar) produceTxn(ctx context.Context, sess *kgo.GroupTransactSession, round []*batch) (int64, error) {
	var w roundWrites
	began := s.now()
	done := func(r *kgo.Record, err error) {
		defer w.wg.Done()
		s.limits.done(r)
		if err == nil {
			s.metrics.produce.Observe(s.now().Sub(began).Seconds())
			return
		}
		w.fail(r, s.denied(err, r.Topic), "the transaction is aborted, nothing of its batches was committed", func() uint64 { return batchOf(round, r) })
	}
	for _, b := range round {
		w.add(b)
		for _, r := range b.emits {
			s.limits.admit(ctx, r)
			sess.Produce(ctx, r, done)
		}
	}
	w.wg.Wait()
	return w.emits, w.err
}

// abortUnconfirmed ends a transaction whose End failed with an abort, as franz-go asks: the
// client keeps the transaction open when the broker's answer did not come (a broker restart),
// and the abort reloads the producer id, which bumps its epoch and aborts whatever the broker
// still holds; the next round can then begin.
func (s *Sidecar) abortUnconfirmed(sess *kgo.GroupTransactSession) {
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		s.log.Warn("cannot abort the transaction after a failed end; the next round retries", "transactional_id", s.cfg.TransactionalID, "error", err)
	}
}

// batchOf returns the id of the batch of round that holds emit r, 0 if none.
func batchOf(round []*batch, r *kgo.Record) uint64 {
	for _, b := range round {
		for _, e := range b.emits {
			if e == r {
				return b.id
			}
		}
	}
	return 0
}

// commitOnly rewrites the transaction's offset commit to the offsets of round: the session
// would commit everything polled, and the sidecar polls ahead of its batches. The entries
// the session built keep their topic ids.
func commitOnly(round []*batch) func(*kmsg.TxnOffsetCommitRequest) error {
	// Raw TxnOffsetCommit, the transaction's own: kgo hands it to this hook; kadm has none.
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		want := map[string]map[int32]*batch{}
		for _, b := range round {
			if b.swept() {
				continue // the sweep's tombstones: no offsets
			}
			if want[b.p.topic] == nil {
				want[b.p.topic] = map[int32]*batch{}
			}
			if o := want[b.p.topic][b.p.partition]; o == nil || o.last.in.GetOffset() < b.last.in.GetOffset() {
				want[b.p.topic][b.p.partition] = b
			}
		}
		byTopic := map[string]kmsg.TxnOffsetCommitRequestTopic{}
		for _, t := range req.Topics {
			byTopic[t.Topic] = t
		}
		req.Topics = req.Topics[:0]
		for topic, parts := range want {
			t, ok := byTopic[topic]
			if !ok {
				t = kmsg.NewTxnOffsetCommitRequestTopic()
				t.Topic = topic
			}
			t.Partitions = t.Partitions[:0]
			for n, b := range parts {
				p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				p.Partition = n
				p.Offset = b.last.in.GetOffset() + 1
				p.LeaderEpoch = b.last.leaderEpoch
				p.Metadata = &req.MemberID
				t.Partitions = append(t.Partitions, p)
			}
			req.Topics = append(req.Topics, t)
		}
		return nil
	}
}

// txnFailure is the error of a failed transaction step: ErrFenced when the broker fenced
// this producer (another sidecar now writes with the transactional id), else a stream
// failure.
func (s *Sidecar) txnFailure(what string, err error) error {
	if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		// The ACL was removed while running: the producer cannot go on with the id, and the
		// open transaction commits nothing; the sidecar stops, and its start-up check names
		// the ACL again until it is granted.
		if what == "" {
			what = "in the transaction"
		}
		return fmt.Errorf("%w: %s: %w: nothing of the open transaction was committed", errTxnDenied, what, s.denied(err, ""))
	}
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("%w: transactional id %q: %w: another sidecar started with this id (a restarted pod, or two pods with one FLOW_POD_NAME); this one stops writing, and nothing of its open transaction was committed", ErrFenced, s.cfg.TransactionalID, err)
	}
	if what == "" {
		return err
	}
	return fmt.Errorf("%w: %w: %s for group %s: %w: the records are delivered again from the last commit", errStreamFailed, errCommit, what, s.cfg.ConsumerGroup, err)
}
