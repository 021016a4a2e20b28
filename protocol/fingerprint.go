package protocol

import (
	"crypto/sha256"
	"encoding/base64"
)

// Fingerprint returns the fingerprint of a contract's schema name:
// Base64(SHA-256(UTF-8(schemaName))), standard alphabet, padded (44 characters). Go strings
// are bytes, so a name that is not valid UTF-8 is hashed as it is; Validate refuses such
// names elsewhere.
func Fingerprint(schemaName string) string {
	sum := sha256.Sum256([]byte(schemaName))
	return base64.StdEncoding.EncodeToString(sum[:])
}
