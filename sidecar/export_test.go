package sidecar

import (
	"context"
	"time"
)

// SetSleep replaces the waits between attempts (backoffs); call it before Run.
func SetSleep(s *Sidecar, sleep func(ctx context.Context, d time.Duration) bool) { s.sleep = sleep }

// SetLagRefresh sets how often s asks for its partitions' high watermarks; call it before Run.
func SetLagRefresh(s *Sidecar, d time.Duration) { s.lagRefresh = d }

// CommitsFor returns how many offset commits s made for topic/partition.
func CommitsFor(s *Sidecar, topic string, partition int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp{topic, partition}]; p != nil {
		return p.commits
	}
	return 0
}

// Owned returns the partitions of topic that s owns.
func Owned(s *Sidecar, topic string) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int32
	for _, p := range s.order {
		if p.topic == topic && p.owned {
			out = append(out, p.partition)
		}
	}
	return out
}

// Stats are the sidecar's counters.
type Stats = stats

// Stats returns a snapshot of the counters.
func (s *Sidecar) Stats() Stats { return s.snapshot() }

// Names the tests match that no caller outside the package needs.
const ReasonPartitionStalled = reasonPartitionStalled

var (
	ErrConfig  = errConfig
	ErrProduce = errProduce
	// ErrEmitTooLarge is matched by the failure of an emit larger than its outlet accepts.
	ErrEmitTooLarge = errEmitTooLarge
)

type ConfigError = configError
