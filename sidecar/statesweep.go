package sidecar

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// The TTL sweep (docs/state.md, "TTL expiry"): the read already leaves out a state past its
// TTL, so the sweep only reclaims space, and may be late. Per owned partition of an inlet
// whose Open gave a TTL, every sweepInterval, the oldest expired keys of its store (its TTL
// index, built from the store's values before the partition's first sweep) get tombstones:
// marked in the overlay at once, so the next batch reads them as deleted, and queued for the
// committer as a batch with no records (so no offsets), written like any other: at least
// once produced and promoted into the store once confirmed, exactly once in the open
// transaction and promoted once it commits. An abort, a new conversation or a revocation
// drops the overlay entries; the keys are still in the store and the next sweep finds them
// again.
//
// A batch in flight does not hold the sweep back: the committer writes its queue in order
// through one producer, so a state staged after the sweep (its batch answered later, queued
// later) is written after the tombstone and promoted after it, never overwritten by it.

// sweepMax bounds the tombstones of one partition's sweep.
const sweepMax = 1000

// sweepInterval is how often the states of an inlet with TTL ttl are swept: a tenth of the
// TTL, at most a minute and at least a second.
func sweepInterval(ttl time.Duration) time.Duration {
	return max(min(ttl/10, time.Minute), time.Second)
}

// swept reports whether b is a batch of the sweep's tombstones: it holds no records, so there
// is no offset of it to commit and nothing of it in its partition's queue.
func (b *batch) swept() bool { return b.n == 0 }

// sweepLoop sweeps conversation c's stateful inlets with a TTL on the sidecar's timers (after)
// once the process has opened the State service, until the conversation fails or ends or ctx
// ends. The TTLs are the Open's, fixed for the conversation.
func (s *Sidecar) sweepLoop(ctx context.Context, c *conversation) {
	if !s.cfg.keepsState() {
		return
	}
	select {
	case <-c.stateOpened.Done():
	case <-c.failed.Done():
		return
	case <-c.stateEnd.Done():
		return
	case <-ctx.Done():
		return
	}
	ttls := map[string]time.Duration{}
	s.mu.Lock()
	for _, in := range s.cfg.Inlets {
		if ttl := c.state.ttl[in.Port]; in.StateTopic != "" && ttl > 0 {
			ttls[in.Port] = ttl
		}
	}
	s.mu.Unlock()
	if len(ttls) == 0 {
		return
	}
	due := make(map[string]time.Time, len(ttls))
	now := s.now()
	for port, ttl := range ttls {
		due[port] = now.Add(sweepInterval(ttl))
	}
	for {
		next := time.Time{}
		for _, at := range due {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.failed.Done():
			return
		case <-c.stateEnd.Done():
			return
		case <-s.after(next.Sub(s.now())):
		}
		now := s.now()
		for port, at := range due {
			if now.Before(at) {
				continue
			}
			s.sweepInlet(c, port, now.Add(-ttls[port]).UnixMilli())
			due[port] = now.Add(sweepInterval(ttls[port]))
		}
	}
}

// sweepInlet sweeps every owned partition of inlet port that can be swept now: the states
// written before before (ms) have expired.
func (s *Sidecar) sweepInlet(c *conversation, port string, before int64) {
	var parts []*partition
	s.mu.Lock()
	for _, p := range s.order {
		if p.inlet != nil && p.inlet.Port == port && s.sweepableLocked(c, p) {
			parts = append(parts, p)
		}
	}
	s.mu.Unlock()
	for _, p := range parts {
		s.sweepPartition(c, p, before)
	}
}

// sweepableLocked reports whether p may be swept in conversation c: c is live and may still
// queue batches for its committer, and p is owned, restored and not being handed over.
// Called with mu held.
func (s *Sidecar) sweepableLocked(c *conversation, p *partition) bool {
	return s.conv == c && c.err == nil && !c.stopping && !c.ended && c.state != nil &&
		p.owned && p.stateful() && p.store != nil && !p.restoring && !p.revoking
}

