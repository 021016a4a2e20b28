package sidecar

import (
	"context"
	"fmt"
	"time"
)

// reasonPartitionStalled is the reason of the warning Event recorded for a stalled partition.
const reasonPartitionStalled = "PartitionStalled"

// warnTimeout bounds posting one warning.
const warnTimeout = 10 * time.Second

// checkStalls raises one PartitionStalled warning for each partition whose batches have kept
// failing for FLOW_STALL_WARNING_AFTER, once per stall (a commit on the partition ends it).
func (s *Sidecar) checkStalls(ctx context.Context) {
	type stall struct {
		tp
		offset   int64
		since    time.Duration
		attempts int
	}
	var stalls []stall
	now := s.now()
	s.mu.Lock()
	for _, p := range s.order {
		if p.stallSince.IsZero() || p.warned || !p.owned || p.restoring || len(p.queue) == 0 {
			continue
		}
		if d := now.Sub(p.stallSince); d >= s.cfg.StallWarningAfter {
			p.warned = true
			s.stats.StallWarnings++
			stalls = append(stalls, stall{p.tp, p.queue[0].in.GetOffset(), d, p.attempts})
		}
	}
	s.mu.Unlock()
	for _, st := range stalls {
		msg := fmt.Sprintf("pipeline %s streamlet %s: topic %s partition %d is stalled at offset %d: its batch has failed %d time(s) over %s; the process keeps failing it (see its log), and no record after it is processed until it succeeds",
			s.cfg.Pipeline, s.cfg.Streamlet, st.topic, st.partition, st.offset, st.attempts, st.since.Round(time.Millisecond))
		s.log.Warn("partition stalled", "topic", st.topic, "partition", st.partition, "offset", st.offset, "attempts", st.attempts, "stalled_for", st.since)
		if s.cfg.Events == nil {
			continue
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), warnTimeout)
		err := s.cfg.Events.Warn(wctx, reasonPartitionStalled, msg)
		cancel()
		if err != nil {
			s.log.Error("cannot record the PartitionStalled event on the pod", "error", err)
		}
	}
}
