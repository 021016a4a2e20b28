package sidecar_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/internal/testkit"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// stateful is a running sidecar whose inlet "in" keeps state, with its fake process (speaking
// 1.1) and the topics.
type stateful struct {
	b                  *testkit.Broker
	f                  *fakeProcess
	e                  env
	r                  *running
	in, out, changelog string
}

// startStateful runs a sidecar keeping state for inlet "in" (partitions of its topic, and of a
// compacted changelog with configs), tune applied before Run.
func startStateful(t *testing.T, onBatch func(*call) error, tune func(*sidecar.Sidecar), configs ...string) *stateful {
	t.Helper()
	b := newBroker(t)
	st := &stateful{b: b, in: b.Topic(t, "in", 2), out: b.Topic(t, "out", 1)}
	st.changelog = b.Topic(t, "state", 2, append([]string{"cleanup.policy", "compact"}, configs...)...)
	st.f = newProcess(t, onBatch)
	st.f.Spec = statefulSpec()
	st.e = statefulEnv(t, b, st.f, st.in, st.out, st.changelog)
	st.r = startTuned(t, st.e.config(t), tune)
	return st
}

// attach is the test process's State client: it dials the sidecar's State service and opens
// Attach, as the bridge does after Start.
func (st *stateful) attach(t *testing.T) statev1.State_AttachClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///127.0.0.1:"+st.e["FLOW_SIDECAR_PORT"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := statev1.NewStateClient(conn).Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// open sends Open for conversation id with inlets (each at max-bytes 64 KiB) and returns the
// answer.
func open(t *testing.T, stream statev1.State_AttachClient, id string, inlets ...string) (*statev1.SidecarMessage, error) {
	t.Helper()
	msg := &statev1.Open{ConversationId: id}
	for _, in := range inlets {
		msg.Inlets = append(msg.Inlets, &statev1.InletState{Inlet: in, MaxValueBytes: 64 << 10})
	}
	if err := stream.Send(&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Open{Open: msg}}); err != nil {
		t.Fatal(err)
	}
	return stream.Recv()
}

// conversationID waits for the n-th Start and returns its conversation id.
func (st *stateful) conversationID(t *testing.T, n int) string {
	t.Helper()
	for got := 0; got < n; {
		select {
		case got = <-st.f.Started:
		case err := <-st.r.done:
			t.Fatalf("the sidecar stopped: %v\n%s", err, st.r.logs.String())
		case <-time.After(waitTimeout):
			t.Fatalf("no Start %d", n)
		}
	}
	return st.f.Starts()[n-1].GetConversationId()
}

func TestStateOpened(t *testing.T) {
	for _, tc := range []struct {
		name          string
		configs       []string
		value, record uint32
	}{
		{name: "default changelog", value: 64 << 10, record: 1048588 - 65 - 64},
		// The value limit falls to what the topic accepts; the record's follows the topic.
		{name: "max_value_bytes over the topic's", configs: []string{"max.message.bytes", "20000"}, value: 20000 - 65 - 64, record: 20000 - 65 - 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := startStateful(t, echo, nil, tc.configs...)
			id := st.conversationID(t, 1)
			stream := st.attach(t)
			got, err := open(t, stream, id, "in")
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			opened := got.GetOpened()
			if opened == nil || len(opened.GetInlets()) != 1 {
				t.Fatalf("answer to Open = %v; want Opened with inlet in", got)
			}
			l := opened.GetInlets()[0]
			if l.GetInlet() != "in" || l.GetChangelogTopic() != st.changelog || l.GetMaxValueBytes() != tc.value || l.GetMaxRecordBytes() != tc.record || opened.GetMaxMessageBytes() != 4<<20 {
				t.Errorf("Opened = %v; want inlet in, changelog %s, max_value_bytes %d, max_record_bytes %d, max_message_bytes %d", opened, st.changelog, tc.value, tc.record, 4<<20)
			}
			// The conversation's end ends the State stream.
			if err := st.r.stop(t); err != nil {
				t.Errorf("Run() = %v; want nil", err)
			}
			if _, err := stream.Recv(); err == nil {
				t.Errorf("the State stream outlived the conversation")
			}
		})
	}
}

