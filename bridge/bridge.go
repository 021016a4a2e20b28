// Package bridge is the streamlet process of millrace: it turns one action config line and any
// program that speaks the action protocol (JSON lines on stdin/stdout, package stdio) into an
// Ankka Flow streamlet, a gRPC server of the Discovery and Streamlet services (package
// protocol) that the standard sidecar drives.
//
// The config line is parsed by [ParseLine], [ParseString], [ParseFile] or [FromEnv] into an
// [Action]: the one action config of millrace, with one table of defaults, which `millrace
// run`, `millrace test`, `describe` and the conformance kit take as well. Its
// [Action.Descriptor] and [Action.Spec] are what discovery answers. A [Server] serves one
// action: each conversation (a Streamlet.Run stream opened with Start) gets a fresh pool of the
// action's processes (package stdio/engine); every record of a batch becomes one item; a batch
// is answered with its records' emits in record order and then Ack, or with Fail.
//
// [ListenAndServe] is the process: the services on loopback, the Prometheus metrics when the
// line asks for them, a graceful stop. The constants the sidecar shares with it (port, message
// limit, stop bound, FLOW_* names) are package protocol's.
//
// Where the specs are silent, the bridge decides as the README's "The action config line"
// section says: the headers of dead letters (millrace-error and its siblings), the derivation of
// idempotencyKey, the payload of an empty value (null), and base64 siblings for bytes that are
// not UTF-8.
package bridge

import "errors"

var (
	// ErrConfig matches every mistake in an action config line (a *lineError) from ParseLine,
	// ParseString, ParseFile and FromEnv.
	ErrConfig = errors.New("bridge: action config")
	// ErrNoConfig is returned by FromEnv when MILLRACE_ACTION is unset or blank.
	ErrNoConfig = errors.New("bridge: no action config: give the line as arguments, --config FILE, or in " + EnvAction)
)
