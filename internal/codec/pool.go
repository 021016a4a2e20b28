package codec

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is the buffer pool of the Run stream's messages: the codec encodes every message into
// one of its buffers and gathers a message that spans several frames into one, and a gRPC
// server or client given it (experimental.BufferPool, experimental.WithBufferPool) reads
// frames into them. Unlike gRPC's default pool it does not zero a buffer it hands out, and it
// pools buffers from 2 KiB up, so that an Emit of a few hundred bytes is encoded into a reused
// buffer too (gRPC's transport returns it once the frame is written):
//   - every taker writes the whole length it asks for before reading any of it (gRPC reads a
//     frame in full, copies a message in, reads into the rest only what it counts; the codec
//     encodes a message into exactly its size), so zeroing is pure cost: in the bridge's
//     profile it was 4 % of the CPU (runtime.memclrNoHeapPointers clearing a 16 or 32 KiB
//     buffer for each frame and Batch read);
//   - gRPC's default pools nothing of 1 KiB or less, so each Emit's buffer was a new
//     allocation.
//
// Buffers are pooled in power-of-two sizes from 2 KiB to 1 MiB; a larger one is allocated and
// left to the collector.
var Pool mem.BufferPool = &pool{}

const (
	minTierShift = 11 // 2 KiB: above gRPC's 1 KiB pooling threshold, so NewBuffer pools it
	maxTierShift = 20 // 1 MiB
)

type pool struct {
	tiers [maxTierShift - minTierShift + 1]sync.Pool // of *[]byte, cap exactly 1<<(minTierShift+i)
}

// tier is the index of the smallest tier that holds size bytes, or -1 when none does.
func tier(size int) int {
	if size <= 1<<minTierShift {
		return 0
	}
	if size > 1<<maxTierShift {
		return -1
	}
	return bits.Len(uint(size-1)) - minTierShift
}

// Get returns a buffer of length size, its contents whatever it held before.
func (p *pool) Get(size int) *[]byte {
	t := tier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(minTierShift+t))
	return &b
}

// Put takes back a buffer Get returned; one of any other capacity is left to the collector.
func (p *pool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(minTierShift+t) {
		return
	}
	p.tiers[t].Put(b)
}