// TestStateOpenAnotherConversation: an Open naming another conversation is refused with
// FAILED_PRECONDITION and changes nothing (nor does a stream that begins with something else):
// the live conversation's Open is accepted after it.
func TestStateOpenAnotherConversation(t *testing.T) {
	st := startStateful(t, echo, nil)
	id := st.conversationID(t, 1)
	_, err := open(t, st.attach(t), "not-"+id, "in")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "the live one is \""+id+"\"") {
		t.Fatalf("Open(another conversation) = %v; want FAILED_PRECONDITION naming the live one", err)
	}
	// A stream that does not begin with Open is ended, and changes nothing either.
	first := st.attach(t)
	if err := first.Send(&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the first message of State.Attach is Open") {
		t.Fatalf("a Staged first = %v; want INVALID_ARGUMENT naming Open", err)
	}
	got, err := open(t, st.attach(t), id, "in")
	if err != nil || got.GetOpened() == nil {
		t.Fatalf("Open(live conversation) = %v, %v; want Opened", got, err)
	}
	if n := st.r.sc.Conversations(); n != 1 {
		t.Errorf("conversations = %d; want the first still live", n)
	}
	// A second Open of the same conversation is refused too.
	if _, err := open(t, st.attach(t), id, "in"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a second Open = %v; want FAILED_PRECONDITION", err)
	}
}

