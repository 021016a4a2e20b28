package sidecar

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRecordSize: recordSize is never less than the record's encoding in a Kafka record
// batch (v2), whatever its key, value and headers, with the timestamp and offset deltas at
// their largest.
func TestRecordSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 63, 64, 65, 127, 128, 8191, 8192, 1 << 16}
	pick := func() []byte { return bytes.Repeat([]byte("x"), sizes[rng.IntN(len(sizes))]) }
	for i := range 500 {
		r := &kgo.Record{Value: pick()}
		if i%3 != 0 {
			r.Key = pick()
		}
		for range rng.IntN(4) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: strings.Repeat("h", rng.IntN(200)), Value: pick()})
		}
		// The deltas at their largest: a 10-byte and a 5-byte varint.
		kr := kmsg.Record{TimestampDelta64: math.MinInt64, OffsetDelta: math.MinInt32, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // the body; AppendTo wrote a one-byte zero length
		wire := len(kr.AppendTo(nil))
		if got := recordSize(r); got < wire {
			t.Fatalf("recordSize(key %d, value %d, %d headers) = %d; want at least %d, its encoding", len(r.Key), len(r.Value), len(r.Headers), got, wire)
		}
	}
}

// TestVarintLen: varintLen is the length of Kafka's zigzag varint encoding.
func TestVarintLen(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 63, 64, 65, 8191, 8192, 1 << 20, 1<<31 - 1} {
		var rec kmsg.Record
		rec.Length = int32(n)
		empty := kmsg.Record{}
		want := len(rec.AppendTo(nil)) - len(empty.AppendTo(nil)) + 1
		if got := varintLen(n); got != want {
			t.Errorf("varintLen(%d) = %d; want %d", n, got, want)
		}
	}
}
