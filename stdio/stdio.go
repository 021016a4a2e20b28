// Package stdio is the engine side of the Millstream action protocol: it runs a user's program
// in any language as a supervised child process, speaks JSON lines with it over stdin and
// stdout, and spreads items over a key-affine pool of such processes.
//
// A broken, slow or hostile child never loses an item, hangs the engine or exhausts its memory:
// every line is capped ([MaxLineBytes]), every wait is bounded (ready timeout, item timeout,
// shutdown grace), and every delivery ends in exactly one [Result].
//
// The package knows nothing of Kafka or gRPC; the bridge maps records to [Item]s and
// [Result]s back to Emits, Acks and Fails.
package stdio

import "errors"

// Exported sentinel errors. Errors returned by this package and carried in [Result.Err] wrap
// one of them, so callers test with errors.Is; the wrapping text names the action, the
// delivery, the limit or the line, and the last stderr lines where a child is involved.
var (
	// ErrClosed is returned by Submit after Close was called, and carried by Abandoned results.
	ErrClosed = errors.New("stdio: pool closed")
	// ErrStart is returned by Start, and reported through Pool.Health, when a process cannot be
	// started or does not answer hello with ready in time.
	ErrStart = errors.New("stdio: action did not start")
	// ErrCrashLoop is reported by Pool.Health when processes die at start over and over; the
	// pool keeps retrying with backoff, and queued items wait.
	ErrCrashLoop = errors.New("stdio: action is crash-looping")
	// ErrCrashed ends a delivery whose process exited or closed stdout mid-delivery (retryable).
	ErrCrashed = errors.New("stdio: action crashed")
	// ErrTimeout ends a delivery that outlived Config.ItemTimeout (retryable).
	ErrTimeout = errors.New("stdio: item timed out")
	// ErrProtocol ends a delivery whose process broke the protocol: a line too long, not JSON,
	// not an object, of an unknown type, or for another delivery (retryable; the process is
	// replaced).
	ErrProtocol = errors.New("stdio: protocol violation")
	// ErrLineTooLong is wrapped by ErrProtocol errors for a line over MaxLineBytes.
	ErrLineTooLong = errors.New("stdio: line too long")
	// ErrAction is carried by a Result whose action answered "error"; errors.As to *ActionError
	// gives the message and whether it was retryable.
	ErrAction = errors.New("stdio: action answered error")
	// ErrBadItem is returned by Submit for an item that cannot be written as one protocol line
	// (a payload that is not valid JSON, or over MaxLineBytes once framed).
	ErrBadItem = errors.New("stdio: bad item")
	// ErrConfig is returned by Start for a Config it cannot run (no command, negative counts).
	ErrConfig = errors.New("stdio: bad config")
)

// ActionError is an "error" answer of the action, carried in Result.Err (wrapping ErrAction).
type ActionError struct {
	Message   string // the action's message, as sent
	Retryable bool   // whether the action said the delivery may be retried
}

// Error returns the action's message.
func (e *ActionError) Error() string {
	kind := "non-retryable"
	if e.Retryable {
		kind = "retryable"
	}
	return "action answered " + kind + " error: " + e.Message
}

// Unwrap makes errors.Is(err, ErrAction) true.
func (e *ActionError) Unwrap() error { return ErrAction }
