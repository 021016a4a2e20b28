package sidecar

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// defaultLagRefresh is how often the sidecar asks the brokers for the high watermarks of the
// partitions it owns. Fetches bring them too, but a partition that fetches nothing (paused at
// high water, as a stalled one soon is, or caught up) would keep an old one.
const defaultLagRefresh = 10 * time.Second

// listTimeout bounds one offset query.
const listTimeout = 10 * time.Second

// sawFetch takes the high watermark of a fetch of p and, on the first fetch since the
// assignment, the committed offset: fetching starts there, so the first record's offset is it
// (and an empty fetch is at the high watermark). Called with mu held.
func (s *Sidecar) sawFetch(p *partition, g fetched) {
	// The largest seen wins: a fetch answered before an offset query may arrive after it.
	p.hwm = max(p.hwm, g.hwm)
	p.end = max(p.end, g.end)
	if !p.fetched {
		p.fetched = true
		switch {
		case g.first >= 0:
			p.committed = g.first
		case g.hwm >= 0:
			p.committed = g.hwm
		}
	}
}

// lag returns the partition's high watermark minus its committed offset, once both are known.
// Called with mu held.
func (p *partition) lag() (int64, bool) {
	if p.hwm < 0 || p.committed < 0 {
		return 0, false
	}
	return max(p.hwm-p.committed, 0), true
}

// watchWatermarks refreshes the owned partitions' high watermarks every lagRefresh until ctx
// ends.
func (s *Sidecar) watchWatermarks(ctx context.Context, cl *kgo.Client) {
	t := time.NewTicker(s.lagRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.refreshWatermarks(ctx, cl)
	}
}

// refreshWatermarks asks the partitions' leaders for the high watermarks of the owned
// partitions, and takes the group's committed offset of a partition no fetch has come for
// yet from the client (it fetched the group's offsets when the partition was assigned).
// A failed query changes nothing; the next one tries again.
func (s *Sidecar) refreshWatermarks(ctx context.Context, cl *kgo.Client) {
	epochs := map[tp]uint64{}
	// Raw ListOffsets, the lag on the hot path: the owned partitions only, not kadm's every one.
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	s.mu.Lock()
	byTopic := map[string]int{}
	for _, p := range s.order {
		if !p.owned {
			continue
		}
		epochs[p.tp] = p.epoch
		i, ok := byTopic[p.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[p.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = p.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.partition, -1, -1 // -1: the latest offset
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	s.mu.Unlock()
	if len(epochs) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	hwms := listEnds(lctx, cl, req)
	ends := hwms
	if s.cfg.Delivery == ExactlyOnce {
		// What a read_committed client may fetch ends at the last stable offset.
		stable := *req
		stable.IsolationLevel = 1
		ends = listEnds(lctx, cl, &stable)
	}
	committed := cl.CommittedOffsets()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, epoch := range epochs {
		p := s.parts[key]
		if p == nil || !p.owned || p.epoch != epoch {
			continue // revoked or assigned again meanwhile
		}
		if h, ok := hwms[key]; ok {
			p.hwm = max(p.hwm, h)
		}
		if e, ok := ends[key]; ok {
			p.end = max(p.end, e)
		}
		if eo, ok := committed[key.topic][key.partition]; ok && !p.fetched && eo.Offset >= 0 {
			p.committed = eo.Offset
		}
	}
}

// listEnds sends req, a ListOffsets for the latest offsets, and returns the offsets answered.
func listEnds(ctx context.Context, cl *kgo.Client, req *kmsg.ListOffsetsRequest) map[tp]int64 {
	out := map[tp]int64{}
	for _, shard := range cl.RequestSharded(ctx, req) {
		resp, ok := shard.Resp.(*kmsg.ListOffsetsResponse)
		if shard.Err != nil || !ok {
			continue
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if kerr.ErrorForCode(rp.ErrorCode) == nil && rp.Offset >= 0 {
					out[tp{rt.Topic, rp.Partition}] = rp.Offset
				}
			}
		}
	}
	return out
}
