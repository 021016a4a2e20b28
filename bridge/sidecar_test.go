package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

// waitLimit only turns a hang into a failure; no test relies on it for synchronisation.
const waitLimit = 30 * time.Second

// syncBuffer is a bytes.Buffer safe for the bridge's logger and the test at once.
type syncBuffer = testkit.SyncBuffer

// running is a bridge under test, serving on a free loopback port.
type running struct {
	addr    string
	action  *actionconf.Action
	logs    *syncBuffer
	events  *events // what the bridge tells Options.Events, unless a test sets its own
	metrics *bridge.Metrics
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// startBridge runs the bridge of line (without "-- COMMAND": the test binary plays the action)
// until the test ends.
func startBridge(t *testing.T, line string, mods ...func(*bridge.Options)) *running {
	t.Helper()
	words, err := actionconf.Split(line)
	if err != nil {
		t.Fatal(err)
	}
	a, err := actionconf.ParseLine(append(words, "--", os.Args[0], "-test.run=^$"))
	if err != nil {
		t.Fatal(err)
	}
	r := &running{action: a, logs: &syncBuffer{}, events: &events{}, metrics: bridge.NewMetrics(0), done: make(chan error, 1)}
	opts := bridge.Options{
		Action:        a,
		Version:       "test",
		Logger:        slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:       r.metrics,
		Events:        r.events.add,
		Env:           []string{testkit.RoleEnv("action"), "GORACE=atexit_sleep_ms=0"}, // a race-built child otherwise lingers 1s at exit
		RetryBackoff:  time.Millisecond,
		ShutdownGrace: 2 * time.Second,
	}
	for _, m := range mods {
		m(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	addrs := make(chan net.Addr, 1)
	go func() { r.done <- bridge.ListenAndServe(ctx, 0, opts, func(a net.Addr) { addrs <- a }) }()
	select {
	case a := <-addrs:
		r.addr = a.String()
	case err := <-r.done:
		t.Fatalf("ListenAndServe = %v; want it serving", err)
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("ListenAndServe = %v; want nil after a graceful shutdown", err)
		}
		if t.Failed() {
			t.Logf("bridge log:\n%s", r.logs.String())
		}
	})
	return r
}

// stop shuts the bridge down as SIGTERM does and returns what ListenAndServe returned.
func (r *running) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(waitLimit):
		return errors.New("the bridge did not stop")
	}
}

// answer is what the bridge sent for one batch.
type answer struct {
	emits []*flowv1.Emit
	ack   bool
	fail  *flowv1.Fail
}

func (a *answer) String() string {
	switch {
	case a == nil:
		return "no answer"
	case a.fail != nil:
		return fmt.Sprintf("Fail(%q) after %d emits", a.fail.GetError().GetMessage(), len(a.emits))
	case a.ack:
		return fmt.Sprintf("Ack after %d emits", len(a.emits))
	}
	return fmt.Sprintf("%d emits, not answered", len(a.emits))
}

// sidecar is a fake sidecar: a real gRPC client of the bridge that checks the rules the real
// sidecar enforces on what it receives.
type sidecar struct {
	t      *testing.T
	fs     *testkit.FakeSidecar
	disc   flowv1grpc.DiscoveryClient
	stream grpc.BidiStreamingClient[flowv1.ToProcess, flowv1.FromProcess]
	cancel context.CancelFunc

	mu         sync.Mutex
	changed    chan struct{}
	answers    map[uint64]*answer
	sent       map[uint64]bool // batch ids sent on the current stream
	all        []*flowv1.FromProcess
	violations []string
	end        error // what Recv ended with (io.EOF for a completed stream)
	ended      chan struct{}
}

func dial(t *testing.T, addr string) *sidecar {
	t.Helper()
	fs := testkit.DialProcess(t, addr)
	return &sidecar{t: t, fs: fs, disc: flowv1grpc.NewDiscoveryClient(fs.Conn)}
}

// open opens a Run stream and starts reading it.
func (s *sidecar) open() {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := s.fs.Run(ctx)
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.stream, s.cancel = stream, cancel
	s.changed = make(chan struct{})
	s.answers = map[uint64]*answer{}
	s.sent = map[uint64]bool{}
	s.all = nil
	s.end = nil
	s.ended = make(chan struct{})
	ended := s.ended
	s.mu.Unlock()
	s.t.Cleanup(func() {
		cancel()
		<-ended
	})
	go s.read(stream, ended)
}

