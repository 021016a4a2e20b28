package codec_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/codec"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// TestPoolSizes checks that Pool hands out buffers of the length asked for, in capacities
// that gRPC pools (above its 1 KiB threshold), and takes back only what it can hand out again.
func TestPoolSizes(t *testing.T) {
	for _, size := range []int{0, 1, 300, 1024, 2048, 2049, 16 << 10, 25 << 10, 1 << 20, 1<<20 + 1} {
		b := codec.Pool.Get(size)
		if len(*b) != size {
			t.Errorf("Get(%d) has length %d", size, len(*b))
		}
		if size <= 1<<20 && mem.IsBelowBufferPoolingThreshold(cap(*b)) {
			t.Errorf("Get(%d) has capacity %d, which gRPC does not return to a pool", size, cap(*b))
		}
		codec.Pool.Put(b)
	}
	odd := make([]byte, 3000)
	codec.Pool.Put(&odd) // not a tier's capacity: dropped, and Get still fits
	for range 10 {
		if b := codec.Pool.Get(4000); cap(*b) < 4000 {
			t.Fatalf("Get(4000) has capacity %d", cap(*b))
		}
	}
}

// TestMarshalDirtyBuffers checks that what Codec writes does not depend on what the pool's
// buffers held before (Pool does not zero them).
func TestMarshalDirtyBuffers(t *testing.T) {
	c := codec.Codec{}
	for range 20 {
		for _, size := range []int{2 << 10, 4 << 10} {
			b := codec.Pool.Get(size)
			for i := range *b {
				(*b)[i] = 0xa5
			}
			codec.Pool.Put(b)
		}
		for _, m := range samples() {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			data, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := data.Materialize()
			data.Free()
			if !bytes.Equal(got, want) {
				t.Fatalf("Marshal(%v) over a used buffer = %x; want %x", m, got, want)
			}
		}
	}
}

// TestUnmarshalFrames checks that a message that came in several frames (several buffers)
// decodes as one that came in one, and that the decoded message keeps nothing of the buffers.
func TestUnmarshalFrames(t *testing.T) {
	c := codec.Codec{}
	for _, m := range samples() {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for cut := range len(want) + 1 {
			a, b := bytes.Clone(want[:cut]), bytes.Clone(want[cut:])
			back := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(a), mem.SliceBuffer(b)}, back); err != nil {
				t.Fatalf("Unmarshal(%v cut at %d): %v", m, cut, err)
			}
			one := bytes.Clone(want)
			single := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(one)}, single); err != nil {
				t.Fatal(err)
			}
			for _, buf := range [][]byte{a, b, one} {
				for i := range buf {
					buf[i] = 0xff
				}
			}
			if !proto.Equal(back, m) || !proto.Equal(single, m) {
				t.Fatalf("Unmarshal(%v cut at %d) = %v, in one frame %v, once the frames were overwritten", m, cut, back, single)
			}
		}
	}
}

// BenchmarkMarshalEmit measures encoding one Emit of a 200-byte record with a traceparent, as
// the bridge sends one per record, and handing its buffer back as gRPC's transport does.
//
//	go test -run '^$' -bench BenchmarkMarshalEmit -benchmem ./internal/codec/
func BenchmarkMarshalEmit(b *testing.B) {
	value := bytes.Repeat([]byte("x"), 200)
	m := &flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 7, Outlet: "out", Record: &flowv1.Record{Value: value,
		Headers: []*flowv1.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}}}}
	c := codec.Codec{}
	b.ReportAllocs()
	for b.Loop() {
		data, err := c.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		data.Free()
	}
}
