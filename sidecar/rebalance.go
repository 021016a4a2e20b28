package sidecar

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// assigned takes ownership of newly assigned partitions; fetching starts at their last
// committed offsets.
func (s *Sidecar) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
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
			p.owned, p.epoch, p.sent, p.paused = true, p.epoch+1, 0, false
			p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
			p.capRecords, p.capUntil = 0, 0
			p.hwm, p.committed, p.fetched = -1, -1, false
			s.log.Info("partition assigned", "topic", topic, "partition", n)
		}
	}
	s.kickSenderLocked()
}

// revoked gives up revoked or lost partitions: a rebalance discards. A batch still with the
// process is marked revoked (its emits and Ack dropped silently), queued records are dropped
// for the new owner to read again, and since this holds commitMu, no commit for these
// partitions is in progress or can start.
func (s *Sidecar) revoked(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	resume := map[string][]int32{}
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
			if p.paused {
				resume[topic] = append(resume[topic], n)
			}
			p.owned, p.epoch, p.sent, p.paused = false, p.epoch+1, 0, false
			p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
			p.capRecords, p.capUntil = 0, 0
			p.hwm, p.committed, p.fetched = -1, -1, false
			s.log.Info("partition revoked", "topic", topic, "partition", n)
		}
	}
	s.mu.Unlock()
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}
