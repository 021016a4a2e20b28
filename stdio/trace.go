package stdio

import (
	"encoding/binary"
	"math/rand/v2"
)

// TraceparentLen is the length of a version-00 traceparent value:
// "00-" trace-id (32 hex) "-" parent-id (16 hex) "-" trace-flags (2 hex).
const TraceparentLen = 55

// TraceContext is the W3C Trace Context (https://www.w3.org/TR/trace-context/) of one
// delivery, in binary form. An item that carries one is sent with "traceparent" naming
// SpanID, the span of this attempt, as its parent-id: the action's own spans and the
// outputs of the delivery are children of that span. The zero value is no trace context.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte // the span of this attempt
	Parent  [8]byte // the span the input came from; zero when the attempt's span is a root
	Flags   byte    // trace-flags; bit 0 is sampled
}

// IsValid reports whether tc names a trace (a trace-id that is not all zeros).
func (tc *TraceContext) IsValid() bool { return tc.TraceID != [16]byte{} }

// AppendTraceparent appends the version-00 traceparent value of tc with span as its
// parent-id.
func (tc *TraceContext) AppendTraceparent(dst []byte, span [8]byte) []byte {
	v := tc.Traceparent(span)
	return append(dst, v[:]...)
}

// Traceparent returns the version-00 traceparent value of tc with span as its parent-id, in
// an array: no allocation.
func (tc *TraceContext) Traceparent(span [8]byte) [TraceparentLen]byte {
	var v [TraceparentLen]byte
	v[0], v[1], v[2], v[35], v[52] = '0', '0', '-', '-', '-'
	for i, b := range tc.TraceID {
		v[3+2*i], v[4+2*i] = hexDigits[b>>4], hexDigits[b&0xf]
	}
	for i, b := range span {
		v[36+2*i], v[37+2*i] = hexDigits[b>>4], hexDigits[b&0xf]
	}
	v[53], v[54] = hexDigits[tc.Flags>>4], hexDigits[tc.Flags&0xf]
	return v
}

// ParseTraceparent reads a traceparent value as the W3C Trace Context's section 3.2 says: a
// version-00 value is exactly 55 characters of lowercase hex and dashes; a later version is
// read as 00 when its first 55 characters are (anything after them must start with "-");
// version ff, an all-zero trace-id or parent-id, and any other value are invalid (ok false).
func ParseTraceparent(v []byte) (traceID [16]byte, parent [8]byte, flags byte, ok bool) {
	if len(v) < TraceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return traceID, parent, 0, false
	}
	var version [1]byte
	if !lowerHex(version[:], v[0:2]) || version[0] == 0xff {
		return traceID, parent, 0, false
	}
	if len(v) > TraceparentLen && (version[0] == 0 || v[TraceparentLen] != '-') {
		return traceID, parent, 0, false
	}
	var fl [1]byte
	if !lowerHex(traceID[:], v[3:35]) || !lowerHex(parent[:], v[36:52]) || !lowerHex(fl[:], v[53:55]) {
		return traceID, parent, 0, false
	}
	if traceID == [16]byte{} || parent == [8]byte{} {
		return traceID, parent, 0, false
	}
	return traceID, parent, fl[0], true
}

// lowerHex decodes src, lowercase hex only as traceparent requires, into dst (len(src) is
// 2 × len(dst)), in one pass.
func lowerHex(dst, src []byte) bool {
	for i := range dst {
		hi, ok1 := unhex(src[2*i])
		lo, ok2 := unhex(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// NewTraceID returns a random trace-id for a trace that starts here; NewSpanID a random
// span-id. Both draw on math/rand/v2's global source, the runtime's per-thread ChaCha8
// generator seeded from the operating system's entropy: unpredictable and uniformly random,
// as the W3C Trace Context's section on privacy and randomness asks of ids, yet with no lock,
// no system call and no allocation per id (crypto/rand makes a getrandom call each time).
// They never return the all-zero id, which is invalid. They are safe for concurrent use.
func NewTraceID() [16]byte {
	var id [16]byte
	for id == [16]byte{} {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// NewSpanID: see NewTraceID.
func NewSpanID() [8]byte {
	var id [8]byte
	for id == [8]byte{} {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
