package sidecar

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
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

// SetClock replaces the sidecar's clock (now) and its timers (after, on that clock); call it
// before Run.
func SetClock(s *Sidecar, now func() time.Time, after func(time.Duration) <-chan time.Time) {
	s.now, s.after = now, after
}

// Revoking returns the partitions of topic whose revocation waits for their batches.
func Revoking(s *Sidecar, topic string) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int32
	for _, p := range s.order {
		if p.topic == topic && p.revoking {
			out = append(out, p.partition)
		}
	}
	return out
}

// CauseOf is the cause a stream failure is counted under in
// millrace_sidecar_stream_failures_total.
func CauseOf(err error) string { return causeOf(err) }

// The causes of a stream failure, as CauseOf returns them.
const (
	CauseUnreachable  = causeUnreachable
	CauseFailedBatch  = causeFailedBatch
	CauseProtocol     = causeProtocol
	CauseMessageLarge = causeMessageLarge
	CauseRecordLarge  = causeRecordLarge
	CauseProduce      = causeProduce
	CauseCommit       = causeCommit
	CauseStopTimeout  = causeStopTimeout
	CauseEmitBudget   = causeEmitBudget
)

var (
	// ErrStreamFailed is wrapped by every failed stream's error.
	ErrStreamFailed = errStreamFailed
	// ErrRecordTooLarge is wrapped when an input record cannot fit in a Batch.
	ErrRecordTooLarge = errRecordTooLarge
	// ErrBatchEmitBudget and ErrRecordEmitBudget are wrapped when a batch's emits, or one
	// record's, exceed FLOW_MAX_BATCH_EMIT_BYTES.
	ErrBatchEmitBudget  = errBatchEmitBudget
	ErrRecordEmitBudget = errRecordEmitBudget
)

// SetProtocolVersion makes s speak protocol version v instead of protocol.Version; call it
// before Run.
func SetProtocolVersion(s *Sidecar, v string) { s.version = v }

// StateOf returns the state of key in the open store of topic/partition (the inlet topic),
// and whether s holds one.
func StateOf(t testing.TB, s *Sidecar, topic string, partition int32, key string) (string, bool) {
	t.Helper()
	st := storeOf(s, topic, partition)
	if st == nil {
		return "", false
	}
	got, err := st.Get([][]byte{[]byte(key)}, math.MinInt64, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		return "", false
	}
	return string(got[0].Value), true
}

// storeOf returns the open store of topic/partition (the inlet topic), or nil.
func storeOf(s *Sidecar, topic string, partition int32) *state.Partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp{topic, partition}]; p != nil {
		return p.store
	}
	return nil
}

// TTLIndexed reports whether the store of topic/partition has a TTL index (false when it has
// no store).
func TTLIndexed(t testing.TB, s *Sidecar, topic string, partition int32) bool {
	t.Helper()
	st := storeOf(s, topic, partition)
	if st == nil {
		return false
	}
	indexed, err := st.TTLIndexed()
	if err != nil {
		t.Fatal(err)
	}
	return indexed
}

// Restoring reports whether topic/partition is restoring.
func Restoring(s *Sidecar, topic string, partition int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tp{topic, partition}]
	return p != nil && p.restoring
}

// Overlay returns how many states topic/partition holds acknowledged and not yet in its store.
func Overlay(s *Sidecar, topic string, partition int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp{topic, partition}]; p != nil {
		return len(p.overlay)
	}
	return 0
}

// KeptFile reports whether the revoked topic/partition's store file is kept for its return.
func KeptFile(s *Sidecar, topic string, partition int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tp{topic, partition}]
	return p != nil && p.kept != nil
}

// TxnStates returns how many state records the open transaction holds (exactly once).
func TxnStates(s *Sidecar) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	// c.txn, not c.txnOpen: the committer sets txnOpen without mu; c.txn is empty unless a
	// transaction is open.
	if c := s.conv; c != nil {
		for _, b := range c.txn {
			n += len(b.state)
		}
	}
	return n
}

// Paused returns the partitions of topic whose fetching s holds paused at high water.
func Paused(s *Sidecar, topic string) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int32
	for _, p := range s.order {
		if p.topic == topic && p.owned && p.paused {
			out = append(out, p.partition)
		}
	}
	return out
}

// MsgStuck is the watchdog's log message of a stuck partition.
const MsgStuck = msgStuck

// SetDropBatch makes s strand partitions on purpose: a batch drop names counts as sent, yet
// never goes and is not in flight; call it before Run.
func SetDropBatch(s *Sidecar, drop func(topic string, partition int32) bool) { s.dropBatch = drop }

// SetPauseBehind makes s's Kafka client pause, after a fetch, the partitions pause names,
// without the sidecar knowing; call it before Run.
func SetPauseBehind(s *Sidecar, pause func(topic string, partition int32) bool) {
	s.pauseBehind = pause
}

// End returns what s last saw of the end of topic/partition (the high watermark, or exactly
// once the last stable offset), -1 while unknown.
func End(s *Sidecar, topic string, partition int32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp{topic, partition}]; p != nil {
		return p.end
	}
	return -1
}
