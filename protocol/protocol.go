// Package protocol holds the rules of the Ankka Flow streamlet protocol that the sidecar and
// every process share: the version rule, descriptor validation and comparison, fingerprints,
// the canonical JSON of descriptor.json, and config resolution. The generated code of the
// protocol itself lives in protocol/ankka/flow/v1 (package flowv1).
//
// DESCRIPTOR.md beside this file states every rule precisely, for authors of SDKs in other
// languages; protocol/fixtures holds the cases each of them must reproduce.
//
// Every function here is pure: safe for concurrent use, and it never modifies its arguments.
// It is an API: a streamlet process or a sidecar written in Go keeps the same rules with it.
package protocol

import "errors"

// Version is the protocol version this module speaks, "MAJOR.MINOR". 1.1 adds millrace's
// State service (protocol/millrace/state/v1) on the sidecar's port, for a process that keeps
// state per key; a process that needs none reports BaseVersion.
const Version = "1.1"

// BaseVersion is the version a process reports when it needs nothing a later minor adds (its
// action line keeps no state): any 1.0 sidecar accepts it, exactly as before 1.1.
const BaseVersion = "1.0"

var (
	// ErrVersion is wrapped by CheckVersion and CheckVersionAgainst when a protocol version
	// is refused: another major, a later minor, or not of the form MAJOR.MINOR.
	ErrVersion = errors.New("protocol: version refused")
	// ErrDescriptor is wrapped by MarshalDescriptor and UnmarshalDescriptor when a descriptor
	// cannot be written or read as descriptor.json.
	ErrDescriptor = errors.New("protocol: bad descriptor.json")
	// ErrConfigValue is wrapped by ParseConfigValue when a string is not a value of its
	// config type.
	ErrConfigValue = errors.New("protocol: bad config value")
)
