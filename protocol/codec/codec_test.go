package codec_test

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/codec"
)

// samples are messages of the Run stream in both directions, with the shapes that matter: a
// keyless record, an empty key, headers, several records, a Start, a Fail.
func samples() []proto.Message {
	return []proto.Message{
		&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: &flowv1.Start{ConversationId: "c1", Pipeline: "p", Streamlet: "s", ConfigJson: `{"a":1}`,
			Inlets: []*flowv1.PortBinding{{Port: "in", Topic: "t-in"}}, Outlets: []*flowv1.PortBinding{{Port: "out", Topic: "t-out"}}, MaxMessageBytes: 4 << 20}}},
		&flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{BatchId: 7, Inlet: "in", Partition: 3, Records: []*flowv1.InputRecord{
			{Offset: 1, TimestampMs: 1700000000000, Record: &flowv1.Record{Value: []byte(`{"id":1}`)}},
			{Offset: 2, Record: &flowv1.Record{Key: []byte{}, Value: []byte{}, Headers: []*flowv1.Header{{Key: "h", Value: []byte{0xff}}}}},
		}}}},
		&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: "shutdown"}}},
		&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 7, Outlet: "out", Record: &flowv1.Record{Value: []byte(`{"id":1}`)}}}},
		&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 7, Outlet: "out", Record: &flowv1.Record{Key: []byte("k"), Value: []byte("v"),
			Headers: []*flowv1.Header{{Key: "a", Value: []byte("b")}, {Key: "c"}}}}}},
		&flowv1.FromProcess{Message: &flowv1.FromProcess_Ack{Ack: &flowv1.Ack{BatchId: 7}}},
		&flowv1.FromProcess{Message: &flowv1.FromProcess_Fail{Fail: &flowv1.Fail{BatchId: 7, Error: &flowv1.Error{Message: "no"}}}},
		&flowv1.FromProcess{},
	}
}

// TestRoundTrip checks that Codec writes what the protobuf runtime writes and reads back the
// same message.
func TestRoundTrip(t *testing.T) {
	c := codec.Codec{}
	for _, m := range samples() {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", m, err)
		}
		if got := data.Materialize(); string(got) != string(want) {
			t.Errorf("Marshal(%v) = %x; want %x (the protobuf runtime's)", m, got, want)
		}
		back := m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil {
			t.Fatalf("Unmarshal(%v): %v", m, err)
		}
		if !proto.Equal(back, m) {
			t.Errorf("Unmarshal(Marshal(%v)) = %v", m, back)
		}
	}
}

// TestKeyPresence checks what the protocol rests on: an absent key stays absent and an empty
// key empty, also when the message decoded into held a key before.
func TestKeyPresence(t *testing.T) {
	c := codec.Codec{}
	var m flowv1.FromProcess
	for _, key := range [][]byte{[]byte("k"), nil, {}, nil} {
		data, err := c.Marshal(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 1, Outlet: "out", Record: &flowv1.Record{Key: key, Value: []byte("v")}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		got := m.GetEmit().GetRecord().Key
		if (got == nil) != (key == nil) || string(got) != string(key) {
			t.Errorf("key %q (nil %v) decoded as %q (nil %v)", key, key == nil, got, got == nil)
		}
	}
}

// TestHeldHeaders decodes Emits with and without headers into one message, as the sidecar
// does: each decodes as the runtime decodes it, the keys and values taken from the one before
// stay as they were, and an Emit of headers named as the last one's costs one allocation (its
// bytes), its Header messages and key strings being reused.
func TestHeldHeaders(t *testing.T) {
	c := codec.Codec{}
	emit := func(hs ...*flowv1.Header) []byte {
		b, err := proto.Marshal(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 1, Outlet: "out", Record: &flowv1.Record{Value: []byte("v"), Headers: hs}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var m flowv1.FromProcess
	type kept struct{ key, value string }
	var prev []kept
	var prevHeaders []*flowv1.Header
	for i, b := range [][]byte{
		emit(&flowv1.Header{Key: "a", Value: []byte("1")}, &flowv1.Header{Key: "b", Value: []byte("2")}),
		emit(&flowv1.Header{Key: "a", Value: []byte("3")}),
		emit(),
		emit(&flowv1.Header{Value: []byte("no key")}, &flowv1.Header{Key: "a"}, &flowv1.Header{Key: "c", Value: []byte("5")}),
		emit(&flowv1.Header{Key: "x", Value: []byte("6")}, &flowv1.Header{Key: "a", Value: []byte("7")}),
	} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
		want := new(flowv1.FromProcess)
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&m, want) {
			t.Errorf("emit %d decoded into a held Emit as %v; want %v", i, &m, want)
		}
		for j, k := range prev {
			if h := prevHeaders[j]; h.Key != k.key || string(h.Value) != k.value {
				t.Errorf("after emit %d, header %d of the emit before reads %q=%q; want %q=%q", i, j, h.Key, h.Value, k.key, k.value)
			}
		}
		prev, prevHeaders = nil, nil
		for _, h := range m.GetEmit().GetRecord().GetHeaders() {
			prev = append(prev, kept{h.Key, string(h.Value)})
			prevHeaders = append(prevHeaders, &flowv1.Header{Key: h.Key, Value: h.Value}) // the fields, as the sidecar keeps them
		}
	}
	b := emit(&flowv1.Header{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")})
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(b)} // read again and again (a SliceBuffer is not freed)
	if n := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("decoding an Emit with one header into a held one allocates %.0f times; want 1 (the record's bytes)", n)
	}
}

// FuzzUnmarshal checks that Codec accepts and refuses exactly what the protobuf runtime does,
// and decodes the same message, for any bytes.
func FuzzUnmarshal(f *testing.F) {
	for _, m := range samples() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0x12, 0x01, 0xff}) // an invalid UTF-8 outlet
	c := codec.Codec{}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newMsg := range []func() proto.Message{func() proto.Message { return new(flowv1.ToProcess) }, func() proto.Message { return new(flowv1.FromProcess) }} {
			want, got := newMsg(), newMsg()
			werr := proto.Unmarshal(b, want)
			gerr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T from %x: the runtime says %v, Codec says %v", want, b, werr, gerr)
			}
			if werr == nil && !proto.Equal(want, got) {
				t.Fatalf("%T from %x: the runtime decodes %v, Codec %v", want, b, want, got)
			}
		}
		// Decoding into a message that holds an Emit already (as the sidecar does) changes
		// nothing either.
		want, got := new(flowv1.FromProcess), samples()[4].(*flowv1.FromProcess)
		got = proto.Clone(got).(*flowv1.FromProcess)
		werr := proto.Unmarshal(b, want)
		gerr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}, got)
		if (werr == nil) != (gerr == nil) || werr == nil && !proto.Equal(want, got) {
			t.Fatalf("FromProcess from %x into a held Emit: the runtime says %v, %v; Codec %v, %v", b, werr, want, gerr, got)
		}
	})
}
