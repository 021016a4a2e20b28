// Package protocol holds the rules of the Ankka Flow streamlet protocol that the sidecar and
// every process share: the version rule, descriptor validation and comparison, fingerprints,
// the canonical JSON of descriptor.json, and config resolution. The generated code of the
// protocol itself lives in protocol/ankka/flow/v1 (package flowv1).
package protocol

// Version is the protocol version this module speaks, "MAJOR.MINOR".
const Version = "1.0"
