package codec_test

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/codec"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
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
// bytes) from a frame shared or pooled, none from a frame of its own, its Header messages and
// key strings being reused.
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
	for _, tc := range []struct {
		frame []byte
		want  float64
	}{{slices.Clip(b), 0}, {append(slices.Clip(b), 0)[:len(b)], 1}} {
		data := mem.BufferSlice{mem.SliceBuffer(tc.frame)} // read again and again (a SliceBuffer is not freed)
		if n := testing.AllocsPerRun(100, func() {
			if err := c.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
		}); n != tc.want {
			t.Errorf("decoding an Emit with one header into a held one, %d bytes of frame after it, allocates %.0f times; want %.0f", cap(tc.frame)-len(tc.frame), n, tc.want)
		}
	}
}

// TestKeptFrames checks which frames an Emit's bytes stay slices of: a SliceBuffer that ends
// with the message (gRPC's own frame of 1 KiB or less), and nothing else — not a frame with
// more after the message, nor a pooled buffer, which gRPC hands back for reuse.
func TestKeptFrames(t *testing.T) {
	c := codec.Codec{}
	wire, err := proto.Marshal(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 1, Outlet: "out", Record: &flowv1.Record{Key: []byte("k"), Value: []byte("value"),
		Headers: []*flowv1.Header{{Key: "h", Value: []byte("hv")}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	pooled := codec.Pool.Get(len(wire))
	copy(*pooled, wire)
	for _, tc := range []struct {
		name  string
		frame []byte
		data  mem.BufferSlice
		kept  bool
	}{
		{"a frame of its own", nil, nil, true},
		{"a frame with more after the message", nil, nil, false},
		{"a pooled buffer", *pooled, mem.BufferSlice{mem.NewBuffer(pooled, codec.Pool)}, false},
	} {
		switch tc.name {
		case "a frame of its own":
			tc.frame = slices.Clone(wire)[:len(wire):len(wire)]
			tc.data = mem.BufferSlice{mem.SliceBuffer(tc.frame)}
		case "a frame with more after the message":
			tc.frame = append(slices.Clone(wire), 0xff)[:len(wire)]
			tc.data = mem.BufferSlice{mem.SliceBuffer(tc.frame)}
		}
		var m flowv1.FromProcess
		if err := c.Unmarshal(tc.data, &m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := m.GetEmit().GetRecord()
		clear(tc.frame) // what gRPC's pool, or the next message, would do to the bytes
		kept := string(r.Key) != "k" && string(r.Value) != "value" && string(r.Headers[0].Value) != "hv"
		copied := string(r.Key) == "k" && string(r.Value) == "value" && string(r.Headers[0].Value) == "hv"
		if tc.kept && !kept || !tc.kept && !copied {
			t.Errorf("%s: after the frame changed the record reads key %q value %q header %q; want them %s", tc.name, r.Key, r.Value, r.Headers[0].Value, map[bool]string{true: "slices of the frame", false: "copies"}[tc.kept])
		}
		if cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value) {
			t.Errorf("%s: the key and value have room after them (cap %d, %d): an append would write over the next field", tc.name, cap(r.Key), cap(r.Value))
		}
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
			gerr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(slices.Clip(append([]byte(nil), b...)))}, got) // a frame of its own: kept
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
		gerr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append(slices.Clip(b), 0)[:len(b)])}, got) // more after it: copied
		if (werr == nil) != (gerr == nil) || werr == nil && !proto.Equal(want, got) {
			t.Fatalf("FromProcess from %x into a held Emit: the runtime says %v, %v; Codec %v, %v", b, werr, want, gerr, got)
		}
	})
}

// BenchmarkUnmarshalEmit measures decoding one Emit of a 200-byte record with a traceparent
// into a held message, as the sidecar receives one per record: each from a frame of its own,
// as gRPC hands a message of 1 KiB or less to the codec.
//
//	go test -run '^$' -bench BenchmarkUnmarshalEmit -benchmem ./internal/codec/
func BenchmarkUnmarshalEmit(b *testing.B) {
	value := bytes.Repeat([]byte("x"), 200)
	wire, err := proto.Marshal(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 7, Outlet: "out", Record: &flowv1.Record{Value: value,
		Headers: []*flowv1.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}}}})
	if err != nil {
		b.Fatal(err)
	}
	c := codec.Codec{}
	var m flowv1.FromProcess
	frames := make([]mem.BufferSlice, 1024) // fresh frames, as gRPC reads each into a new one
	for i := range frames {
		frames[i] = mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), wire...))}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := c.Unmarshal(frames[i%len(frames)], &m); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
