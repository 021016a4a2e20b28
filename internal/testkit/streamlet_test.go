package testkit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// TestStreamlet: the fake streamlet answers Discover with its Spec, echoes a batch by default,
// keeps what it was sent with Record, ends the stream after Stop and the half-close, and Serve
// returns nil once its context ends.
func TestStreamlet(t *testing.T) {
	spec := &flowv1.Spec{ProtocolVersion: "1.0"}
	f := &testkit.Streamlet{Spec: spec, Record: true, Started: make(chan int, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, lis) }()

	s := testkit.DialProcess(t, lis.Addr().String())
	if got, err := s.Discover(context.Background(), &flowv1.SidecarInfo{}); err != nil || got.GetProtocolVersion() != "1.0" {
		t.Fatalf("Discover = %v, %v; want the Spec", got, err)
	}
	st, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(&flowv1.Start{ConversationId: "c"}); err != nil {
		t.Fatal(err)
	}
	rec := &flowv1.InputRecord{Offset: 3, Record: &flowv1.Record{Key: []byte("k"), Value: []byte("v")}}
	if err := st.Batch(&flowv1.Batch{BatchId: 1, Records: []*flowv1.InputRecord{rec}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Stop("done"); err != nil {
		t.Fatal(err)
	}
	var got []*flowv1.FromProcess
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv = %v; want the echo, then the end of the stream", err)
		}
		got = append(got, m)
	}
	if len(got) != 2 || string(got[0].GetEmit().GetRecord().GetValue()) != "v" || got[0].GetEmit().GetOutlet() != "out" || got[1].GetAck().GetBatchId() != 1 {
		t.Errorf("answers = %v; want the record emitted to out, then Ack of batch 1", got)
	}
	if conv := <-f.Started; conv != 1 || f.Conversations() != 1 || len(f.Starts()) != 1 || len(f.Batches()) != 1 || f.Stops() != 1 {
		t.Errorf("conversation %d; kept %d conversations, %d starts, %d batches, %d stops; want 1 of each", conv, f.Conversations(), len(f.Starts()), len(f.Batches()), f.Stops())
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after its context ended = %v; want nil", err)
	}
}
