package sidecar_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// heldStateful is a stateful sidecar whose fake process holds each batch until the test
// closes answered, then echoes it; its State stream is the test's (attachOpen).
type heldStateful struct {
	*stateful
	held     chan *call
	answered chan struct{}
}

func startHeldStateful(t *testing.T) *heldStateful {
	t.Helper()
	h := &heldStateful{held: make(chan *call, 1), answered: make(chan struct{})}
	b := newBroker(t)
	st := &stateful{b: b, in: b.Topic(t, "in", 2), out: b.Topic(t, "out", 1)}
	st.changelog = b.Topic(t, "state", 2, "cleanup.policy", "compact")
	st.f = newProcess(t, func(c *call) error {
		h.held <- c
		select {
		case <-h.answered:
		case <-c.Done():
			return nil
		}
		return echo(c)
	})
	st.f.Spec = statefulSpec()
	st.f.Async = true // Stop is read while a batch is held
	st.e = statefulEnv(t, b, st.f, st.in, st.out, st.changelog)
	st.r = start(t, st.e.config(t))
	h.stateful = st
	return h
}

// attachOpen opens the State service for the first conversation as the bridge does, and
// returns the stream with what cancels it.
func (h *heldStateful) attachOpen(t *testing.T) (statev1.State_AttachClient, context.CancelFunc) {
	t.Helper()
	id := h.conversationID(t, 1)
	conn, err := grpc.NewClient("passthrough:///127.0.0.1:"+h.e["FLOW_SIDECAR_PORT"], grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	if got, err := open(t, stream, id, "in"); err != nil || got.GetOpened() == nil {
		t.Fatalf("Open = %v, %v; want Opened", got, err)
	}
	return stream, cancel
}

// heldBatch produces one keyed record and returns its batch, held at the process.
func (h *heldStateful) heldBatch(t *testing.T) *call {
	t.Helper()
	h.b.Produce(t, &kgo.Record{Topic: h.in, Partition: 0, Key: []byte("k"), Value: []byte("v")})
	select {
	case c := <-h.held:
		return c
	case <-time.After(waitTimeout):
		t.Fatalf("no batch at the process\n%s", h.r.logs.String())
		return nil
	}
}

// stopAtProcess stops the sidecar and returns, once Stop is at the process, where Run's
// error will be.
func (h *heldStateful) stopAtProcess(t *testing.T) <-chan error {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- h.r.stop(t) }()
	waitFor(t, "Stop at the process", func() bool { return h.f.Stops() == 1 })
	return stopped
}

func sendStaged(t *testing.T, stream statev1.State_AttachClient, id uint64) {
	t.Helper()
	msg := &statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: id,
		Entries: []*statev1.Entry{{Key: []byte("k"), Value: []byte("1")}}}}}
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
}

// TestStateEndAtStop: once Stop is sent, the process ends its State stream as it finishes,
// half-closed or canceled (whichever end of its two streams the sidecar reads first): with
// every Staged in, that is a graceful end, no stream failure, and the batch is committed.
func TestStateEndAtStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(statev1.State_AttachClient, context.CancelFunc) error
	}{
		{"half-closed", func(s statev1.State_AttachClient, _ context.CancelFunc) error { return s.CloseSend() }},
		{"canceled", func(_ statev1.State_AttachClient, cancel context.CancelFunc) error { cancel(); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHeldStateful(t)
			stream, cancel := h.attachOpen(t)
			c := h.heldBatch(t)
			sendStaged(t, stream, c.Batch.BatchId)
			stopped := h.stopAtProcess(t)
			if err := tc.end(stream, cancel); err != nil {
				t.Fatal(err)
			}
			close(h.answered)
			if err := <-stopped; err != nil {
				t.Errorf("Run() = %v; want nil", err)
			}
			if fs := h.r.failures(""); len(fs) != 0 {
				t.Errorf("stream failures = %v; want none (the State stream ended after Stop, every Staged in)", fs)
			}
			if got := committed(t, h.b, h.e["FLOW_CONSUMER_GROUP"], h.in); got[0] != 1 {
				t.Errorf("committed = %v; want partition 0 at 1 (the batch answered after Stop)", got)
			}
		})
	}
}

// TestStateEndAwaitingStaged: a State stream ended after Stop while a batch still waits for
// its Staged fails the conversation, and nothing of the batch is committed.
func TestStateEndAwaitingStaged(t *testing.T) {
	h := startHeldStateful(t)
	stream, _ := h.attachOpen(t)
	h.heldBatch(t)
	stopped := h.stopAtProcess(t)
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a stream failure", func() bool { return len(h.r.failures(sidecar.CauseUnreachable)) > 0 })
	close(h.answered)
	if err := <-stopped; err != nil {
		t.Errorf("Run() = %v; want nil (a shutdown)", err)
	}
	if fs := h.r.failures(sidecar.CauseUnreachable); !errors.Is(fs[0], io.EOF) {
		t.Errorf("stream failure = %v; want the State stream's end (io.EOF) with a Staged outstanding", fs[0])
	}
	if got := committed(t, h.b, h.e["FLOW_CONSUMER_GROUP"], h.in); len(got) != 0 {
		t.Errorf("committed = %v; want nothing (the batch's Staged never came)", got)
	}
}

// TestStateCanceledMidConversation: a State stream canceled before Stop (a process gone, a
// reset) fails the conversation, and the sidecar starts another.
func TestStateCanceledMidConversation(t *testing.T) {
	h := startHeldStateful(t)
	_, cancel := h.attachOpen(t)
	cancel()
	h.conversationID(t, 2)
	if fs := h.r.failures(sidecar.CauseUnreachable); len(fs) != 1 {
		t.Errorf("stream failures = %v; want one: the State stream broke", fs)
	}
}
