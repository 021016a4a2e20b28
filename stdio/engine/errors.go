package engine

import "errors"

// Exported sentinel errors. Errors returned by this package and carried in [Result.Err] wrap
// one of them (or stdio.ErrProtocol), so callers test with errors.Is; the wrapping text names
// the action, the delivery, the limit or the line, and the last stderr lines where a child is
// involved.
var (
	// ErrClosed is returned by Submit after Close was called, and carried by Abandoned results.
	ErrClosed = errors.New("engine: pool closed")
	// ErrStart is returned by Start, and reported through Hooks.Health, when a process cannot be
	// started or does not answer hello with ready in time.
	ErrStart = errors.New("engine: action did not start")
	// ErrNoReady is wrapped, with ErrStart, by the error of a start whose process did not answer
	// hello with ready within the ready timeout. Its text is a phrase read inside ErrStart's
	// message, after the action's name and pid, so it carries no prefix of its own.
	ErrNoReady = errors.New("did not answer hello with ready")
	// ErrCrashLoop is reported through Hooks.Health when processes die at start over and over; the
	// pool keeps retrying with backoff, and queued items wait.
	ErrCrashLoop = errors.New("engine: action is crash-looping")
	// ErrCrashed ends a delivery whose process exited or closed stdout mid-delivery (retryable).
	ErrCrashed = errors.New("engine: action crashed")
	// ErrTimeout ends a delivery that outlived Config.ItemTimeout (retryable).
	ErrTimeout = errors.New("engine: item timed out")
	// ErrAction is carried by a Result whose action answered "error"; errors.As to *ActionError
	// gives the message and whether it was retryable.
	ErrAction = errors.New("engine: action answered error")
	// ErrBadItem is returned by Submit for an item that cannot be written as one protocol line
	// (a payload that is not valid JSON, or over MaxLineBytes once framed).
	ErrBadItem = errors.New("engine: bad item")
	// ErrStateUndeclared is wrapped, with ErrStart, by the error of a start whose process did
	// not declare "state": true in ready while Config.State keeps state. Like ErrNoReady, it
	// is a phrase read inside ErrStart's message.
	ErrStateUndeclared = errors.New(`answered ready without "state": true`)
	// ErrState is carried by a Failed result whose delivery was done with a state it cannot
	// keep: for a keyless item, for an inlet that keeps no state, over the inlet's limit, or a
	// state message without "state". It is not retried (the same input stages the same state),
	// and the process keeps serving.
	ErrState = errors.New("engine: a state the item cannot keep")
	// ErrConfig is returned by Start for a Config it cannot run (no command, negative counts).
	ErrConfig = errors.New("engine: bad config")
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
