package bridge

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// holdServer is a State server that holds each stream open until the client ends it.
type holdServer struct {
	statev1.UnimplementedStateServer
}

func (holdServer) Attach(stream statev1.State_AttachServer) error {
	<-stream.Context().Done()
	return nil
}

// TestStateLinkCloseWaitsForReceive: close returns only once the receive loop has ended
// (the stream's cancel makes its Recv fail), so no goroutine of the link outlives it.
func TestStateLinkCloseWaitsForReceive(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	statev1.RegisterStateServer(gs, holdServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := statev1.NewStateClient(conn).Attach(sctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &conversation{unhealthy: make(chan error, 1)}
	l := &stateLink{c: c, conn: conn, stream: stream, cancel: cancel, broken: make(chan struct{}),
		partial: map[uint64]*batchStates{}, got: map[uint64]*batchStates{}, waiting: map[uint64]chan *batchStates{}}
	l.startReceive()
	l.close()
	select {
	case <-l.received:
	default:
		t.Fatal("close() returned while the receive loop still runs")
	}
	select {
	case <-l.broken:
	default:
		t.Error("close() returned before the receive loop recorded the stream's end")
	}
	l.close() // a second close is harmless
}