// TestStateOpenRefused: inlets on one side only are refused with every problem, reported to
// the process too, and the sidecar stops as after a refused discovery.
func TestStateOpenRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inlets []string
		want   []string
	}{
		{name: "stateful in the deployment only", inlets: nil, want: []string{"the deployment keeps state for inlet in (FLOW_INLET_IN_STATE_TOPIC=", "--state in, or unset the variable"}},
		{name: "an unknown inlet", inlets: []string{"in", "orders"}, want: []string{`Open names inlet "orders", which the conversation does not bind (inlets: in)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := startStateful(t, echo, nil)
			id := st.conversationID(t, 1)
			got, err := open(t, st.attach(t), id, tc.inlets...)
			if err != nil || got.GetRefused() == nil {
				t.Fatalf("answer to Open = %v, %v; want Refused", got, err)
			}
			problems := strings.Join(got.GetRefused().GetProblems(), "\n")
			var runErr error
			select {
			case runErr = <-st.r.done:
				close(st.r.done)
			case <-time.After(waitTimeout):
				t.Fatal("the sidecar still runs after refusing Open")
			}
			if !errors.Is(runErr, sidecar.ErrRefused) {
				t.Errorf("Run() = %v; want ErrRefused", runErr)
			}
			reports := st.f.Reports()
			if len(reports) != 1 {
				t.Fatalf("ReportError calls = %d; want 1", len(reports))
			}
			for _, w := range tc.want {
				if !strings.Contains(problems, w) || !strings.Contains(reports[0].GetProblems()[0].GetMessage()+reports[0].String(), w) || !strings.Contains(runErr.Error(), w) {
					t.Errorf("Refused %q, ReportError %v, Run() %v; want each to name %q", problems, reports[0], runErr, w)
				}
			}
			if st.r.sc.Conversations() != 1 {
				t.Errorf("conversations = %d; want no other", st.r.sc.Conversations())
			}
		})
	}
}

// TestStateNoOpen: a process that does not open the State service within 10 s of Start (on the
// sidecar's clock) fails the stream, naming the port; the next conversation starts over.
func TestStateNoOpen(t *testing.T) {
	fire := make(chan time.Time)
	st := startStateful(t, echo, func(sc *sidecar.Sidecar) {
		sidecar.SetClock(sc, time.Now, func(d time.Duration) <-chan time.Time {
			if d == 10*time.Second {
				return fire
			}
			return time.After(d)
		})
	})
	st.conversationID(t, 1)
	fire <- time.Now()
	id := st.conversationID(t, 2)
	want := "the process speaks 1.1 but did not open the State service on port " + st.e["FLOW_SIDECAR_PORT"] + " within 10s"
	if fs := st.r.failures(sidecar.CauseUnreachable); len(fs) != 1 || !strings.Contains(fs[0].Error(), want) {
		t.Fatalf("failures = %v; want one saying %q", fs, want)
	}
	// The second conversation opens in time: its clock does not fail it.
	if got, err := open(t, st.attach(t), id, "in"); err != nil || got.GetOpened() == nil {
		t.Fatalf("Open = %v, %v; want Opened", got, err)
	}
	select { // the clock may move on now: an open conversation is not failed by it
	case fire <- time.Now():
	default:
	}
	if err := st.r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	if n := len(st.r.failures("")); n != 1 {
		t.Errorf("failures = %d; want only the first conversation's", n)
	}
}

// TestStateBrokenAttach: a State stream the process breaks fails the conversation.
func TestStateBrokenAttach(t *testing.T) {
	st := startStateful(t, echo, nil)
	id := st.conversationID(t, 1)
	stream := st.attach(t)
	if got, err := open(t, stream, id, "in"); err != nil || got.GetOpened() == nil {
		t.Fatalf("Open = %v, %v; want Opened", got, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	st.conversationID(t, 2)
	if fs := st.r.failures(sidecar.CauseUnreachable); len(fs) == 0 || !strings.Contains(fs[0].Error(), "closed its State stream") {
		t.Errorf("failures = %v; want the State stream's end", fs)
	}
}

// TestStagedOverLimits: a Staged entry over the limits sent in Opened fails the stream before
// anything of its batch is written, naming topic, key length and limit.
func TestStagedOverLimits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configs    []string // the changelog's
		key, value int
		want       string
	}{
		{name: "value", key: 3, value: 64<<10 + 1, want: "key 3 bytes and value 65537 bytes, for at most 65536 bytes of value"},
		// The changelog accepts records of 19,871 bytes: so does a value alone, not with its key.
		{name: "key and value", configs: []string{"max.message.bytes", "20000"}, key: 100, value: 19800, want: "key 100 bytes and value 19800 bytes, for at most 19871 bytes of value (max_value_bytes) and 19871 of key and value"},
		{name: "key", key: 32761, value: 1, want: "has a key of 32761 bytes, over the 32760 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batches := make(chan *call, 10)
			release := make(chan struct{})
			st := startStateful(t, func(c *call) error {
				batches <- c
				select {
				case <-release:
				case <-c.Done():
				}
				return nil
			}, nil, tc.configs...)
			id := st.conversationID(t, 1)
			stream := st.attach(t)
			if got, err := open(t, stream, id, "in"); err != nil || got.GetOpened() == nil {
				t.Fatalf("Open = %v, %v; want Opened", got, err)
			}
			go func() { // the BatchStates the sidecar sends
				for {
					if _, err := stream.Recv(); err != nil {
						return
					}
				}
			}()
			st.b.Produce(t, records(st.in, 1, 1)...)
			var c *call
			select {
			case c = <-batches:
			case <-time.After(waitTimeout):
				t.Fatal("no batch")
			}
			defer close(release)
			big := &statev1.Entry{Key: make([]byte, tc.key), Value: make([]byte, tc.value)}
			if err := stream.Send(&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: c.Batch.GetBatchId(), Entries: []*statev1.Entry{big}}}}); err != nil {
				t.Fatal(err)
			}
			st.conversationID(t, 2)
			fs := st.r.failures(sidecar.CauseMessageLarge)
			if len(fs) != 1 || !strings.Contains(fs[0].Error(), tc.want) || !strings.Contains(fs[0].Error(), "topic "+st.in) || !strings.Contains(fs[0].Error(), "changelog "+st.changelog) {
				t.Errorf("failures = %v; want one naming %q, the topic and the changelog", fs, tc.want)
			}
			if n := st.b.Count(t, st.out); n != 0 {
				t.Errorf("%d emits written; want none", n)
			}
		})
	}
}

// TestStagedMoreThanKeys: a process that keeps setting more on a batch's Staged fails the
// stream once its entries pass the batch's distinct keys, rather than growing what the
// sidecar holds for the batch; nothing of the batch is written.
func TestStagedMoreThanKeys(t *testing.T) {
	batches := make(chan *call, 10)
	release := make(chan struct{})
	st := startStateful(t, func(c *call) error {
		batches <- c
		select {
		case <-release:
		case <-c.Done():
		}
		return nil
	}, nil)
	id := st.conversationID(t, 1)
	stream := st.attach(t)
	if got, err := open(t, stream, id, "in"); err != nil || got.GetOpened() == nil {
		t.Fatalf("Open = %v, %v; want Opened", got, err)
	}
	go func() { // the BatchStates the sidecar sends
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	st.b.Produce(t, &kgo.Record{Topic: st.in, Key: []byte("k1"), Value: []byte("1")})
	var c *call
	select {
	case c = <-batches:
	case <-time.After(waitTimeout):
		t.Fatal("no batch")
	}
	defer close(release)
	for range 2 {
		m := &statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: c.Batch.GetBatchId(), More: true,
			Entries: []*statev1.Entry{{Key: []byte("k1"), Value: []byte("1")}}}}}
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	st.conversationID(t, 2)
	const want = "brings 2 entries, more than the batch's 1 distinct keys"
	if fs := st.r.failures(sidecar.CauseProtocol); len(fs) != 1 || !strings.Contains(fs[0].Error(), want) || !strings.Contains(fs[0].Error(), "topic "+st.in) {
		t.Errorf("protocol failures = %v; want one naming %q and the topic", fs, want)
	}
	if n := st.b.Count(t, st.changelog); n != 0 {
		t.Errorf("%d changelog records written; want none", n)
	}
}

// TestStatePortInUse: a deployment keeping state stops at start when its port is taken,
// naming the variable; one keeping none never binds it.
func TestStatePortInUse(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)

	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	changelog := b.Topic(t, "state", 1, "cleanup.policy", "compact")
	f := newProcess(t, echo)
	f.Spec = statefulSpec()
	e := statefulEnv(t, b, f, in, out, changelog)
	e["FLOW_SIDECAR_PORT"] = port
	err = refusedAtStart(t, e, f)
	if err == nil || !strings.Contains(err.Error(), "FLOW_SIDECAR_PORT="+port) || !strings.Contains(err.Error(), "State service") {
		t.Errorf("Run() = %v; want it to name FLOW_SIDECAR_PORT=%s", err, port)
	}

	g := newProcess(t, echo)
	e = baseEnv(t, b, g, in, out)
	e["FLOW_SIDECAR_PORT"] = port
	start(t, e.config(t))
	select {
	case <-g.Started:
	case <-time.After(waitTimeout):
		t.Fatal("a stateless deployment did not start with FLOW_SIDECAR_PORT taken")
	}
}

// TestDiscoveryStateMatrix: the rows of docs/state.md's version matrix that refuse at
// discovery, each naming the way out, reported to the process and logged.
func TestDiscoveryStateMatrix(t *testing.T) {
	b := newBroker(t)
	for _, tc := range []struct {
		name    string
		sidecar string // the version the sidecar speaks
		process string
		keeps   bool // the deployment keeps state
		want    []string
	}{
		{name: "1.0 sidecar, 1.1 process", sidecar: "1.0", process: "1.1",
			want: []string{"the process speaks protocol 1.1, later than 1.0, which the sidecar speaks: upgrade the sidecar"}},
		{name: "1.1 sidecar, 1.0 process, deployment keeps state", sidecar: "1.1", process: "1.0", keeps: true,
			want: []string{"the deployment keeps state for inlet in (FLOW_INLET_IN_STATE_TOPIC=", "but the process speaks 1.0 and takes none: deploy the action with --state in, or unset the variable"}},
		{name: "1.1 sidecar, 1.1 process, deployment keeps none", sidecar: "1.1", process: "1.1",
			want: []string{"the process speaks 1.1 and keeps state, but this deployment declares no changelog: set FLOW_INLET_<PORT>_STATE_TOPIC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			f := newProcess(t, echo)
			f.Spec.ProtocolVersion = tc.process
			e := baseEnv(t, b, f, in, out)
			if tc.keeps {
				e = statefulEnv(t, b, f, in, out, b.Topic(t, "state", 1, "cleanup.policy", "compact"))
			}
			r := startTuned(t, e.config(t), func(sc *sidecar.Sidecar) { sidecar.SetProtocolVersion(sc, tc.sidecar) })
			report, err := refusedAtDiscovery(t, r, f)
			for _, w := range tc.want {
				if !strings.Contains(report.String(), w) || !strings.Contains(err.Error(), w) {
					t.Errorf("ReportError %v, Run() %v; want both to name %q", report, err, w)
				}
			}
			if len(r.records.Attrs("discovery refused the streamlet process")) != len(report.GetProblems()) {
				t.Errorf("each problem is logged: %v", r.records.Attrs("discovery refused the streamlet process"))
			}
		})
	}
}

// TestDiscoveryOtherMajorKeepsNoState: a version of another major says nothing of state, so
// a sidecar and a process both speaking 2.1, in a deployment that keeps none, are not refused
// as "keeping state" (another major is the version check's to judge, against the sidecar's).
func TestDiscoveryOtherMajorKeepsNoState(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	f.Spec.ProtocolVersion = "2.1"
	e := baseEnv(t, b, f, in, out)
	startTuned(t, e.config(t), func(sc *sidecar.Sidecar) { sidecar.SetProtocolVersion(sc, "2.1") })
	select {
	case <-f.Started:
	case <-time.After(waitTimeout):
		t.Fatal("a 2.1 process with a 2.1 sidecar and no changelog did not start")
	}
}
