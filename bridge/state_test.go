package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// stateServer plays the sidecar's State service: a real gRPC server on a free loopback port
// that answers Open as told, pushes the BatchStates the test sends and hands each Staged
// (reassembled by more) to the test.
type stateServer struct {
	statev1.UnimplementedStateServer
	t      *testing.T
	port   int
	answer *statev1.SidecarMessage // to Open
	broken chan struct{}           // when closed, the stream fails (after Opened)
	// linger keeps the stream open after the bridge half-closes it, until the test ends;
	// ends gets the error that ended each stream's reading (io.EOF: half-closed).
	linger bool
	ends   chan error

	opens    chan *statev1.Open
	staged   chan *statev1.Staged
	messages chan *statev1.Staged // each Staged message as it came

	mu     sync.Mutex
	stream statev1.State_AttachServer
}

// serveState starts a State server answering Open with answer; nil answer registers no State
// service at all (a sidecar that does not serve it).
func serveState(t *testing.T, answer *statev1.SidecarMessage) *stateServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stateServer{t: t, port: lis.Addr().(*net.TCPAddr).Port, answer: answer,
		broken: make(chan struct{}), ends: make(chan error, 4), opens: make(chan *statev1.Open, 4), staged: make(chan *statev1.Staged, 64), messages: make(chan *statev1.Staged, 64)}
	gs := grpc.NewServer()
	if answer != nil {
		statev1.RegisterStateServer(gs, s)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return s
}

func opened(limits ...*statev1.InletLimits) *statev1.SidecarMessage {
	return &statev1.SidecarMessage{Message: &statev1.SidecarMessage_Opened{Opened: &statev1.Opened{Inlets: limits, MaxMessageBytes: 4 << 20}}}
}

func (s *stateServer) Attach(stream statev1.State_AttachServer) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.stream = stream
	s.mu.Unlock()
	if err := stream.Send(s.answer); err != nil {
		return err
	}
	s.opens <- m.GetOpen()
	if s.answer.GetRefused() != nil {
		return nil
	}
	recv := make(chan *statev1.ProcessMessage)
	go func() {
		defer close(recv)
		for {
			m, err := stream.Recv()
			if err != nil {
				s.ends <- err
				return
			}
			recv <- m
		}
	}()
	var whole *statev1.Staged
	for {
		var m *statev1.ProcessMessage
		select {
		case m = <-recv:
		case <-s.broken:
			return status.Error(codes.Internal, "the test breaks the State stream")
		}
		if m == nil {
			if s.linger {
				<-stream.Context().Done()
			}
			return nil
		}
		st := m.GetStaged()
		if st == nil {
			s.t.Errorf("the bridge sent %v on the State stream after Open; only Staged may follow", m)
			return nil
		}
		s.messages <- st
		if whole == nil {
			whole = &statev1.Staged{BatchId: st.GetBatchId()}
		} else if whole.GetBatchId() != st.GetBatchId() {
			s.t.Errorf("Staged of batch %d came between the parts of batch %d's", st.GetBatchId(), whole.GetBatchId())
		}
		whole.Entries = append(whole.Entries, st.GetEntries()...)
		if !st.GetMore() {
			s.staged <- whole
			whole = nil
		}
	}
}

// open returns the Open the bridge sent, once the test's answer to it is sent.
func (s *stateServer) open() *statev1.Open {
	s.t.Helper()
	select {
	case o := <-s.opens:
		return o
	case <-time.After(waitLimit):
		s.t.Fatal("the bridge sent no Open")
		return nil
	}
}

