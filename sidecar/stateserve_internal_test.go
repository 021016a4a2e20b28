package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// sendServer is a State server whose Attach sends the entries it is given with
// sendBatchState, as the sender does, under a message limit.
type sendServer struct {
	statev1.UnimplementedStateServer
	limit   int
	entries []*statev1.Entry
	err     chan error
}

func (s *sendServer) Attach(stream statev1.State_AttachServer) error {
	l := &stateLink{stream: stream, maxMessageBytes: s.limit}
	s.err <- l.sendBatchState(7, s.entries)
	return nil
}

// TestSendBatchStateSplits sends a batch's states over real gRPC under a small message
// limit: each message stays under it, `more` is set on every message but the last, no entry
// is split, and the entries arrive whole and in order; a batch without states is one message.
func TestSendBatchStateSplits(t *testing.T) {
	const limit = 1000
	var many []*statev1.Entry
	for i := range 40 {
		many = append(many, &statev1.Entry{Key: []byte(fmt.Sprintf("key-%d", i)), Value: bytes.Repeat([]byte("v"), i*7)})
	}
	many = append(many, &statev1.Entry{Key: []byte("deleted")}) // no value: none stored
	type testCase struct {
		name     string
		entries  []*statev1.Entry
		messages int // at least
	}
	cases := []testCase{
		{name: "none", entries: nil, messages: 1},
		{name: "one", entries: many[:1], messages: 1},
		{name: "many", entries: many, messages: 6},
		{name: "one as large as a message allows", entries: []*statev1.Entry{{Key: []byte("k"), Value: make([]byte, limit-20)}}, messages: 1},
	}
	// Entries of one size each, so that some message fills up to the limit exactly.
	for v := 0; v < 130; v += 3 {
		var es []*statev1.Entry
		for i := range 30 {
			es = append(es, &statev1.Entry{Key: []byte{byte(i)}, Value: make([]byte, v)})
		}
		cases = append(cases, testCase{name: fmt.Sprintf("values of %d bytes", v), entries: es, messages: 1})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := &sendServer{limit: limit, entries: tc.entries, err: make(chan error, 1)}
			msgs := attachAndRead(t, srv)
			if err := <-srv.err; err != nil {
				t.Fatalf("sendBatchState = %v", err)
			}
			if len(msgs) < tc.messages {
				t.Errorf("%d messages; want at least %d", len(msgs), tc.messages)
			}
			var got []*statev1.Entry
			for i, m := range msgs {
				if n := proto.Size(m); n > limit {
					t.Errorf("message %d is %d bytes; want at most %d", i, n, limit)
				}
				bs := m.GetBatchState()
				if bs.GetBatchId() != 7 || bs.GetMore() != (i < len(msgs)-1) {
					t.Errorf("message %d: batch %d more %v; want batch 7, more on all but the last", i, bs.GetBatchId(), bs.GetMore())
				}
				got = append(got, bs.GetEntries()...)
			}
			if len(got) != len(tc.entries) {
				t.Fatalf("%d entries arrived; want %d", len(got), len(tc.entries))
			}
			for i := range got {
				if !proto.Equal(got[i], tc.entries[i]) {
					t.Errorf("entry %d = %v; want %v", i, got[i], tc.entries[i])
				}
			}
		})
	}
	t.Run("an entry over a message", func(t *testing.T) {
		srv := &sendServer{limit: limit, entries: []*statev1.Entry{many[0], {Key: []byte("k"), Value: make([]byte, limit)}}, err: make(chan error, 1)}
		msgs := attachAndRead(t, srv)
		err := <-srv.err
		if !errors.Is(err, errStreamFailed) || causeOf(err) != causeMessageLarge {
			t.Errorf("sendBatchState = %v; want a stream failure, message too large", err)
		}
		if len(msgs) != 0 {
			t.Errorf("%d messages sent; want none before the failure", len(msgs))
		}
	})
}

// attachAndRead serves srv on loopback, opens Attach and returns the messages it sends
// until its stream ends.
func attachAndRead(t *testing.T, srv statev1.StateServer) []*statev1.SidecarMessage {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	statev1.RegisterStateServer(gs, srv)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := statev1.NewStateClient(conn).Attach(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*statev1.SidecarMessage
	for {
		m, err := stream.Recv()
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}
