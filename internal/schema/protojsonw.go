package schema

import (
	"math"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The JSON primitives of the proto3 JSON mapping, written as protojson writes them.

// errPBUTF8 is a string that is not UTF-8: protojson refuses it (so does the fast path).
var errPBUTF8 = &fault{reason: "a string is not valid UTF-8"}

// appendJSONString writes s quoted: '"', '\\' and the control characters escaped (the short
// forms where JSON has them, else \u00xx in lower case), nothing else.
func appendJSONString(out []byte, s string) ([]byte, error) {
	out = append(out, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return out, errPBUTF8
			}
			out = append(out, s[i:i+n]...)
			i += n
			continue
		}
		i++
		if c >= ' ' && c != '"' && c != '\\' {
			out = append(out, c)
			continue
		}
		out = append(out, '\\')
		switch c {
		case '"', '\\':
			out = append(out, c)
		case '\b':
			out = append(out, 'b')
		case '\f':
			out = append(out, 'f')
		case '\n':
			out = append(out, 'n')
		case '\r':
			out = append(out, 'r')
		case '\t':
			out = append(out, 't')
		default:
			out = append(out, 'u')
			out = append(out, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			out = strconv.AppendUint(out, uint64(c), 16)
		}
	}
	return append(out, '"'), nil
}

// appendJSONFloat writes x as protojson does: NaN and the infinities as strings, else the
// shortest form that reads back, in exponent form below 1e-6 and from 1e21 on.
func appendJSONFloat(out []byte, x float64, size int) []byte {
	switch {
	case math.IsNaN(x):
		return append(out, `"NaN"`...)
	case math.IsInf(x, 1):
		return append(out, `"Infinity"`...)
	case math.IsInf(x, -1):
		return append(out, `"-Infinity"`...)
	}
	format := byte('f')
	if a := math.Abs(x); a != 0 {
		if size == 64 && (a < 1e-6 || a >= 1e21) || size == 32 && (float32(a) < 1e-6 || float32(a) >= 1e21) {
			format = 'e'
		}
	}
	out = strconv.AppendFloat(out, x, format, -1, size)
	if format == 'e' {
		// e-07, not e-07's zero: "1e-07" is written "1e-7".
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}

// The ranges protojson writes; outside them (or at its own edges) the slow path decides.
const (
	pbMinTimestamp = -62135596800
	pbMaxTimestamp = 253402300799
	pbMaxDuration  = 315576000000
	pbMaxNanos     = 999999999
)

// wellKnown writes a Timestamp (RFC 3339 in UTC, 0, 3, 6 or 9 fractional digits) or a
// Duration ("1.5s") from its wire bytes; it gives up on unknown fields and out of range values.
func (w *pbWriter) wellKnown(kind byte, b []byte) bool {
	var secs, nanos int64
	for i := 0; i < len(b); {
		num, typ, lo, hi, ok := pbNext(b, i)
		if !ok || typ != protowire.VarintType || num < 1 || num > 2 {
			return false
		}
		i = hi
		v, _ := protowire.ConsumeVarint(b[lo:hi])
		if num == 1 {
			secs = int64(v)
		} else {
			nanos = int64(int32(v))
		}
	}
	var buf [40]byte
	var x []byte
	switch kind {
	case wktTimestamp:
		if secs < pbMinTimestamp || secs > pbMaxTimestamp || nanos < 0 || nanos > pbMaxNanos {
			return false
		}
		x = time.Unix(secs, nanos).UTC().AppendFormat(buf[:0], "2006-01-02T15:04:05.000000000")
		x = append(trimNanos(x), 'Z')
	default:
		if secs < -pbMaxDuration || secs > pbMaxDuration || nanos < -pbMaxNanos || nanos > pbMaxNanos ||
			secs > 0 && nanos < 0 || secs < 0 && nanos > 0 {
			return false
		}
		x = buf[:0]
		if secs < 0 || nanos < 0 {
			x, secs, nanos = append(x, '-'), -secs, -nanos
		}
		x = strconv.AppendInt(x, secs, 10)
		x = append(x, '.')
		var frac [9]byte
		n := nanos
		for j := 8; j >= 0; j-- {
			frac[j] = byte('0' + n%10)
			n /= 10
		}
		x = append(trimNanos(append(x, frac[:]...)), 's')
	}
	w.out = append(append(append(w.out, '"'), x...), '"')
	return true
}

// trimNanos drops trailing groups of three zeros of the nine fractional digits, and the dot
// when all nine are zero.
func trimNanos(x []byte) []byte {
	for range 2 {
		if len(x) >= 3 && string(x[len(x)-3:]) == "000" {
			x = x[:len(x)-3]
		}
	}
	if len(x) >= 4 && string(x[len(x)-4:]) == ".000" {
		x = x[:len(x)-4]
	}
	return x
}
