package codec_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/codec"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// stateSamples are messages of the State stream both ways: a batch's states and its Staged
// with an empty key, an empty state, a deletion (no value), more set and not; none; Open,
// Opened and Refused.
func stateSamples() []proto.Message {
	es := []*statev1.Entry{{Key: []byte("k1"), Value: []byte(`{"n":1}`)}, {Key: []byte{}, Value: []byte{}}, {Key: []byte("gone")}}
	return []proto.Message{
		&statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: &statev1.BatchState{BatchId: 7, Entries: es, More: true}}},
		&statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: &statev1.BatchState{BatchId: 8}}},
		&statev1.SidecarMessage{Message: &statev1.SidecarMessage_Opened{Opened: &statev1.Opened{MaxMessageBytes: 4 << 20,
			Inlets: []*statev1.InletLimits{{Inlet: "in", ChangelogTopic: "c", MaxValueBytes: 1 << 16, MaxRecordBytes: 1 << 20}}}}},
		&statev1.SidecarMessage{Message: &statev1.SidecarMessage_Refused{Refused: &statev1.Refused{Problems: []string{"no"}}}},
		&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: 7, Entries: es}}},
		&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: 9, More: true}}},
		&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Open{Open: &statev1.Open{ConversationId: "c1", Inlets: []*statev1.InletState{{Inlet: "in", TtlMs: 1000}}}}},
		&statev1.ProcessMessage{},
	}
}

// TestStateRoundTrip checks that the State codec writes what the protobuf runtime writes and
// reads back the same message, a deletion (no value) told from an empty state, and that the
// entries it decoded keep their bytes once the buffer they came in is reused.
func TestStateRoundTrip(t *testing.T) {
	c := codec.StateCodec{}
	for _, m := range stateSamples() {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !slices.Equal(got, want) {
			t.Errorf("Marshal(%v) = %x; want %x", m, got, want)
		}
		out.Free()
		buf := slices.Clone(want)
		got := m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(buf)}, got); err != nil {
			t.Fatalf("Unmarshal of %v: %v", m, err)
		}
		clear(buf) // as a pooled buffer is reused
		if !proto.Equal(got, m) {
			t.Errorf("Unmarshal(Marshal(%v)) = %v", m, got)
		}
	}
}

// FuzzStateUnmarshal checks that the State codec accepts and refuses exactly what the protobuf
// runtime does, and decodes the same message, for any bytes.
func FuzzStateUnmarshal(f *testing.F) {
	for _, m := range stateSamples() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x1a, 0x04, 0x12, 0x02, 0x18, 0x01}) // an entry with an unknown field
	c := codec.StateCodec{}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newMsg := range []func() proto.Message{func() proto.Message { return new(statev1.SidecarMessage) }, func() proto.Message { return new(statev1.ProcessMessage) }} {
			want, got := newMsg(), newMsg()
			werr := proto.Unmarshal(b, want)
			gerr := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(slices.Clone(b))}, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T from %x: the runtime says %v, the State codec says %v", want, b, werr, gerr)
			}
			if werr == nil && !proto.Equal(want, got) {
				t.Fatalf("%T from %x: the runtime decodes %v, the State codec %v", want, b, want, got)
			}
		}
	})
}

// BenchmarkStateUnmarshal measures decoding a batch's states, 100 entries of 10-byte states,
// as the bridge receives one BatchState a batch. An op is a message.
//
//	go test -run '^$' -bench BenchmarkStateUnmarshal -benchmem ./internal/codec/
func BenchmarkStateUnmarshal(b *testing.B) {
	bs := &statev1.BatchState{BatchId: 7}
	for i := range 100 {
		bs.Entries = append(bs.Entries, &statev1.Entry{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, `{"n":%05d}`, i)})
	}
	wire, err := proto.Marshal(&statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: bs}})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dec  func(mem.BufferSlice, any) error
	}{
		{"runtime", func(d mem.BufferSlice, v any) error { return proto.Unmarshal(d.Materialize(), v.(proto.Message)) }},
		{"state-codec", codec.StateCodec{}.Unmarshal},
	} {
		b.Run(tc.name, func(b *testing.B) {
			data := mem.BufferSlice{mem.SliceBuffer(wire)}
			b.ReportAllocs()
			for b.Loop() {
				var m statev1.SidecarMessage
				if err := tc.dec(data, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
