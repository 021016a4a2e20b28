package sidecar

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The watchdog (FLOW_STUCK_AFTER). A partition the sidecar owns is always either waiting on
// its one batch in flight, or on Kafka for what it acknowledged (written, then committed), or
// has a batch sent within a bound once records are there. One that holds records waiting —
// fetched and not with the process, or in Kafka beyond its fetch position — with nothing of
// it in flight or being written, and no batch sent for FLOW_STUCK_AFTER, is stuck: a bug by
// definition (a member frozen past its session once stranded partitions that way, the Kafka
// client's pause outliving the sidecar's). The watchdog logs it once with the partition's state, counts it
// in millrace_sidecar_stuck_partitions_total, and recovers it: the records it holds unsent go
// to the process again, its pause is set anew in the client, and the client fetches it again
// from its last commit (records still queued are not queued twice: partition.next).
//
// It recovers the one partition rather than ending the conversation: a new conversation
// would deliver every partition's work in flight again (duplicates at least once, an aborted
// transaction exactly once) and mends nothing in the Kafka client, where the stranding was.
//
// Not stuck, whatever the wait: a partition revoking, restoring its state, waiting for the
// State service, held back by FLOW_MAX_HELD_EMIT_BYTES (emits being written), and every
// partition between conversations (a failed stream's backoff, discovery) or at shutdown:
// those waits are bounded, or logged, elsewhere.

// envStuckAfter names the watchdog's variable.
const envStuckAfter = "FLOW_STUCK_AFTER"

// msgStuck is the log message of a stuck partition.
const msgStuck = "partition stuck: records wait, no batch in flight, none sent for FLOW_STUCK_AFTER"

// watchStuck checks the owned partitions four times per FLOW_STUCK_AFTER, on the sidecar's
// clock, until ctx ends.
func (s *Sidecar) watchStuck(ctx context.Context, cl *kgo.Client) {
	every := max(s.cfg.StuckAfter/4, time.Millisecond)
	last := s.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.after(every):
		}
		now := s.now()
		// A check far later than due means the sidecar did not run meanwhile (SIGSTOP, a
		// suspended VM, a long pause): no partition could send then, so the waits start over.
		s.checkStuck(cl, now.Sub(last) > 2*every)
		last = now
	}
}

// stuckReport is what the log says of a stuck partition.
type stuckReport struct {
	tp
	ownedSince, lastSent, waitingSince time.Time
	position, committed, end           int64
	queued, sent, written              int
	paused, clientPaused               bool
}

// checkStuck finds the stuck partitions, reports each once per stuck spell and recovers it;
// one still stuck FLOW_STUCK_AFTER after a recovery is recovered again. After a gap (the
// sidecar did not run), every wait starts over instead.
func (s *Sidecar) checkStuck(cl *kgo.Client, gap bool) {
	now := s.now()
	s.commitMu.Lock() // ownership holds still while a partition is recovered
	defer s.commitMu.Unlock()
	var stuck []*partition
	var reports []stuckReport
	s.mu.Lock()
	c := s.conv
	live := c != nil && c.err == nil && !c.stopping
	for _, p := range s.order {
		if !p.owned {
			continue
		}
		if !live || !s.waitingLocked(c, p) {
			p.waitingSince, p.stuckLogged = time.Time{}, false
			continue
		}
		if gap || p.waitingSince.IsZero() || p.lastSent.After(p.waitingSince) {
			p.waitingSince = now // records wait from now on, or again since the last batch
			continue
		}
		if now.Sub(p.waitingSince) < s.cfg.StuckAfter {
			continue
		}
		if !p.stuckLogged {
			p.stuckLogged = true
			reports = append(reports, stuckReport{tp: p.tp, ownedSince: p.ownedSince, lastSent: p.lastSent, waitingSince: p.waitingSince,
				position: p.next, committed: p.committed, end: p.end, queued: len(p.queue), sent: p.sent, written: p.done, paused: p.paused})
		}
		// The records past those written go to the process again: none of them is in flight
		// or acknowledged (waitingLocked).
		p.sent = p.done
		p.waitingSince = now
		stuck = append(stuck, p)
	}
	s.mu.Unlock()
	if len(stuck) == 0 {
		return
	}
	clientPaused := map[tp]bool{}
	for topic, ns := range cl.PauseFetchPartitions(nil) {
		for _, n := range ns {
			clientPaused[tp{topic, n}] = true
		}
	}
	for _, r := range reports {
		r.clientPaused = clientPaused[r.tp]
		s.metrics.stuck.WithLabelValues(r.topic).Inc()
		s.log.Error(msgStuck, "recovery", "its unsent records go again, and it is fetched again from its last commit; a bug: please report this line",
			"topic", r.topic, "partition", r.partition, "stuck_after", s.cfg.StuckAfter, "waiting_since", r.waitingSince,
			"owned_since", r.ownedSince, "last_batch_sent", r.lastSent, "position", r.position, "committed", r.committed,
			"end", r.end, "queued", r.queued, "sent", r.sent, "written", r.written,
			"paused", r.paused, "client_paused", r.clientPaused, "in_flight", false)
	}
	s.applyPauses(cl)
	committed := cl.CommittedOffsets()
	seek := map[string]map[int32]kgo.EpochOffset{}
	for _, p := range stuck {
		eo, ok := committed[p.topic][p.partition]
		if !ok || eo.Offset < 0 {
			continue // nothing committed is known: the client fetches from where it is
		}
		if seek[p.topic] == nil {
			seek[p.topic] = map[int32]kgo.EpochOffset{}
		}
		seek[p.topic][p.partition] = kgo.EpochOffset{Epoch: -1, Offset: eo.Offset}
	}
	if len(seek) > 0 {
		cl.SetOffsets(seek)
	}
	s.kickSender()
}

// waitingLocked reports whether p holds records waiting that only a batch would move: queued
// and not written, or in Kafka past its fetch position; with nothing of it in flight,
// acknowledged or being written, and nothing else (a revocation, a restore, the State
// service, the held emits' budget) holding its batches back. Called with mu held, c live.
func (s *Sidecar) waitingLocked(c *conversation, p *partition) bool {
	if p.revoking || p.restoring || p.inflight != nil || !p.stateReady(c) || s.stats.HeldEmitBytes >= s.cfg.MaxHeldEmitBytes {
		return false
	}
	for _, b := range c.acked {
		if b.p == p {
			return false
		}
	}
	for _, b := range c.round {
		if b.p == p {
			return false
		}
	}
	return len(p.queue) > p.done || (p.end >= 0 && p.end > max(p.next, p.committed))
}