// indexTTL builds the TTL index of p's store st before its first sweep: a store keeps one only
// once asked (an inlet without a TTL pays nothing for it), and a new file, or one a full
// restore made again, has none. A no-op once built. A failure is a failing sweep's: logged,
// and the next sweep tries again; nothing is lost, as the read already leaves out expired
// states. Called with p.storeMu held (it writes the store); reports whether st can be swept.
func (s *Sidecar) indexTTL(p *partition, st *state.Partition) bool {
	began := s.now()
	built, keys, err := st.IndexTTL()
	if err != nil {
		if !errors.Is(err, state.ErrClosed) { // closed: a revocation took the partition
			s.log.Warn("cannot build the TTL index of a state file; the next sweep tries again", "topic", p.inlet.StateTopic, "partition", p.partition, "error", err)
		}
		return false
	}
	if built {
		s.log.Info("built the TTL index of a state file for its first sweep", "topic", p.inlet.StateTopic, "partition", p.partition, "keys", keys, "took", s.now().Sub(began))
	}
	return true
}

// sweepPartition queues the tombstones of up to sweepMax of p's keys written before before
// (ms), oldest first, leaving out keys with an overlay entry (a state staged and not yet in
// the store is fresh, and one already being deleted needs no tombstone).
//
// It builds the store's TTL index first when it has none (indexTTL). It holds p.storeMu from
// the read of the TTL index until the tombstones are in the overlay: a promotion writes the
// store under it before it removes its overlay entries, so a key is always either in the
// overlay (skipped) or in the store as promoted (fresh) while the sweep looks at it.
func (s *Sidecar) sweepPartition(c *conversation, p *partition, before int64) {
	s.mu.Lock()
	if !s.sweepableLocked(c, p) || s.stats.HeldEmitBytes >= s.cfg.MaxHeldEmitBytes {
		s.mu.Unlock()
		return // the next sweep finds the keys again
	}
	st, epoch := p.store, p.epoch
	fresh := make(map[string]struct{}, len(p.overlay))
	for k := range p.overlay {
		fresh[k] = struct{}{}
	}
	s.mu.Unlock()

	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	if !s.indexTTL(p, st) {
		return
	}
	keys, err := st.Expired(before, sweepMax, func(k []byte) bool { _, ok := fresh[string(k)]; return ok })
	if err != nil {
		if !errors.Is(err, state.ErrClosed) { // closed: a revocation took the partition
			s.log.Warn("cannot read the expired states of a partition; the next sweep tries again", "topic", p.inlet.StateTopic, "partition", p.partition, "error", err)
		}
		return
	}
	if len(keys) == 0 {
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sweepableLocked(c, p) || p.store != st || p.epoch != epoch {
		return
	}
	b := &batch{p: p, epoch: epoch, sentAt: s.now(), stateful: true, acked: true, staged: true,
		emits: make([]*kgo.Record, 0, len(keys))}
	for _, k := range keys {
		if _, ok := p.overlay[string(k)]; ok {
			continue // staged since the read: fresh
		}
		if k == nil {
			k = []byte{} // an empty key is a key; a null one would be refused on a compacted topic
		}
		r := &kgo.Record{Topic: p.inlet.StateTopic, Partition: p.partition, Key: k}
		size := recordBytes(r)
		if len(b.emits) > 0 && b.emitBytes+size > s.cfg.MaxBatchEmitBytes {
			break // the rest next time: a sweep stays within one batch's emit budget
		}
		b.emitBytes += size
		b.emits = append(b.emits, r)
		b.state = append(b.state, r)
		b.stateKeys = append(b.stateKeys, k)
		b.stateNames = append(b.stateNames, string(k))
		b.stateValues = append(b.stateValues, nil)
	}
	if len(b.emits) == 0 {
		return
	}
	s.stats.HeldEmitBytes += b.emitBytes
	s.stats.PeakHeldEmitBytes = max(s.stats.PeakHeldEmitBytes, s.stats.HeldEmitBytes)
	if p.overlay == nil {
		p.overlay = make(map[string]staged, len(b.stateKeys))
	}
	for _, k := range b.stateNames {
		p.overlay[k] = staged{b: b} // reads as deleted from now on
	}
	c.acked = append(c.acked, b)
	select {
	case c.commitKick <- struct{}{}:
	default:
	}
}
