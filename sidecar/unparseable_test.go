package sidecar_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/sidecar"
)

// rawCodec passes bytes through untouched, so a test server can send what no protobuf
// encoder would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestUnparseableMessage: a process that answers a batch with bytes that are not a
// FromProcess message fails the stream, and the sidecar says it could not parse it.
func TestUnparseableMessage(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	spec, err := proto.Marshal(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan struct{}, 100)
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var msg []byte
		switch method {
		case "/ankka.flow.v1.Discovery/Discover":
			if err := stream.RecvMsg(&msg); err != nil {
				return err
			}
			return stream.SendMsg(&spec)
		case "/ankka.flow.v1.Streamlet/Run":
			runs <- struct{}{}
			for range 2 { // Start, then the first batch
				if err := stream.RecvMsg(&msg); err != nil {
					return err
				}
			}
			junk := []byte{0xff, 0xff, 0xff, 0xff}
			if err := stream.SendMsg(&junk); err != nil {
				return err
			}
			<-stream.Context().Done()
			return nil
		}
		return nil
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	f := &fakeProcess{Addr: lis.Addr().String()}
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 1, 3)...)
	r := start(t, e.config(t))
	<-runs
	<-runs // the first stream failed, and a second conversation began
	r.stop(t)
	if got := r.failures(sidecar.CauseProtocol); len(got) == 0 {
		t.Errorf("stream failures = %v; want one of cause %s (a message the sidecar cannot parse)", r.failures(""), sidecar.CauseProtocol)
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); len(got) != 0 {
		t.Errorf("committed = %v; want nothing", got)
	}
}
