// Package bridge is the streamlet process of millrace: it turns one action config line and any
// program that speaks the action protocol (JSON lines on stdin/stdout, package stdio) into an
// Ankka Flow streamlet, a gRPC server of the Discovery and Streamlet services (package
// protocol) that the standard sidecar drives.
//
// The config line and its one table of defaults are package bridge/actionconf's (which links no
// gRPC, so the tools that only read a line stay small); the [Options] take its
// [actionconf.Action], whose Descriptor and Spec are what discovery answers. A [Server] serves one
// action: each conversation (a Streamlet.Run stream opened with Start) gets a fresh pool of the
// action's processes (package stdio/engine); every record of a batch becomes one item; a batch
// is answered with its records' emits in record order and then Ack, or with Fail. The records
// of a port the line declares registry-encoded (--decode, --encode: Avro, Protobuf or JSON
// Schema in the Confluent wire format) are decoded into the items' JSON and the emits encoded
// back, with package internal/schema and the registry of [Options].Registry; the sidecar moves
// bytes either way.
//
// [ListenAndServe] is the process: the services on loopback, the Prometheus metrics when the
// line asks for them, a graceful stop. [ConfigFromEnv] reads its deploy settings, every one
// listed with its default in [Settings]. The constants the sidecar shares with it (port, message
// limit, stop bound, FLOW_* names) are package protocol's.
//
// It is an API: `millrace bridge` is [ListenAndServe], `millrace run` serves each streamlet
// with [NewServer] and [Server.Serve], and a Go program may do the same.
//
// Where the specs are silent, the bridge decides as docs/action-config.md
// section says: the headers of dead letters (millrace-error and its siblings), the derivation of
// idempotencyKey, the payload of an empty value (null), and base64 siblings for bytes that are
// not UTF-8.
package bridge