// push sends batch id's states: key, value pairs.
func (s *stateServer) push(id uint64, kv ...string) {
	s.t.Helper()
	bs := &statev1.BatchState{BatchId: id}
	for i := 0; i+1 < len(kv); i += 2 {
		bs.Entries = append(bs.Entries, &statev1.Entry{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stream.Send(&statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: bs}}); err != nil {
		s.t.Fatalf("Send(BatchState %d) = %v", id, err)
	}
}

// next returns the next Staged, whole.
func (s *stateServer) next() *statev1.Staged {
	s.t.Helper()
	select {
	case st := <-s.staged:
		return st
	case <-time.After(waitLimit):
		s.t.Fatal("no Staged came")
		return nil
	}
}

// entries writes a Staged's entries as key=value (key=- for a delete), in order.
func entries(st *statev1.Staged) string {
	var w []string
	for _, e := range st.GetEntries() {
		v := "-"
		if e.Value != nil {
			v = string(e.GetValue())
		}
		w = append(w, string(e.GetKey())+"="+v)
	}
	return strings.Join(w, " ")
}

// counted is what op count emitted: the n it wrote and the state it saw.
func counted(t *testing.T, e *flowv1.Emit) string {
	t.Helper()
	var v struct {
		N   int
		Saw json.RawMessage
	}
	if err := json.Unmarshal(e.GetRecord().GetValue(), &v); err != nil {
		t.Fatalf("emit %s: %v", e.GetRecord().GetValue(), err)
	}
	return string(e.GetRecord().GetKey()) + ":" + string(v.Saw)
}

func countRec(offset int64, key string) *flowv1.InputRecord {
	return rec(offset, []byte(key), `{"op":"count"}`)
}

const stateLine = "counter --in in=x.v1 --out out=y.v1 --state in,ttl=1h"

// TestStateRunningCount: Open names the conversation and the line's limits; Opened's limits
// reach hello.state; within a batch a key's records chain (each sees what the one before
// staged), the next batch's pushed state is what the first staged, a delete goes back as an
// entry without value, a Staged too large for one message is split by more, and a batch
// answered with Fail sends no Staged.
func TestStateRunningCount(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in", ChangelogTopic: "in.state", MaxValueBytes: 1000, MaxRecordBytes: 2000}))
	budget := engine.NewBudget(bridge.DefaultMaxHeldBytes)
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port; o.Budget = budget })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)

	o := st.open()
	want := &statev1.Open{ConversationId: "conv-1", Inlets: []*statev1.InletState{{Inlet: "in", TtlMs: 3_600_000, MaxValueBytes: 64 << 10}}}
	if !proto.Equal(o, want) {
		t.Errorf("Open = %v; want %v", o, want)
	}

	// Batch 1: three records of u-7 chain; u-9 starts from its pushed state; h inspects hello.
	st.push(1, "u-9", `{"n":41}`)
	sc.batch(1, 0, countRec(0, "u-7"), countRec(1, "u-9"), countRec(2, "u-7"), rec(3, []byte("h"), `{"op":"inspect"}`), countRec(4, "u-7"))
	a := sc.wait(1)
	if !a.ack || len(a.emits) != 5 {
		t.Fatalf("batch 1: %v; want Ack after 5 emits", a)
	}
	var got []string
	for _, i := range []int{0, 1, 2, 4} {
		got = append(got, counted(t, a.emits[i]))
	}
	if g, w := strings.Join(got, " "), `u-7:null u-9:{"n":41} u-7:{"n":1} u-7:{"n":2}`; g != w {
		t.Errorf("batch 1: the states the records saw = %s; want %s", g, w)
	}
	var seen struct {
		Hello struct{ State json.RawMessage }
	}
	if err := json.Unmarshal(a.emits[3].GetRecord().GetValue(), &seen); err != nil {
		t.Fatal(err)
	}
	if g, w := string(seen.Hello.State), `{"in":{"ttl":"1h0m0s","maxBytes":1000}}`; g != w {
		t.Errorf("hello.state = %s; want %s (Opened's max_value_bytes under the line's)", g, w)
	}
	s1 := st.next()
	if s1.GetBatchId() != 1 || entries(s1) != `u-7={"n":3} u-9={"n":42}` {
		t.Errorf("Staged = batch %d %s; want batch 1 u-7={\"n\":3} u-9={\"n\":42}", s1.GetBatchId(), entries(s1))
	}

	// Batch 2 fails: no Staged for it.
	st.push(2, "u-7", string(s1.GetEntries()[0].GetValue()))
	sc.batch(2, 0, countRec(5, "u-7"), rec(6, []byte("u-7"), `{"op":"fail"}`))
	if a := sc.wait(2); a.fail == nil {
		t.Fatalf("batch 2: %v; want Fail", a)
	}

	// Batch 3, redelivered with what batch 1 staged: the chain goes on from it; a delete.
	st.push(3, "u-7", string(s1.GetEntries()[0].GetValue()), "u-9", `{"n":42}`)
	sc.batch(3, 0, countRec(5, "u-7"), rec(6, []byte("u-9"), `{"op":"clear"}`), countRec(7, "u-7"))
	a = sc.wait(3)
	if !a.ack || len(a.emits) != 2 || counted(t, a.emits[0]) != `u-7:{"n":3}` || counted(t, a.emits[1]) != `u-7:{"n":4}` {
		t.Fatalf("batch 3: %v; want Ack after u-7 saw {\"n\":3} then {\"n\":4}", a)
	}
	if s3 := st.next(); s3.GetBatchId() != 3 || entries(s3) != `u-7={"n":5} u-9=-` {
		t.Errorf("Staged = batch %d %s; want batch 3 (none for the failed batch 2) u-7={\"n\":5} u-9=-", s3.GetBatchId(), entries(s3))
	}
	// A batch that staged nothing still sends its (empty) Staged.
	st.push(4)
	sc.batch(4, 0, rec(8, []byte("u-7"), `{"op":"skip"}`))
	if a := sc.wait(4); !a.ack {
		t.Fatalf("batch 4: %v; want Ack", a)
	}
	if s4 := st.next(); s4.GetBatchId() != 4 || len(s4.GetEntries()) != 0 {
		t.Errorf("Staged = batch %d %s; want batch 4, empty", s4.GetBatchId(), entries(s4))
	}
	if n := budget.Held(); n != 0 {
		t.Errorf("%d bytes of the output budget still held once every batch is answered; want 0", n)
	}
	expectEOF(t, sc.stop())
	sc.check()
	var msgs int
	for len(st.messages) > 0 {
		<-st.messages
		msgs++
	}
	if msgs != 3 {
		t.Errorf("%d Staged messages; want 3 (one per acknowledged batch, each under max_message_bytes)", msgs)
	}
	expectMetrics(t, r,
		`millrace_state_staged_total{inlet="in",kind="set"} 3`,
		`millrace_state_staged_total{inlet="in",kind="delete"} 1`,
		`millrace_state_wait_seconds_count 4`)
}

