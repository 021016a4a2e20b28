package bridge_test

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

func TestStopWithBatchesInFlight(t *testing.T) {
	r := startBridge(t, oneOutlet+" --concurrency 2")
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	for p := range 3 {
		s.batch(uint64(p+1), int32(p), rec(0, nil, `{"op":"sleep","ms":150}`), rec(1, nil, `{"op":"sleep","ms":50}`))
	}
	expectEOF(t, s.stop())
	for id := uint64(1); id <= 3; id++ {
		s.mu.Lock()
		a := s.answers[id]
		s.mu.Unlock()
		if a == nil || !a.ack || len(a.emits) != 2 {
			t.Errorf("batch %d: answer = %v; want Ack after 2 emits before the stream completed", id, a)
		}
	}
	s.check()
}

// TestNewStartMidBatch: a new Start on the same stream voids the old conversation: its batch
// in flight is never answered, and the new conversation works.
func TestNewStartMidBatch(t *testing.T) {
	r := startBridge(t, oneOutlet+" --timeout 1h")
	s := dial(t, r.addr)
	s.start(r, "old", 0)
	s.batch(100, 0, rec(0, nil, `{"op":"emits","n":1}`), rec(1, nil, `{"op":"hang","n":9}`))
	s.sendStart(r, "new", 0, `{}`)
	s.batch(1, 0, rec(0, nil, `{"op":"emits","n":2}`))
	if a := s.wait(1); !a.ack || len(a.emits) != 2 {
		t.Errorf("answer of the new conversation = %v; want Ack after 2 emits", a)
	}
	expectEOF(t, s.stop())
	// The bridge sends a record's emits once it and the records before it are done (in runs of
	// up to 64 KiB, or with the Ack), so record 0's one emit may have gone out before the new
	// Start arrived; the hanging record 1
	// never finishes, so the voided batch gets no more than that, and never an Ack or Fail.
	s.mu.Lock()
	if a := s.answers[100]; a != nil && (a.ack || a.fail != nil || len(a.emits) > 1) {
		t.Errorf("batch 100 of the voided conversation got %v; want at most record 0's emit, never an Ack or Fail", a)
	}
	s.mu.Unlock()
	s.check()
}

// TestNewRunMidBatch: a Start on another stream voids the conversation of the first, whose
// stream ends ABORTED without a word about its batch.
func TestNewRunMidBatch(t *testing.T) {
	r := startBridge(t, oneOutlet+" --timeout 1h")
	old := dial(t, r.addr)
	old.start(r, "old", 0)
	old.batch(100, 0, rec(0, nil, `{"op":"hang","n":9}`))
	// The old batch is in flight once the bridge took it; Discover on the same connection
	// orders nothing, so wait for the process to be busy, as the pool's gauge tells.
	waitInFlight(t, r)
	s := dial(t, r.addr)
	s.start(r, "new", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"emits","n":1}`))
	if a := s.wait(1); !a.ack {
		t.Errorf("answer of the new conversation = %v; want Ack", a)
	}
	if err := old.waitEnd(); status.Code(err) != codes.Aborted {
		t.Errorf("old stream ended with %v; want ABORTED", err)
	}
	old.mu.Lock()
	if len(old.all) != 0 {
		t.Errorf("old stream got %v; want nothing", old.all)
	}
	old.mu.Unlock()
	expectEOF(t, s.stop())
	s.check()
}

// waitInFlight waits until a delivery is with a process, as the pool's gauge tells.
func waitInFlight(t *testing.T, r *running) {
	t.Helper()
	inFlight := func() bool {
		n, _ := testkit.Gather(t, r.metrics.Registry()).Value("millrace_pool_deliveries_in_flight")
		return n > 0
	}
	if !testkit.Eventually(waitLimit, inFlight) {
		t.Fatal("no delivery ever in flight")
	}
}

func TestStreamErrors(t *testing.T) {
	r := startBridge(t, oneOutlet)
	tests := []struct {
		name string
		msgs []*flowv1.ToProcess
		code codes.Code
		want string
	}{
		{"batch before start", []*flowv1.ToProcess{{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{BatchId: 1}}}}, codes.FailedPrecondition, "before Start"},
		{"empty message", []*flowv1.ToProcess{{}}, codes.InvalidArgument, "empty ToProcess"},
		{"config not JSON", []*flowv1.ToProcess{{Message: &flowv1.ToProcess_Start{Start: &flowv1.Start{ConversationId: "c", ConfigJson: "{"}}}}, codes.InvalidArgument, "config_json of conversation c is not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dial(t, r.addr)
			s.open()
			for _, m := range tt.msgs {
				s.send(m)
			}
			err := s.waitEnd()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("stream ended with %v; want %v containing %q", err, tt.code, tt.want)
			}
		})
	}
	// A batch for an inlet Start did not bind is failed; the stream goes on.
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.mu.Lock()
	s.sent[1] = true
	s.mu.Unlock()
	s.send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{BatchId: 1, Inlet: "other", Records: []*flowv1.InputRecord{rec(0, nil, "{}")}}}})
	if a := s.wait(1); a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), `names inlet "other"`) {
		t.Errorf("answer = %v; want Fail naming the inlet", a)
	}
	expectEOF(t, s.stop())
}

func TestActionDoesNotStart(t *testing.T) {
	r := startBridge(t, oneOutlet+" --ready-timeout 2s", func(o *bridge.Options) {
		o.Action.Command = []string{filepath.Join(t.TempDir(), "no-such-program")}
	})
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	err := s.waitEnd()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no-such-program") {
		t.Errorf("stream ended with %v; want UNAVAILABLE naming the program", err)
	}
}

// TestCrashLoop: an action that cannot start again after a crash ends the conversation with
// UNAVAILABLE naming the cause, rather than leaving the batch waiting in silence.
func TestCrashLoop(t *testing.T) {
	once := filepath.Join(t.TempDir(), "started")
	r := startBridge(t, oneOutlet+" --retries 5", func(o *bridge.Options) {
		o.Env = append(o.Env, "BRIDGE_TEST_ONCE="+once)
	})
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"crash","n":9}`))
	err := s.waitEnd()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "crash-looping") || !strings.Contains(err.Error(), "cannot start twice") {
		t.Errorf("stream ended with %v; want UNAVAILABLE naming the crash loop and the action's stderr", err)
	}
	s.mu.Lock()
	if a := s.answers[1]; a != nil {
		t.Errorf("batch 1 got %v; want no answer", a)
	}
	s.mu.Unlock()
}

// TestShutdown: SIGTERM (the context ending) answers the batches in flight, ends the stream
// UNAVAILABLE and returns nil.
func TestShutdown(t *testing.T) {
	r := startBridge(t, oneOutlet)
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	s.batch(1, 0, rec(0, nil, `{"op":"sleep","ms":200}`))
	waitInFlight(t, r)
	if err := r.stop(); err != nil {
		t.Errorf("ListenAndServe = %v; want nil", err)
	}
	if err := s.waitEnd(); status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v; want UNAVAILABLE", err)
	}
	s.mu.Lock()
	a := s.answers[1]
	s.mu.Unlock()
	if a == nil || !a.ack {
		t.Errorf("batch in flight at shutdown: %v; want Ack", a)
	}
}
