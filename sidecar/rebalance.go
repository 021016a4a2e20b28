package sidecar

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// handOverTimeout bounds how long a cooperative revocation waits for the batches of the
// partitions it takes (handOver): the group's rebalance waits for this member as long, so a
// few seconds, well under the session and rebalance timeouts; past it they are discarded.
const handOverTimeout = 5 * time.Second

// assigned takes ownership of newly assigned partitions; fetching starts at their last
// committed offsets, none of them paused (applyPauses: the client keeps a pause across
// assignments).
func (s *Sidecar) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	defer s.applyPauses(cl)
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range m {
		for _, n := range ps {
			key := tp{topic, n}
			p := s.parts[key]
			if p == nil {
				p = &partition{tp: key, inlet: s.inlets[topic]}
				s.parts[key] = p
				s.order = append(s.order, p)
			}
			s.dropHead(p, len(p.queue))
			p.newEpoch(true)
			p.ownedSince = s.now()
			s.assignState(p)
			s.log.Info("partition assigned", "topic", topic, "partition", n)
		}
	}
	s.kickSenderLocked()
}

// newEpoch begins p's next epoch, owned or not: what it sent, paused, pended, stalled on,
// capped and saw of its watermarks was the last epoch's. Called with mu held, its queue
// dropped.
func (p *partition) newEpoch(owned bool) {
	p.owned, p.epoch, p.sent, p.paused, p.next = owned, p.epoch+1, 0, false, 0
	p.pend, p.revoking = pending{}, false
	p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
	p.capRecords, p.capUntil = 0, 0
	p.hwm, p.committed, p.fetched = -1, -1, false
	p.end, p.lastSent, p.waitingSince, p.stuckLogged = -1, time.Time{}, time.Time{}, false
}

// revoked gives up partitions a planned rebalance takes. They are still this member's until
// the callback returns, so at least once their work is finished first (handOver): the batch
// in flight answered and written, and everything confirmed committed, so that the new owner
// starts where this one stopped and reads nothing twice. Then they are discarded. In
// exactly-once mode the transact session aborts the open transaction at any revocation, so
// there is nothing to wait for: they are discarded at once.
func (s *Sidecar) revoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	if s.cfg.Delivery != ExactlyOnce {
		s.handOver(ctx, cl, m)
	}
	s.discard(cl, m)
}

// lost gives up partitions the group took without asking (the session expired, or the
// member was fenced): another member may own them already, so nothing of them is written or
// committed; they are discarded at once.
func (s *Sidecar) lost(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	s.discard(cl, m)
}

// handOver lets the work of revoked partitions finish, bounded by handOverTimeout: no new
// batch is sent for them, the batches in flight may be answered, the acknowledged ones are
// written, and then every confirmed offset is committed. It holds neither lock while it
// waits (the Ack and the write take both), and it wakes on every round the committer ends.
func (s *Sidecar) handOver(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	var parts []*partition
	for topic, ns := range m {
		for _, n := range ns {
			if p := s.parts[tp{topic, n}]; p != nil && p.owned {
				p.revoking = true
				parts = append(parts, p)
			}
		}
	}
	if len(parts) == 0 {
		s.mu.Unlock()
		return
	}
	expired, stop := false, make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-s.after(handOverTimeout):
		case <-stop:
			return
		}
		s.mu.Lock()
		expired = true
		s.handed.Broadcast()
		s.mu.Unlock()
	}()
	for !expired && s.busyLocked(parts) {
		s.handed.Wait()
	}
	if expired {
		s.stats.HandOverTimeouts++
		s.log.Warn("the batches of revoked partitions did not finish in time; discarded, the new owner reads them again", "timeout", handOverTimeout)
	}
	s.mu.Unlock()
	if err := s.commitPending(ctx, cl); err != nil {
		s.log.Warn("cannot commit the revoked partitions' confirmed offsets; the new owner reads them again", "error", err)
	}
}

// busyLocked reports whether a batch of parts is still with the process or being written in
// the current conversation. A failed conversation's batches in flight are never answered;
// its acknowledged ones are still written while its committer runs. Called with mu held.
func (s *Sidecar) busyLocked(parts []*partition) bool {
	c := s.conv
	if c == nil {
		return false
	}
	for _, p := range parts {
		if c.err == nil && p.inflight != nil && !p.inflight.revoked {
			return true
		}
		for _, b := range c.acked {
			if b.p == p && !c.commitDone {
				return true
			}
		}
		for _, b := range c.round {
			if b.p == p {
				return true
			}
		}
	}
	return false
}

// discard gives up revoked or lost partitions: a rebalance discards. A batch still with the
// process is marked revoked (its emits and Ack dropped silently), queued records are dropped
// for the new owner to read again, and since this holds commitMu, no commit for these
// partitions is in progress or can start.
func (s *Sidecar) discard(cl *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	stores := map[*partition]*state.Partition{}
	for topic, ps := range m {
		for _, n := range ps {
			p := s.parts[tp{topic, n}]
			if p == nil {
				continue
			}
			if p.inflight != nil {
				p.inflight.revoked = true
				s.drop(p.inflight)
			}
			s.dropHead(p, len(p.queue))
			p.newEpoch(false) // not paused: applyPauses resumes it below
			if st := s.revokeState(p); st != nil {
				stores[p] = st
			}
			s.log.Info("partition revoked", "topic", topic, "partition", n)
		}
	}
	s.mu.Unlock()
	s.keepRevoked(stores)
	s.applyPauses(cl)
}
