package testkit

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

// FakeSidecar drives a streamlet process over gRPC by hand, as the sidecar would: Discovery,
// then Run streams.
type FakeSidecar struct {
	Conn *grpc.ClientConn
}

// DialProcess connects to the streamlet process at addr, allowing messages of up to 8 MiB (twice
// the protocol's largest); the connection is closed when the test ends.
func DialProcess(t testing.TB, addr string) *FakeSidecar {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatalf("testkit: dial the process at %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &FakeSidecar{Conn: conn}
}

// Discover asks the process for its spec, waiting (within ctx) for a process still starting
// to listen.
func (s *FakeSidecar) Discover(ctx context.Context, info *flowv1.SidecarInfo) (*flowv1.Spec, error) {
	return flowv1grpc.NewDiscoveryClient(s.Conn).Discover(ctx, info, grpc.WaitForReady(true))
}

// Stream is one Run conversation.
type Stream struct {
	grpc.BidiStreamingClient[flowv1.ToProcess, flowv1.FromProcess]
}

// Run opens a Run stream, ended when ctx is.
func (s *FakeSidecar) Run(ctx context.Context) (*Stream, error) {
	st, err := flowv1grpc.NewStreamletClient(s.Conn).Run(ctx)
	if err != nil {
		return nil, err
	}
	return &Stream{st}, nil
}

// Start sends Start.
func (st *Stream) Start(m *flowv1.Start) error {
	return st.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: m}})
}

// Batch sends a Batch.
func (st *Stream) Batch(m *flowv1.Batch) error {
	return st.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: m}})
}

// Stop sends Stop with reason and half-closes the stream: the process answers what is in
// flight and ends it.
func (st *Stream) Stop(reason string) error {
	if err := st.Send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: reason}}}); err != nil {
		return err
	}
	return st.CloseSend()
}

// Bind binds each port to the topic of the same name, for a Start.
func Bind(ports []*flowv1.Port) []*flowv1.PortBinding {
	var b []*flowv1.PortBinding
	for _, p := range ports {
		b = append(b, &flowv1.PortBinding{Port: p.GetName(), Topic: p.GetName()})
	}
	return b
}
