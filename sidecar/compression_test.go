package sidecar_test

import (
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
			const n = 20
			b.Produce(t, records(in, 1, n)...)
			start(t, e.config(t))
			// franz-go writes a batch uncompressed when compressing would grow it, as it does
			// a batch of one small emit (the first of a round may go alone): such batches may
			// be uncompressed, the others must carry the codec.
			compressed := 0
			for _, rec := range b.ReadN(t, out, n, waitTimeout) {
				got := kgo.CompressionCodecType(rec.Attrs.CompressionType())
				if got != tc.want && got != kgo.CodecNone {
					t.Fatalf("FLOW_PRODUCE_COMPRESSION=%q: an emit at offset %d came in a batch compressed with codec %d; want %d", tc.set, rec.Offset, got, tc.want)
				}
				if got == tc.want {
					compressed++
				}
			}
			if compressed < n/2 {
				t.Errorf("FLOW_PRODUCE_COMPRESSION=%q: %d of %d emits came in batches with codec %d; want most of them", tc.set, compressed, n, tc.want)
			}
		})
	}
}
