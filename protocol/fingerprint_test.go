package protocol_test

import (
	"testing"

	"github.com/ankka-flow/millrace/protocol"
)

func TestFingerprint(t *testing.T) {
	tests := []struct{ in, want string }{
		// sha256sum of the empty input, base64: the well-known e3b0c442… digest.
		{"", "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="},
		// printf 'abc' | sha256sum: ba7816bf…, the FIPS 180-2 test vector.
		{"abc", "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="},
		// openssl dgst -sha256 -binary | base64
		{"cart-events.v1", "nXhoFwNZSB7DKScFuZUtZ1gnAYkIxadumsXNHWwbLfM="},
	}
	for _, tt := range tests {
		if got := protocol.Fingerprint(tt.in); got != tt.want {
			t.Errorf("Fingerprint(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
