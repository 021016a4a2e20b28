package sidecar

import "github.com/twmb/franz-go/pkg/kgo"

// Pausing a partition's fetching (the queue at high water) has two sides: the partition's
// paused flag, which the sidecar changes under mu wherever a queue grows or shrinks, and the
// client's paused set, which persists until resumed, across revocations and assignments
// alike. The flag is the truth; applyPauses makes the client's set match it. A pause or a
// resume sent as a change, outside mu, could reach the client out of order (a commit's resume
// before the poll's pause) or not at all (a revocation that reset the flag before reading it),
// and the client would keep a partition paused that the sidecar believes is fetching: owned,
// its queue empty, no batch ever sent, nothing logged (a member that froze past its session had its
// partitions lost at high water, and got them back paused for good).

// applyPauses makes the client pause exactly the partitions whose flag says paused, and
// resume every other: a partition no longer owned is not paused (newEpoch clears its flag),
// so a revocation's leftovers go too. Whoever changes a flag calls it after, without mu held;
// pauseMu serializes the calls, and each reads the flags after the change it follows, so the
// last call leaves the client as the flags are.
func (s *Sidecar) applyPauses(cl *kgo.Client) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	want := map[tp]bool{}
	s.mu.Lock()
	for _, p := range s.order {
		if p.paused {
			want[p.tp] = true
		}
	}
	s.mu.Unlock()
	var pause, resume map[string][]int32
	add := func(m *map[string][]int32, topic string, n int32) {
		if *m == nil {
			*m = map[string][]int32{}
		}
		(*m)[topic] = append((*m)[topic], n)
	}
	have := map[tp]bool{}
	for topic, ns := range cl.PauseFetchPartitions(nil) {
		for _, n := range ns {
			have[tp{topic, n}] = true
			if !want[tp{topic, n}] {
				add(&resume, topic, n)
			}
		}
	}
	for key := range want {
		if !have[key] {
			add(&pause, key.topic, key.partition)
		}
	}
	if resume != nil {
		cl.ResumeFetchPartitions(resume)
	}
	if pause != nil {
		cl.PauseFetchPartitions(pause)
	}
}
