package actionconf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// IdempotencyKeyLen is the length of an idempotency key: hex of 16 bytes.
const IdempotencyKeyLen = 2 * 16

// IdempotencyKey returns the idempotencyKey of a record in replay generation 0: hex of the
// first 16 bytes of SHA-256 over the pipeline, streamlet, topic, partition and offset. It is
// the same on every attempt and in every conversation, so a redelivered record keeps its key.
func IdempotencyKey(pipeline, streamlet, topic string, partition int32, offset int64) string {
	return idempotencyKeyAt(0, pipeline, streamlet, topic, partition, offset)
}

// idempotencyKeyAt is AppendIdempotencyKey as a string.
func idempotencyKeyAt(gen uint64, pipeline, streamlet, topic string, partition int32, offset int64) string {
	var key [32]byte
	return string(AppendIdempotencyKey(key[:0], gen, pipeline, streamlet, topic, partition, offset))
}

// AppendIdempotencyKey appends to dst the idempotencyKey of a record in replay generation gen
// (the operator's FLOW_REPLAY_GENERATION): generation 0 is IdempotencyKey's, unchanged; any
// other generation is hashed after the offset, so a deliberate replay under a bumped generation
// gets new keys while redeliveries within one generation keep theirs. It allocates nothing for
// the usual name lengths: the bridge names every record of a batch in one buffer.
func AppendIdempotencyKey(dst []byte, gen uint64, pipeline, streamlet, topic string, partition int32, offset int64) []byte {
	var stack [256]byte // on the stack for the usual name lengths
	buf := stack[:0]
	for _, s := range [...]string{pipeline, streamlet, topic} {
		buf = binary.BigEndian.AppendUint64(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(partition))
	buf = binary.BigEndian.AppendUint64(buf, uint64(offset))
	if gen != 0 {
		buf = binary.BigEndian.AppendUint64(buf, gen)
	}
	sum := sha256.Sum256(buf)
	return hex.AppendEncode(dst, sum[:16])
}
