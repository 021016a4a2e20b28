// Package stdio is the wire of the Millstream action protocol: its messages, one JSON object
// per line, the item encoder, the answer decoder (with the engine's allocation-free fast path,
// FastAnswer), the batch envelope that carries several messages on one line (Packer,
// SplitBatch) and the capped line reader. It is an API, what an action SDK (stdio/action) and
// the conformance kit need; the engine that supervises processes, pools them, retries and keeps
// the window is apart, in stdio/engine.
//
// Every line read is capped ([MaxLineBytes]) and copied before it leaves the reader; a line
// that breaks the protocol is a [*ProtocolError] (matching [ErrProtocol]) that names the [Rule]
// it breaks, with the fix, and keeps its start.
//
// The package knows nothing of Kafka or gRPC, nor of processes.
package stdio

import "errors"

// Exported sentinel errors of the wire.
var (
	// ErrProtocol is matched by every error for a line that breaks the protocol: too long, not
	// JSON, not an object, of an unknown type, or (in the engine) for another delivery; the
	// error is a *ProtocolError, whose fields say which rule and which line.
	ErrProtocol = errors.New("stdio: protocol violation")
	// ErrLineTooLong is wrapped by ErrProtocol errors for a line over MaxLineBytes.
	ErrLineTooLong = errors.New("stdio: line too long")
	// ErrMalformedBatch is wrapped, with ErrProtocol, by errors for a batch envelope that breaks
	// its rules (SplitBatch, DecodeInBatch): "messages" missing or not an array, a message that
	// is not a JSON object or has no known type, an envelope inside an envelope.
	ErrMalformedBatch = errors.New("a malformed batch envelope")
)
