package bridge

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// FuzzTextOrBase64 checks that key and header bytes survive the trip to an item and back from
// an emit: UTF-8 as text, anything else as base64.
func FuzzTextOrBase64(f *testing.F) {
	for _, s := range []string{"", "listing-42", "é", "\xff\x00k", "\xc3\x28"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		text, b64 := textOrBase64(b)
		if (text != nil) != utf8.Valid(b) || (text != nil && b64 != "") {
			t.Fatalf("textOrBase64(%q) = %v, %q; want text exactly when UTF-8", b, text, b64)
		}
		got, err := bytesOf(text, b64, "key")
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("bytesOf(textOrBase64(%q)) = %q, %v; want the same bytes", b, got, err)
		}
	})
}

func TestBytesOfBadBase64(t *testing.T) {
	if _, err := bytesOf(nil, "not base64!", "key"); err == nil {
		t.Errorf("bytesOf(keyBase64 %q) = nil error; want one", "not base64!")
	}
}

func TestIdempotencyKey(t *testing.T) {
	k := IdempotencyKey("p", "s", "t", 1, 2)
	if len(k) != 32 || k != IdempotencyKey("p", "s", "t", 1, 2) {
		t.Errorf("IdempotencyKey = %q; want 32 hex digits, stable", k)
	}
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	if IdempotencyKey("ab", "c", "t", 1, 2) == IdempotencyKey("a", "bc", "t", 1, 2) || k == IdempotencyKey("p", "s", "t", 1, 3) {
		t.Errorf("IdempotencyKey collides on different records")
	}
}
