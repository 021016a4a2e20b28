package sidecar

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Compression is the codec the sidecar compresses its emits' record batches with
// (FLOW_PRODUCE_COMPRESSION).
type Compression string

// The codecs Kafka defines. CompressionNone is the default, as it is Kafka's own producer's
// (compression.type=none) and librdkafka's: compressing costs the sidecar CPU on every record
// (snappy, franz-go's default, was 4–7% of the sidecar's CPU on loopback), pays only where
// the network between the pod and the brokers is the bottleneck, and a topic that wants its
// records compressed on disk says so itself (the topic's compression.type).
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLz4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// envCompression names the compression variable.
const envCompression = "FLOW_PRODUCE_COMPRESSION"

// parseCompression reads FLOW_PRODUCE_COMPRESSION: empty is none; anything but a codec Kafka
// defines is refused by name.
func parseCompression(s string) (Compression, error) {
	switch c := Compression(strings.ToLower(strings.TrimSpace(s))); c {
	case "":
		return CompressionNone, nil
	case CompressionNone, CompressionGzip, CompressionSnappy, CompressionLz4, CompressionZstd:
		return c, nil
	default:
		return "", fmt.Errorf("%s=%s is not a compression codec: write %s (the default), %s, %s, %s or %s",
			envCompression, s, CompressionNone, CompressionGzip, CompressionSnappy, CompressionLz4, CompressionZstd)
	}
}

// codec is franz-go's codec for c; the zero Compression is none.
func (c Compression) codec() kgo.CompressionCodec {
	switch c {
	case CompressionGzip:
		return kgo.GzipCompression()
	case CompressionSnappy:
		return kgo.SnappyCompression()
	case CompressionLz4:
		return kgo.Lz4Compression()
	case CompressionZstd:
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}