// expectMetrics fails unless the bridge's metrics hold every line of want.
func expectMetrics(t *testing.T, r *running, want ...string) {
	t.Helper()
	rec := httptest.NewRecorder()
	bridge.MetricsHandler(r.metrics).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %s:\n%s", w, body)
		}
	}
}

// TestStateStagedSplit: a batch's Staged over Opened.max_message_bytes goes in several
// messages, more set on all but the last, no entry split; a keyless record's state is refused
// (dead-lettered, counted) and left out.
func TestStateStagedSplit(t *testing.T) {
	o := opened(&statev1.InletLimits{Inlet: "in", MaxValueBytes: 1000, MaxRecordBytes: 2000})
	o.GetOpened().MaxMessageBytes = 100
	st := serveState(t, o)
	r := startBridge(t, "counter --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl --state in", func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	st.push(1)
	var recs []*flowv1.InputRecord
	for i := range 6 {
		recs = append(recs, countRec(int64(i), strings.Repeat(string(rune('a'+i)), 20)))
	}
	recs = append(recs, rec(6, nil, `{"op":"count"}`))
	sc.batch(1, 0, recs...)
	if a := sc.wait(1); !a.ack || len(a.emits) != 7 || a.emits[6].GetOutlet() != "dl" {
		t.Fatalf("batch 1: %v; want Ack after 7 emits, the keyless record's to dl", a)
	}
	whole := st.next()
	if len(whole.GetEntries()) != 6 {
		t.Errorf("Staged = %s; want the 6 keys", entries(whole))
	}
	var parts []*statev1.Staged
	for len(st.messages) > 0 {
		parts = append(parts, <-st.messages)
	}
	if len(parts) < 2 {
		t.Fatalf("%d Staged messages; want the 6 entries split under 100 bytes", len(parts))
	}
	for i, p := range parts {
		if n := proto.Size(p); n > 100 {
			t.Errorf("Staged part %d is %d bytes, over max_message_bytes 100", i, n)
		}
		if p.GetMore() != (i < len(parts)-1) {
			t.Errorf("Staged part %d of %d has more=%v", i+1, len(parts), p.GetMore())
		}
	}
	expectEOF(t, sc.stop())
	expectMetrics(t, r, `millrace_state_refused_total{inlet="in",reason="keyless"} 1`)
}

// TestStateRefused: a Refused answer to Open ends the conversation before any process starts,
// every problem logged and named in the stream's error.
func TestStateRefused(t *testing.T) {
	st := serveState(t, &statev1.SidecarMessage{Message: &statev1.SidecarMessage_Refused{Refused: &statev1.Refused{Problems: []string{"inlet in keeps no state here", "inlet other is missing"}}}})
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	err := sc.waitEnd()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "the sidecar refused Open (inlet in keeps no state here; inlet other is missing)") {
		t.Errorf("stream ended with %v; want FAILED_PRECONDITION naming both problems", err)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "inlet other is missing") || strings.Contains(logs, `"msg":"started"`) {
		t.Errorf("bridge log lacks the problem, or started processes:\n%s", logs)
	}
}