func (s *sidecar) read(stream *testkit.Stream, ended chan struct{}) {
	defer close(ended)
	for {
		m, err := stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.end = err
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			return
		}
		s.all = append(s.all, m)
		switch m := m.GetMessage().(type) {
		case *flowv1.FromProcess_Emit:
			if !s.sent[m.Emit.GetBatchId()] {
				s.violations = append(s.violations, fmt.Sprintf("an Emit for batch %d, never sent on this stream", m.Emit.GetBatchId()))
			}
			a := s.answers[m.Emit.GetBatchId()]
			if a == nil {
				a = &answer{}
				s.answers[m.Emit.GetBatchId()] = a
			}
			if a.ack || a.fail != nil {
				s.violations = append(s.violations, fmt.Sprintf("Emit after the answer of batch %d", m.Emit.GetBatchId()))
			}
			a.emits = append(a.emits, m.Emit)
		case *flowv1.FromProcess_Ack:
			s.answered(m.Ack.GetBatchId()).ack = true
		case *flowv1.FromProcess_Fail:
			s.answered(m.Fail.GetBatchId()).fail = m.Fail
		default:
			s.violations = append(s.violations, "an empty FromProcess message")
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// answered returns the answer of batch id for its Ack or Fail, noting a second one. s.mu is
// held.
func (s *sidecar) answered(id uint64) *answer {
	if !s.sent[id] {
		s.violations = append(s.violations, fmt.Sprintf("an answer for batch %d, never sent on this stream", id))
	}
	a := s.answers[id]
	if a == nil {
		a = &answer{}
		s.answers[id] = a
	}
	if a.ack || a.fail != nil {
		s.violations = append(s.violations, fmt.Sprintf("a second answer for batch %d", id))
	}
	return a
}

func (s *sidecar) send(m *flowv1.ToProcess) {
	s.t.Helper()
	if err := s.stream.Send(m); err != nil {
		s.t.Fatalf("Send(%v) = %v", m, err)
	}
}

// start opens a stream and sends Start for conversation id with the action's ports bound to
// topics named "<port>-topic".
func (s *sidecar) start(r *running, id string, maxBytes uint32) {
	s.t.Helper()
	s.open()
	s.sendStart(r, id, maxBytes, `{}`)
}

func (s *sidecar) sendStart(r *running, id string, maxBytes uint32, config string) {
	st := &flowv1.Start{ConversationId: id, Pipeline: "pipe", Streamlet: r.action.Name, ConfigJson: config, MaxMessageBytes: maxBytes}
	for _, p := range r.action.Inlets {
		st.Inlets = append(st.Inlets, &flowv1.PortBinding{Port: p.Name, Topic: p.Name + "-topic"})
	}
	for _, p := range r.action.Outlets {
		st.Outlets = append(st.Outlets, &flowv1.PortBinding{Port: p.Name, Topic: p.Name + "-topic"})
	}
	s.send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: st}})
}

// batch sends a batch of records (offsets from first) for partition of inlet "in".
func (s *sidecar) batch(id uint64, partition int32, recs ...*flowv1.InputRecord) {
	s.t.Helper()
	s.mu.Lock()
	s.sent[id] = true
	s.mu.Unlock()
	s.send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{BatchId: id, Inlet: "in", Partition: partition, Records: recs}}})
}

// rec is an input record at offset; key nil means none.
func rec(offset int64, key []byte, value string, headers ...*flowv1.Header) *flowv1.InputRecord {
	return &flowv1.InputRecord{Offset: offset, TimestampMs: 1_700_000_000_000 + offset, Record: &flowv1.Record{Key: key, Value: []byte(value), Headers: headers}}
}

// wait returns the answer of batch id once it is acked or failed.
func (s *sidecar) wait(id uint64) *answer {
	s.t.Helper()
	deadline := time.After(waitLimit)
	for {
		s.mu.Lock()
		a, end, changed := s.answers[id], s.end, s.changed
		if a != nil && (a.ack || a.fail != nil) {
			cp := *a
			cp.emits = append([]*flowv1.Emit(nil), a.emits...)
			s.mu.Unlock()
			return &cp
		}
		s.mu.Unlock()
		if end != nil {
			s.t.Fatalf("batch %d: the stream ended (%v) before its answer (%v)", id, end, a)
		}
		select {
		case <-changed:
		case <-deadline:
			s.t.Fatalf("batch %d: no answer within %s (%v)", id, waitLimit, a)
		}
	}
}

// waitEnd returns what the stream ended with (io.EOF: completed).
func (s *sidecar) waitEnd() error {
	s.t.Helper()
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	select {
	case <-ended:
	case <-time.After(waitLimit):
		s.t.Fatalf("the stream did not end within %s", waitLimit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// stop sends Stop, half-closes and returns what the stream ended with.
func (s *sidecar) stop() error {
	s.t.Helper()
	s.send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: "test over"}}})
	if err := s.stream.CloseSend(); err != nil {
		s.t.Fatal(err)
	}
	return s.waitEnd()
}

// check fails the test for any rule the bridge broke.
func (s *sidecar) check() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		s.t.Errorf("protocol violation: %s", v)
	}
}

// expectEOF fails unless err is the end of a completed stream.
func expectEOF(t *testing.T, err error) {
	t.Helper()
	if err != io.EOF {
		t.Errorf("stream ended with %v; want a completed stream (EOF)", err)
	}
}
