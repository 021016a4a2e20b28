package sidecar

import (
	"context"
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// State per key, the sidecar's side (docs/state.md, sections 2 and 4): each owned partition of
// an inlet with a changelog (Inlet.StateTopic) has a store file under Config.StateDir, restored
// from the changelog when the partition is assigned and caught up at every new conversation;
// no batch of the partition is sent meanwhile. The states a batch staged are held as changelog
// records with its emits, in its partition's overlay until Kafka holds them (at least once:
// confirmed; exactly once: committed), and then moved into the store.

// partState is what a partition of a stateful inlet keeps of its state. Guarded by
// Sidecar.mu, except storeMu.
type partState struct {
	store *state.Partition // open while the partition is owned and its file usable; else nil
	// restoring is set while the store is opened or restored: no batch of the partition is
	// sent, and its stall clock does not run.
	restoring bool
	// restoreGen tells a restore it was superseded (a new assignment, a revocation, a newer
	// catch-up); cancelRestore cancels the current one.
	restoreGen    uint64
	cancelRestore context.CancelFunc
	// storeMu is held by whoever writes the store: a restore, or a promotion. One restore at
	// a time per partition, and never a promotion inside a restore.
	storeMu sync.Mutex
	// overlay holds the states acknowledged in batches and not yet in the store, by key.
	overlay map[string]staged
	// pending are batches Kafka holds whose states are still only in the overlay, in order,
	// and the entries and bytes of their states: promote writes them into the store together
	// (see promoteEntries). Dropped with the overlay.
	pending                      []*batch
	pendingEntries, pendingBytes int
	pendingSwept                 bool // one of them is the sweep's: they go at once
	// kept is a revoked partition's closed file, deleted once StateKeepRevoked has passed
	// unless the partition comes back first.
	kept *state.Partition
	// keepEnd ends the wait of kept's deletion (closed when the partition comes back); the
	// wait runs on the sidecar's clock (s.after), and Run's end ends it too.
	keepEnd chan struct{}
	// keys and bytes are the store's counts, as last read (the metrics).
	keys, bytes int64
}

// staged is a state acknowledged in a batch, held until its record is confirmed (at least
// once) or its transaction commits (exactly once).
type staged struct {
	value []byte // nil: delete
	b     *batch
	// at is when the batch was answered (ms, the sidecar's clock): the TTL counts from it as
	// from a stored state's changelog timestamp (taken at its produce, a little later), since
	// an entry may wait in the overlay past its key's TTL while Kafka is slow to take it.
	at int64
}

// stateful reports whether p's inlet keeps state.
func (p *partition) stateful() bool { return p.inlet != nil && p.inlet.StateTopic != "" }

// stateReady reports whether a batch of p may be sent in conversation c: always for a
// stateless inlet; for a stateful one once the process opened the State service and the
// partition is restored. Called with mu held.
func (p *partition) stateReady(c *conversation) bool {
	return !p.stateful() || (c.state != nil && !p.restoring && p.store != nil)
}

// stateDir is where the store files are.
func (s *Sidecar) stateDir() string { return s.cfg.StateDir }

// startRestoreLocked marks p restoring and starts a restore of its store (a full restore or a
// catch-up, as its file allows), superseding any restore of p in progress. Called with mu
// held.
func (s *Sidecar) startRestoreLocked(p *partition) {
	if !p.stateful() {
		return
	}
	if p.cancelRestore != nil {
		p.cancelRestore()
	}
	p.restoring = true
	p.restoreGen++
	p.dropPending() // the restore reads them from the changelog
	ctx, cancel := context.WithCancel(s.stateCtx)
	p.cancelRestore = cancel
	s.restores.Add(1)
	go func(gen uint64) {
		defer s.restores.Done()
		defer cancel()
		s.restore(ctx, p, gen)
	}(p.restoreGen)
}

// stopRestoreLocked supersedes p's restore in progress, if any. Called with mu held.
func (s *Sidecar) stopRestoreLocked(p *partition) {
	if p.cancelRestore != nil {
		p.cancelRestore()
		p.cancelRestore = nil
	}
	p.restoreGen++
	p.restoring = false
}

// restore opens p's store if it is not open and brings it to the changelog's end, retrying
// with the failure backoff until it succeeds or is superseded; then p is served.
func (s *Sidecar) restore(ctx context.Context, p *partition, gen uint64) {
	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	topic := p.inlet.StateTopic
	wait := s.newBackoff(s.cfg.FailureBackoff)
	current := func() bool { return p.restoreGen == gen && p.owned && ctx.Err() == nil }
	for {
		s.mu.Lock()
		if !current() {
			s.mu.Unlock()
			return
		}
		st := p.store
		s.mu.Unlock()
		if st == nil {
			if err := s.checkPartition(ctx, p); err != nil {
				var ce *ChangelogError
				if errors.As(err, &ce) {
					// Its batches wait until the sidecar has stopped.
					s.log.Error("the inlet topic has a partition its changelog has not; stopping", "topic", topic, "partition", p.partition, "error", err)
					s.stopWith(err)
					return
				}
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("cannot read the partitions of a changelog; retrying, its batches wait", "topic", topic, "partition", p.partition, "error", err)
				if !s.sleep(ctx, wait.NextBackOff()) {
					return
				}
				continue
			}
			opened, _, err := state.Open(s.stateDir(), topic, p.partition, state.Options{Log: s.log})
			if err != nil {
				s.log.Error("cannot open the state file of a partition; its batches wait", "topic", topic, "partition", p.partition, "dir", s.stateDir(), "error", err)
				if !s.sleep(ctx, wait.NextBackOff()) {
					return
				}
				continue
			}
			s.mu.Lock()
			if !current() {
				s.mu.Unlock()
				if err := opened.Close(); err != nil {
					s.log.Warn("cannot close the state file of a superseded restore", "topic", topic, "partition", p.partition, "error", err)
				}
				return
			}
			p.store, st = opened, opened
			s.mu.Unlock()
		}
		began := s.now()
		s.metrics.state.restoring(topic, p.partition, true)
		r, err := state.Restore(ctx, st, s.connOpts(), state.RestoreOptions{ReadCommitted: s.cfg.Delivery == ExactlyOnce, Log: s.log,
			Progress: func(n int64) { s.metrics.state.remaining(topic, p.partition, n) }})
		s.metrics.state.restored(topic, r, s.now().Sub(began))
		var cp state.Checkpoint
		if err == nil {
			cp, err = st.Checkpoint() // the counts the metrics show; fails only once st is closed
		}
		if err != nil {
			s.metrics.state.restoring(topic, p.partition, false)
			if ctx.Err() != nil || errors.Is(err, state.ErrClosed) {
				return
			}
			s.log.Warn("cannot restore the state of a partition; retrying, its batches wait", "topic", topic, "partition", p.partition, "error", err)
			if !s.sleep(ctx, wait.NextBackOff()) {
				return
			}
			continue
		}
		s.mu.Lock()
		done := current()
		if done {
			p.restoring = false
			p.keys, p.bytes = cp.Keys, cp.Bytes
		}
		s.mu.Unlock()
		s.metrics.state.restoring(topic, p.partition, false)
		if done {
			if r.Full || r.Records > 0 {
				s.log.Info("state restored", "topic", topic, "partition", p.partition, "full", r.Full, "reason", r.Reason, "from", r.From, "to", r.To, "records", r.Records, "keys", cp.Keys)
			}
			s.kickSender()
		}
		return
	}
}

// assignState starts the restore of a newly assigned partition of a stateful inlet, taking
// back its kept file if it was revoked lately. Called with mu held.
func (s *Sidecar) assignState(p *partition) {
	if !p.stateful() {
		return
	}
	if p.keepEnd != nil {
		close(p.keepEnd)
		p.keepEnd, p.kept = nil, nil
	}
	p.overlay = nil
	s.startRestoreLocked(p)
}

// revokeState gives up the state of a revoked or lost partition: its restore stops, its
// overlay is dropped, and its store is returned to be closed (outside mu) and kept for
// StateKeepRevoked. Called with mu held.
func (s *Sidecar) revokeState(p *partition) *state.Partition {
	if !p.stateful() {
		return nil
	}
	s.stopRestoreLocked(p)
	p.overlay = nil
	p.dropPending()
	st := p.store
	p.store = nil
	p.keys, p.bytes = 0, 0
	return st
}

// keepRevoked closes the stores of revoked partitions and deletes each file once
// StateKeepRevoked has passed, unless its partition was assigned again meanwhile.
func (s *Sidecar) keepRevoked(stores map[*partition]*state.Partition) {
	for p, st := range stores {
		keep := s.cfg.StateKeepRevoked // per file: one that cannot be closed is deleted at once, not the others
		// The restore that may still use it holds storeMu until it has seen it superseded.
		p.storeMu.Lock()
		err := st.Close()
		p.storeMu.Unlock()
		if err != nil {
			s.log.Warn("cannot close the state file of a revoked partition; it is deleted", "topic", p.inlet.StateTopic, "partition", p.partition, "error", err)
			keep = 0
		}
		s.mu.Lock()
		if !p.owned && p.store == nil {
			end := make(chan struct{})
			p.kept, p.keepEnd = st, end
			s.restores.Add(1)
			go func() {
				defer s.restores.Done()
				select {
				case <-s.after(keep):
				case <-end: // assigned again: the restore takes the file back
					return
				case <-s.stateCtx.Done(): // Run ends: the file stays for a later start
					return
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				if p.kept != st {
					return // assigned again meanwhile
				}
				p.kept, p.keepEnd = nil, nil
				if err := st.Remove(); err != nil {
					s.log.Warn("cannot delete the state file of a revoked partition", "topic", p.inlet.StateTopic, "partition", p.partition, "error", err)
				}
			}()
		}
		s.mu.Unlock()
	}
}

// closeStores ends every restore and closes every store when Run ends: the files stay, and a
// sidecar started again catches up from them.
func (s *Sidecar) closeStores() {
	s.stopState()
	s.restores.Wait()
	type held struct {
		p  *partition
		st *state.Partition
	}
	var stores []held
	s.mu.Lock()
	for _, p := range s.order {
		p.keepEnd, p.kept = nil, nil // their waits ended with stopState
		if p.store != nil {
			stores = append(stores, held{p, p.store}) // p.store is read under mu; closed outside it
		}
	}
	s.mu.Unlock()
	for _, o := range stores {
		if err := o.st.Close(); err != nil {
			s.log.Warn("cannot close a state file", "topic", o.p.inlet.StateTopic, "partition", o.p.partition, "error", err)
		}
	}
}

// catchUpLocked is a new conversation's rule: once the old committer is done, what the old
// conversation acknowledged is in Kafka or never will be, so every overlay is dropped and every
// owned stateful partition catches up from its file before its next batch. A partition still
// restoring sent nothing meanwhile and goes on. Without restore, the overlays are dropped
// only. Called with mu held.
func (s *Sidecar) catchUpLocked(restore bool) {
	for _, p := range s.order {
		if !p.stateful() || !p.owned {
			continue
		}
		p.overlay = nil
		p.dropPending()
		if restore && !p.restoring {
			s.startRestoreLocked(p)
		}
	}
}

// Promotion is batched: a partition's store takes the states of the batches Kafka holds once
// they are promoteEntries states or promoteBytes bytes, or as soon as the partition has no
// batch out and no record left to send (its stream is quiet, or ends), whichever comes first;
// and at once when the sweep's tombstones are among them (a sweep is rare, and what it
// deleted is then in the store, as the sweep's own tests and metrics expect). One bbolt
// transaction then writes many batches, and a key that several of them changed once: bbolt's
// cost is per key written and per page a transaction touches, not per record. Until then the
// states are in the overlay, where the partition's next batches read them, as before; the
// store's position stays behind them, so a catch-up (a new conversation, a restart) reads them
// from the changelog.
const (
	promoteEntries = 4096
	promoteBytes   = 4 << 20
)

// promote moves the states of batches Kafka now holds (confirmed at least once, committed
// exactly once) from their partitions' overlays into the stores, each store's position past
// the batches' last changelog record, when their partition's pending batches are due (see
// promoteEntries). A partition's due batches are written in one transaction, a key written by
// several of them once, with the last of its states (as the compacted changelog keeps it). A
// batch no longer owned as when sent is skipped (its overlay went with the revocation). A
// store that cannot be written is caught up from the changelog before the partition's next
// batch.
func (s *Sidecar) promote(batches []*batch) {
	type due struct {
		p       *partition
		batches []*batch
	}
	var dues []due
	s.mu.Lock()
	for _, b := range batches {
		if len(b.state) == 0 {
			continue
		}
		p := b.p
		p.pending = append(p.pending, b)
		p.pendingSwept = p.pendingSwept || b.swept()
		p.pendingEntries += len(b.state)
		for i, k := range b.stateKeys {
			p.pendingBytes += len(k) + len(b.stateValues[i])
		}
	}
	for _, p := range s.order {
		quiet := p.inflight == nil && p.sent >= len(p.queue)
		if len(p.pending) > 0 && (quiet || p.pendingSwept || p.pendingEntries >= promoteEntries || p.pendingBytes >= promoteBytes) {
			dues = append(dues, due{p, p.pending})
			p.dropPending()
		}
	}
	s.mu.Unlock()
	for _, d := range dues {
		s.promotePartition(d.p, d.batches)
	}
}

// dropPending forgets p's pending batches: their overlay is gone, or a restore reads their
// states from the changelog. Called with mu held.
func (p *partition) dropPending() {
	p.pending, p.pendingEntries, p.pendingBytes, p.pendingSwept = nil, 0, 0, false
}

// promotePartition is promote for the batches of one partition, in the order they were
// acknowledged.
func (s *Sidecar) promotePartition(p *partition, batches []*batch) {
	s.mu.Lock()
	st := p.store
	var kept []*batch
	for _, b := range batches {
		if st != nil && !b.revoked && p.owned && p.epoch == b.epoch && !p.restoring {
			kept = append(kept, b)
		}
	}
	s.mu.Unlock()
	if len(kept) == 0 {
		return
	}
	epoch := kept[0].epoch // every kept batch's: the partition's when it was checked
	n := 0
	for _, b := range kept {
		n += len(b.state)
	}
	es := make([]state.Entry, 0, n)
	var at map[string]int // where a key is in es, when several batches may name it
	if len(kept) > 1 {
		at = make(map[string]int, n)
	}
	last := int64(-1)
	for _, b := range kept {
		for i, r := range b.state {
			e := state.Entry{Key: b.stateKeys[i], Value: b.stateValues[i], Written: r.Timestamp.UnixMilli()}
			last = max(last, r.Offset)
			if at != nil {
				k := b.stateNames[i]
				if j, ok := at[k]; ok {
					es[j] = e // a later batch's state of the key: the one the changelog keeps
					continue
				}
				at[k] = len(es)
			}
			es = append(es, e)
		}
	}
	p.storeMu.Lock()
	err := st.Apply(es, last+1)
	var cp state.Checkpoint
	var cpErr error
	if err == nil {
		cp, cpErr = st.Checkpoint() // fails only once st is closed: revoked meanwhile
	}
	p.storeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if p.owned && p.epoch == epoch {
			s.log.Error("cannot write states into the state file; the partition catches up from the changelog", "topic", p.inlet.StateTopic, "partition", p.partition, "error", err)
			p.overlay = nil
			s.startRestoreLocked(p)
		}
		return
	}
	if cpErr == nil && p.owned && p.epoch == epoch {
		p.keys, p.bytes = cp.Keys, cp.Bytes // not a later owner's counts
	}
	var sets, deletes, expired int
	for _, b := range kept {
		for i, k := range b.stateNames {
			if o, ok := p.overlay[k]; ok && o.b == b {
				delete(p.overlay, k)
			}
			switch {
			case b.swept():
				expired++
			case b.stateValues[i] == nil:
				deletes++
			default:
				sets++
			}
		}
	}
	s.metrics.state.wrote(p.inlet.StateTopic, sets, deletes, expired)
}

// statePartitioner writes a changelog record to the partition it names (its input
// partition) and leaves every other topic to franz-go's default partitioner.
type statePartitioner struct {
	changelogs map[string]bool
	manual     kgo.Partitioner
	def        kgo.Partitioner
}

func (p statePartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if p.changelogs[topic] {
		return p.manual.ForTopic(topic)
	}
	return p.def.ForTopic(topic)
}

// partitionerOpts are the producer's partitioner when some inlet keeps state; none otherwise
// (franz-go's default stays).
func (s *Sidecar) partitionerOpts() []kgo.Opt {
	if len(s.changelogs) == 0 {
		return nil
	}
	return []kgo.Opt{kgo.RecordPartitioner(statePartitioner{
		changelogs: s.changelogs,
		manual:     kgo.ManualPartitioner(),
		// franz-go's own default (kgo's config.go).
		def: kgo.UniformBytesPartitioner(64<<10, true, true, nil),
	})}
}
