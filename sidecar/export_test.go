package sidecar

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
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

// ServeState serves the State service for s on a free loopback port and returns its address,
// the bridge's side of it: a stand-in for stateserve.go's server, so the data path can be
// tested as the bridge drives it. Open attaches the live conversation it names (waiting for
// it to be live), with the limits of the Open itself; a batch's Staged messages are
// reassembled and joined (stagedArrived); a broken stream fails the conversation.
func ServeState(t testing.TB, s *Sidecar) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	statev1.RegisterStateServer(srv, &testStateServer{s: s})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

type testStateServer struct {
	statev1.UnimplementedStateServer
	s *Sidecar
}

func (ts *testStateServer) Attach(stream statev1.State_AttachServer) error {
	s := ts.s
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	open := m.GetOpen()
	var c *conversation
	for deadline := time.Now().Add(10 * time.Second); c == nil && time.Now().Before(deadline); {
		s.mu.Lock()
		if s.conv != nil && s.conv.start.GetConversationId() == open.GetConversationId() {
			c = s.conv
		}
		s.mu.Unlock()
		if c == nil {
			time.Sleep(time.Millisecond) // the Start is sent before the conversation is live
		}
	}
	if c == nil {
		return status.Errorf(codes.FailedPrecondition, "conversation %s is not the live one", open.GetConversationId())
	}
	limits := map[string]*statev1.InletLimits{}
	var ls []*statev1.InletLimits
	for _, in := range open.GetInlets() {
		l := &statev1.InletLimits{Inlet: in.GetInlet(), MaxValueBytes: in.GetMaxValueBytes(), MaxRecordBytes: uint32(s.cfg.MaxMessageBytes - 1024)}
		limits[in.GetInlet()] = l
		ls = append(ls, l)
	}
	opened := &statev1.SidecarMessage{Message: &statev1.SidecarMessage_Opened{Opened: &statev1.Opened{Inlets: ls, MaxMessageBytes: uint32(s.cfg.MaxMessageBytes)}}}
	if err := stream.Send(opened); err != nil {
		return err
	}
	s.mu.Lock()
	c.state = &stateLink{stream: stream, limits: limits, maxMessageBytes: s.cfg.MaxMessageBytes}
	c.stateOpened.Fire()
	s.kickSenderLocked()
	s.mu.Unlock()
	var entries []*statev1.Entry
	for {
		m, err := stream.Recv()
		if err != nil {
			s.failConv(c, streamFailed(causeUnreachable, "the State stream ended: %w", err))
			return nil
		}
		st := m.GetStaged()
		entries = append(entries, st.GetEntries()...)
		if st.GetMore() {
			continue
		}
		if err := s.stagedArrived(c, st.GetBatchId(), entries); err != nil {
			s.failConv(c, err)
			return err
		}
		entries = nil
	}
}

// StateOf returns the state of key in the open store of topic/partition (the inlet topic),
// and whether s holds one.
func StateOf(t testing.TB, s *Sidecar, topic string, partition int32, key string) (string, bool) {
	t.Helper()
	s.mu.Lock()
	p := s.parts[tp{topic, partition}]
	var st *state.Partition
	if p != nil {
		st = p.store
	}
	s.mu.Unlock()
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