// TestStateUnimplemented: a sidecar that does not serve millrace.state.v1.State ends the
// conversation saying so.
func TestStateUnimplemented(t *testing.T) {
	st := serveState(t, nil)
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	err := sc.waitEnd()
	want := "the sidecar on port " + strconv.Itoa(st.port) + " does not serve millrace.state.v1.State: run the millrace sidecar"
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Errorf("stream ended with %v; want FAILED_PRECONDITION saying %q", err, want)
	}
}

// TestStateMissingBatchState: a batch whose BatchState does not come within 10 s of it ends
// the conversation naming the batch; nothing of it is run or answered. The wait's clock is
// the test's.
func TestStateMissingBatchState(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in"}))
	waits := make(chan time.Duration, 1)
	fire := make(chan time.Time)
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port }, bridge.WithStateClock(func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}))
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	sc.batch(7, 2, countRec(0, "u-7"))
	select {
	case d := <-waits:
		if d != 10*time.Second {
			t.Errorf("a batch waits %s for its BatchState; want 10s", d)
		}
	case <-time.After(waitLimit):
		t.Fatal("the batch never waited for its BatchState")
	}
	close(fire)
	err := sc.waitEnd()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "batch 7 of inlet in (partition 2) has had no BatchState") {
		t.Errorf("stream ended with %v; want UNAVAILABLE naming batch 7", err)
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.all) != 0 {
		t.Errorf("the bridge sent %v for a batch without its states; want nothing", sc.all)
	}
}

// TestStateEndAtStop: a conversation that finishes on Stop half-closes its State stream (the
// sidecar reads io.EOF, the end of a process done with it, not a cancel, which it would take
// for a broken link) and the stream completes.
func TestStateEndAtStop(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in", MaxValueBytes: 1000, MaxRecordBytes: 2000}))
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	st.push(1, "u-7", `{"n":1}`)
	sc.batch(1, 0, countRec(0, "u-7"))
	if a := sc.wait(1); !a.ack {
		t.Fatalf("batch 1: %v; want Ack", a)
	}
	st.next()
	expectEOF(t, sc.stop())
	select {
	case err := <-st.ends:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the State stream ended at the sidecar with %v; want io.EOF (half-closed)", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the State stream did not end")
	}
	sc.check()
}

// TestStateEndWaitBounded: a sidecar that does not end the State stream after the bridge
// half-closed it holds the conversation's finish only until the wait's clock fires.
func TestStateEndWaitBounded(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in", MaxValueBytes: 1000, MaxRecordBytes: 2000}))
	st.linger = true
	waits := make(chan time.Duration, 1)
	fire := make(chan time.Time)
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port }, bridge.WithStateClock(func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}))
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	stopped := make(chan error, 1)
	go func() { stopped <- sc.stop() }()
	select {
	case d := <-waits:
		if d != 2*time.Second {
			t.Errorf("the bridge waits %s for the sidecar to end the State stream; want 2s", d)
		}
	case <-time.After(waitLimit):
		t.Fatal("the bridge never waited for the State stream's end")
	}
	if err := <-st.ends; !errors.Is(err, io.EOF) {
		t.Errorf("the State stream ended at the sidecar with %v; want io.EOF (half-closed)", err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("the conversation finished (%v) before the wait's clock fired, with the State stream still open", err)
	default:
	}
	close(fire)
	expectEOF(t, <-stopped)
}

