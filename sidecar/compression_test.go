package sidecar_test

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceCompression writes emits with each codec of FLOW_PRODUCE_COMPRESSION (none when
// unset) and reads back, from a real consumer, the compression of the record batches the
// broker holds: the codec chosen is the one that reaches the broker.
func TestProduceCompression(t *testing.T) {
	b := newBroker(t)
	for _, tc := range []struct {
		set  string
		want kgo.CompressionCodecType
	}{
		{"", kgo.CodecNone},
		{"none", kgo.CodecNone},
		{"gzip", kgo.CodecGzip},
		{"snappy", kgo.CodecSnappy},
		{"lz4", kgo.CodecLz4},
		{"zstd", kgo.CodecZstd},
	} {
		name := tc.set
		if name == "" {
			name = "unset"
		}
		t.Run(name, func(t *testing.T) {
			in, out := b.Topic(t, "in-"+name, 1), b.Topic(t, "out-"+name, 1)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			if tc.set != "" {
				e["FLOW_PRODUCE_COMPRESSION"] = tc.set
			}
			// kgo sends a batch uncompressed when compressing would not shrink it (a batch of
			// one short emit), so every value is long and repetitive enough to shrink alone.
			const n = 20
			recs := records(in, 1, n)
			for _, r := range recs {
				r.Value = append(r.Value, bytes.Repeat([]byte(" compressible"), 64)...)
			}
			b.Produce(t, recs...)
			start(t, e.config(t))
			for _, rec := range b.ReadN(t, out, n, waitTimeout) {
				if got := kgo.CompressionCodecType(rec.Attrs.CompressionType()); got != tc.want {
					t.Fatalf("FLOW_PRODUCE_COMPRESSION=%q: an emit at offset %d came in a batch compressed with codec %d; want %d", tc.set, rec.Offset, got, tc.want)
				}
			}
		})
	}
}
