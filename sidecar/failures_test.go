package sidecar_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestStreamFailures makes the first conversation fail in each way the spec lists, and checks
// that the sidecar fails the stream (the cause logged), starts a new conversation, redelivers
// from the last commit, and in the end commits everything with nothing lost.
func TestStreamFailures(t *testing.T) {
	rec := &flowv1.Record{Value: []byte("x")}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		first  func(f *fakeProcess, c *call) error // the first conversation's answer to its batch
		cause  string                              // the failure's cause, as sidecar.CauseOf names it
		logged string                              // what its error must say to a person
		// committedFirst: the first batch was legitimately acknowledged before the violation,
		// so it may be committed by the first conversation.
		committedFirst bool
		// partialWrites: the failed conversation's other emits may have been written (at
		// least once), but nothing was committed.
		partialWrites bool
	}{
		{name: "fail", cause: sidecar.CauseFailedBatch, logged: "the process failed batch 1", first: func(_ *fakeProcess, c *call) error { return c.Fail("boom") }},
		{name: "emit to an undeclared outlet", cause: sidecar.CauseProtocol, logged: "names outlet", first: func(_ *fakeProcess, c *call) error {
			if err := c.Emit("nope", rec); err != nil {
				return err
			}
			return c.Ack()
		}},
		{name: "ack for a batch never sent", cause: sidecar.CauseProtocol, logged: "an Ack for batch 999, which was never sent", first: func(_ *fakeProcess, c *call) error {
			return c.Send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Ack{Ack: &flowv1.Ack{BatchId: 999}}})
		}},
		{name: "emit for a batch never sent", cause: sidecar.CauseProtocol, logged: "an Emit for batch 999, which was never sent", first: func(_ *fakeProcess, c *call) error {
			return c.Send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 999, Outlet: "out", Record: rec}}})
		}},
		{name: "fail for a batch never sent", cause: sidecar.CauseProtocol, logged: "a Fail for batch 0, which was never sent", first: func(_ *fakeProcess, c *call) error {
			return c.Send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Fail{Fail: &flowv1.Fail{}}})
		}},
		{name: "emit after its ack", cause: sidecar.CauseProtocol, logged: "no longer in flight", committedFirst: true, first: func(_ *fakeProcess, c *call) error {
			if err := echo(c); err != nil {
				return err
			}
			return c.Emit("out", rec)
		}},
		{name: "second ack", cause: sidecar.CauseProtocol, logged: "no longer in flight", committedFirst: true, first: func(_ *fakeProcess, c *call) error {
			if err := echo(c); err != nil {
				return err
			}
			return c.Ack()
		}},
		{name: "empty message", cause: sidecar.CauseProtocol, logged: "empty message", first: func(_ *fakeProcess, c *call) error {
			return c.Send(&flowv1.FromProcess{})
		}},
		{name: "emit without a record", cause: sidecar.CauseProtocol, logged: "carries no record", first: func(_ *fakeProcess, c *call) error {
			return c.Emit("out", nil)
		}},
		{name: "process closes the stream", cause: sidecar.CauseUnreachable, logged: "closed its side of the stream without being asked", first: func(_ *fakeProcess, c *call) error {
			return errClose
		}},
		{name: "process ends the stream with an error", cause: sidecar.CauseProtocol, logged: "process crashed", first: func(_ *fakeProcess, c *call) error {
			return status.Error(codes.Internal, "process crashed")
		}},
		{name: "process unreachable", cause: sidecar.CauseUnreachable, logged: "closed the stream or became unreachable", first: func(f *fakeProcess, c *call) error {
			go func() {
				f.Stop()
				f.Restart(t)
			}()
			return nil
		}},
		{name: "emit over the message limit", cause: sidecar.CauseMessageLarge, logged: "over the message limit of 65536 bytes",
			env: map[string]string{"FLOW_MAX_MESSAGE_BYTES": "64Ki", "FLOW_INLET_IN_BATCH_MAX_BYTES": "32Ki"},
			first: func(_ *fakeProcess, c *call) error {
				return c.Emit("out", &flowv1.Record{Value: bytes.Repeat([]byte("y"), 100<<10)})
			}},
		{name: "emit over its outlet's limit", cause: sidecar.CauseMessageLarge, logged: "an emit is larger than its outlet topic accepts", partialWrites: true, first: func(_ *fakeProcess, c *call) error {
			// Larger than a default topic's max.message.bytes (about 1 MiB), even compressed,
			// and over Start.max_message_bytes: the sidecar refuses it before writing, so
			// nothing of the batch may be committed.
			if err := c.Emit("out", &flowv1.Record{Value: incompressible(2 << 20)}); err != nil {
				return err
			}
			return echo(c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			const n = 20
			b.Produce(t, records(in, 1, n)...)
			f := newProcess(t, nil)
			var mu sync.Mutex
			redelivered := int64(-1)
			f.OnBatch = func(c *call) error {
				if c.Conv == 2 {
					mu.Lock()
					if redelivered < 0 {
						redelivered = c.Batch.Records[0].Offset
					}
					mu.Unlock()
				}
				if c.Conv == 1 {
					if err := tc.first(f, c); err != nil {
						return err
					}
					// Leave the stream open: the sidecar must end it.
					<-c.Done()
					return nil
				}
				return echo(c)
			}
			e := baseEnv(t, b, f, in, out)
			for k, v := range tc.env {
				e[k] = v
			}
			r := start(t, e.config(t))
			group := e["FLOW_CONSUMER_GROUP"]
			<-f.Started
			<-f.Started // the stream failed and a new conversation began
			waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, map[int32]int64{0: n}) })
			if err := r.stop(t); err != nil {
				t.Errorf("Run() = %v; want nil", err)
			}
			// The failure's cause decides; its error is what a person reads, so it must name
			// the cause in words too.
			if got := r.failures(tc.cause); len(got) == 0 {
				t.Errorf("stream failures = %v; want one of cause %s", r.failures(""), tc.cause)
			} else if !strings.Contains(got[0].Error(), tc.logged) {
				t.Errorf("the failure %v; want it to name the cause %q", got[0], tc.logged)
			}
			starts := f.Starts()
			if len(starts) < 2 {
				t.Fatalf("conversations = %d; want a second after the failure", len(starts))
			}
			if starts[0].ConversationId == starts[1].ConversationId {
				t.Errorf("the second Start reuses conversation_id %s; want a new one", starts[0].ConversationId)
			}
			if tc.committedFirst {
				return
			}
			// Redelivered from the last commit: the second conversation's first batch starts
			// at offset 0, and every output comes from a later conversation.
			mu.Lock()
			first := redelivered
			mu.Unlock()
			if first != 0 {
				t.Errorf("the second conversation's first batch starts at offset %d; want 0 (the last commit)", first)
			}
			got := b.ReadN(t, out, n, waitTimeout)
			seen := map[string]bool{}
			for _, o := range got {
				for _, h := range o.Headers {
					if h.Key == "conv" && string(h.Value) == "1" && !tc.partialWrites {
						t.Errorf("output %q was written by the failed conversation", o.Value)
					}
				}
				seen[string(o.Value)] = true
			}
			for i := range n {
				if !seen[fmt.Sprintf("v%d!", i)] {
					t.Errorf("record %d never came out: lost", i)
				}
			}
		})
	}
}