// TestStateBroken: a State stream that fails ends the conversation.
func TestStateBroken(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in"}))
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	close(st.broken)
	err := sc.waitEnd()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the State stream with the sidecar broke") {
		t.Errorf("stream ended with %v; want UNAVAILABLE saying the State stream broke", err)
	}
}

// TestStatelessDialsNothing: a line without --state never dials the State port.
func TestStatelessDialsNothing(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	t.Cleanup(func() { lis.Close() })
	r := startBridge(t, "echo --in in=x.v1 --out out=y.v1", func(o *bridge.Options) { o.SidecarPort = lis.Addr().(*net.TCPAddr).Port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	sc.batch(1, 0, rec(0, []byte("k"), `{"a":1}`))
	if a := sc.wait(1); !a.ack || len(a.emits) != 1 {
		t.Fatalf("batch 1: %v; want Ack after 1 emit", a)
	}
	expectEOF(t, sc.stop())
	select {
	case <-accepted:
		t.Error("a stateless line dialled the State port")
	default:
	}
}

// TestStateDiscover: a stateful line's Spec says protocol.Version; a sidecar speaking an
// earlier version gets a log line saying why the action needs the later one; a sidecar of the
// same version none.
func TestStateDiscover(t *testing.T) {
	r := startBridge(t, stateLine)
	sc := dial(t, r.addr)
	spec, err := sc.disc.Discover(context.Background(), &flowv1.SidecarInfo{ProtocolVersion: protocol.Version})
	if err != nil || spec.GetProtocolVersion() != protocol.Version {
		t.Fatalf("Discover = %v, %v; want protocol %s", spec, err, protocol.Version)
	}
	const why = "this action keeps state (--state in), which needs a sidecar speaking"
	if strings.Contains(r.logs.String(), why) {
		t.Errorf("the bridge logs %q for a sidecar speaking %s", why, protocol.Version)
	}
	if _, err := sc.disc.Discover(context.Background(), &flowv1.SidecarInfo{ProtocolVersion: "0.9"}); err != nil {
		t.Fatal(err)
	}
	if logs := r.logs.String(); !strings.Contains(logs, why+" "+protocol.Version+"; the sidecar speaks 0.9") {
		t.Errorf("bridge log lacks %q:\n%s", why, logs)
	}
}

// TestStateOpenedWithoutInlet: an Opened that gives no limits for an inlet of the line's
// --state ends the conversation naming it.
func TestStateOpenedWithoutInlet(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "other"}))
	r := startBridge(t, stateLine, func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	if err := sc.waitEnd(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "the sidecar's Opened gives no limits for inlet in (--state in)") {
		t.Errorf("stream ended with %v; want FAILED_PRECONDITION naming inlet in", err)
	}
}

// TestStateTooLarge: Opened's max_record_bytes reaches the engine: a state that with its key
// passes it fails its record for good (dead-lettered, counted too-large) and is not staged.
func TestStateTooLarge(t *testing.T) {
	st := serveState(t, opened(&statev1.InletLimits{Inlet: "in", MaxValueBytes: 8, MaxRecordBytes: 12}))
	r := startBridge(t, "counter --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl --state in", func(o *bridge.Options) { o.SidecarPort = st.port })
	sc := dial(t, r.addr)
	sc.start(r, "conv-1", 0)
	st.open()
	st.push(1)
	sc.batch(1, 0, countRec(0, "u-7"), countRec(1, "long-key-1"))
	a := sc.wait(1)
	if !a.ack || len(a.emits) != 2 || a.emits[1].GetOutlet() != "dl" {
		t.Fatalf("batch 1: %v; want Ack after u-7's emit and long-key-1 dead-lettered", a)
	}
	if why := string(headerValue(a.emits[1].GetRecord(), bridge.HeaderError)); !strings.Contains(why, "over the 12 bytes a changelog record of inlet in may be") {
		t.Errorf("dead letter's error = %q; want the changelog record's limit", why)
	}
	if s := st.next(); entries(s) != `u-7={"n":1}` {
		t.Errorf("Staged = %s; want only u-7's", entries(s))
	}
	expectEOF(t, sc.stop())
	expectMetrics(t, r, `millrace_state_refused_total{inlet="in",reason="too-large"} 1`)
}

func headerValue(rec *flowv1.Record, key string) []byte {
	for _, h := range rec.GetHeaders() {
		if h.GetKey() == key {
			return h.GetValue()
		}
	}
	return nil
}
