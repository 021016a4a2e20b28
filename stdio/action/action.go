// Package action is the Go SDK for writing Millstream actions: it reads the engine's lines on
// stdin, decodes each item's payload into your type, calls your function and writes its
// answers on stdout, so a Go action is one call in main:
//
//	func main() {
//		action.Map(func(ctx action.Context[Config], in Listing) ([]Priced, error) {
//			if in.SurfaceM2 == 0 {
//				return nil, ctx.Abstain("no surface area")
//			}
//			ctx.Metric("works_estimate_eur", estimate(in), nil)
//			return []Priced{price(in, ctx.Config())}, nil
//		})
//	}
//
// Outputs keep the item's key unless MapKeyed sets one. An error ends the delivery with
// "error" (not retryable unless wrapped with Retryable); a panic is answered the same way. A
// config that does not decode into C is answered per item with a non-retryable error, never a
// crash. Logs go to stderr (Context.Log). The SDK declares a delivery window (Window), so
// the engine writes items ahead and the action never waits on a pipe round trip, and batch
// envelopes, so the items written together come on one line and their answers go back on
// one (answers to an item that came on a line of its own go on lines, as do single
// answers). By default it handles one item at a time, in order. On shutdown, or when stdin
// ends, the program exits 0.
//
// A function that waits on a call (HTTP, a database, a model server) runs many deliveries at
// once with the Concurrency option:
//
//	action.Map(func(ctx action.Context[Config], in Request) ([]Reply, error) {
//		req, _ := http.NewRequestWithContext(ctx, "GET", url(in), nil) // ctx is a context.Context
//		...
//	}, action.Concurrency(action.ConcurrentWindow))
//
// Each call runs on its own goroutine, up to n at once, and is answered as it returns, in any
// order; the SDK then declares "concurrent" and "cancel" in ready (docs/protocol.md). When the
// engine cancels a delivery (its --timeout passed), the Context of that call is cancelled and
// the SDK answers a retryable error at once; whatever the call returns later is dropped. The
// engine keeps per-key order by never having two deliveries of one key in flight, so the
// calls at once are of different keys (or keyless).
//
// State per key: when the action line keeps state (--state PORT, which hello names), the SDK
// declares "state": true and a function reads its key's state with Context.State and stages a
// new one with Context.SetState or Context.ClearState. What it stages is written only when it
// returns without error, before its done; a state the engine would refuse (a keyless item, an
// inlet that keeps no state, a state over the inlet's max-bytes) fails the item here, with the
// engine's words. Not calling either leaves the state as it was.
package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/ankka-flow/millrace/stdio"
)

// Window is the number of deliveries the SDK accepts written ahead, declared in its ready
// line, when it handles one at a time.
const Window = 64

// ConcurrentWindow is the concurrency to give a function that waits on a call: 128 covers a
// sidecar batch (100 records) in one wave, where 64 would take two waves of calls per batch
// (about 2,200 records/s at 20 ms a call instead of 4,000 and more, docs/protocol.md).
const ConcurrentWindow = 128

// Option tunes Map, MapKeyed, Serve and ServeKeyed.
type Option func(*options)

type options struct {
	concurrency int
}

// Concurrency runs up to n calls of the function at once, each on its own goroutine, and
// declares a window of n: for a function that waits on a call, ConcurrentWindow. n of 1 (the
// default) is one call at a time, in order; n below 1 panics.
func Concurrency(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("action.Concurrency(%d): want at least 1 (1 is one at a time)", n))
	}
	return func(o *options) { o.concurrency = n }
}

// NoConfig is a config type for actions that take none: any config decodes into it.
type NoConfig = struct{}

// Keyed is one output of MapKeyed. An empty Key keeps the item's key; Outlet may be left
// empty when the action has one outlet besides its --dead-letter and --fallback ports.
type Keyed[T any] struct {
	Key    string
	Value  T
	Outlet string
}

// Context is what a function knows about the item it handles. It is valid only during the
// call. It is a context.Context: with Concurrency it is cancelled when the engine cancels the
// delivery (its --timeout passed) or stops reading; one at a time, it is never cancelled.
// Its Done, Err, Deadline and Value are safe from other goroutines; the rest is not.
type Context[C any] struct {
	s *session[C]
	d *delivery
}

var _ context.Context = Context[NoConfig]{}

// Deadline implements context.Context: there is none.
func (c Context[C]) Deadline() (time.Time, bool) { return c.d.ctx().Deadline() }

// Done implements context.Context: closed when the delivery is cancelled.
func (c Context[C]) Done() <-chan struct{} { return c.d.ctx().Done() }

// Err implements context.Context.
func (c Context[C]) Err() error { return c.d.ctx().Err() }

// Value implements context.Context.
func (c Context[C]) Value(key any) any { return c.d.ctx().Value(key) }

// Config returns the action's config, decoded from hello into C once at start.
func (c Context[C]) Config() C { return c.s.config }

// Vars returns the run's variables from hello.
func (c Context[C]) Vars() map[string]any { return c.s.vars }

// Key returns the item's key; ok is false when it has none (or one that is not UTF-8, see
// KeyBase64).
func (c Context[C]) Key() (key string, ok bool) {
	if c.d.item.Key == nil {
		return "", false
	}
	return *c.d.item.Key, true
}

// KeyBase64 returns, base64-encoded, an item key that is not UTF-8 ("" otherwise).
func (c Context[C]) KeyBase64() string { return c.d.item.KeyBase64 }

// ID returns the item's stable id (the same on every attempt).
func (c Context[C]) ID() string { return c.d.item.ID }

// Delivery returns this attempt's delivery id.
func (c Context[C]) Delivery() string { return c.d.item.Delivery }

// Attempt returns the attempt number, from 1.
func (c Context[C]) Attempt() int { return c.d.item.Attempt }

// IdempotencyKey returns the key that is the same on every attempt of this item: pass it to
// any outside system the action changes, so a retried request is applied once.
func (c Context[C]) IdempotencyKey() string { return c.d.item.IdempotencyKey }

// Run returns the id of the run the item belongs to ("" when the engine sent none).
func (c Context[C]) Run() string { return c.d.item.Run }

// Headers returns the record's headers, in order; read only.
func (c Context[C]) Headers() []stdio.Header { return c.d.item.Headers }

// Inlet returns the name of the inlet the item came from ("" when the action has one).
func (c Context[C]) Inlet() string { return c.d.item.Inlet }

// Topic returns the Kafka topic of the record.
func (c Context[C]) Topic() string { return c.d.item.Topic }

// Partition returns the Kafka partition of the record.
func (c Context[C]) Partition() int32 { return c.d.item.Partition }

// Offset returns the Kafka offset of the record.
func (c Context[C]) Offset() int64 { return c.d.item.Offset }

// Timestamp returns the record's timestamp (milliseconds on the wire).
func (c Context[C]) Timestamp() time.Time { return time.UnixMilli(c.d.item.Timestamp) }

// Traceparent returns the W3C traceparent of this attempt ("" when the engine sent none): its
// parent-id is the attempt's span, so spans the action makes are its children. The engine
// already gives every output a traceparent with that span as parent; an output's own
// "traceparent" header wins.
func (c Context[C]) Traceparent() string { return c.d.item.Traceparent }

// Tracestate returns the W3C tracestate that came with the item's traceparent ("" when none).
func (c Context[C]) Tracestate() string { return c.d.item.Tracestate }

// StateRaw returns the state of the item's key as the engine sent it, the JSON the action last
// staged; nil when the key has none.
func (c Context[C]) StateRaw() json.RawMessage { return c.d.item.State }

// State decodes the key's state into v; ok is false, v untouched, when the key has none.
func (c Context[C]) State(v any) (ok bool, err error) {
	if len(c.d.item.State) == 0 {
		return false, nil
	}
	if err := gojson.Unmarshal(c.d.item.State, v); err != nil {
		return false, fmt.Errorf("the state of item %s does not decode into %T: %w", c.d.item.ID, v, err)
	}
	return true, nil
}

// SetState stages v, encoded as JSON, as the key's new state (nil deletes it, as ClearState);
// the last call wins. It is applied only if the function returns without error. A state the
// engine would refuse is returned as an error, and fails the item even if ignored.
func (c Context[C]) SetState(v any) error {
	var raw []byte
	switch p := v.(type) {
	case json.RawMessage:
		raw = p
	default:
		b, err := gojson.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding the state as JSON: %w", err)
		}
		raw = b
	}
	return c.d.stage(c.s.inlets, raw)
}

// ClearState stages the deletion of the key's state: its next item has none.
func (c Context[C]) ClearState() { _ = c.d.stage(c.s.inlets, nil) }

// Abstain returns an error that answers the delivery with "abstain": the engine hands the
// item to the step's fallback. Return it from the function.
func (c Context[C]) Abstain(reason string) error { return &abstainError{reason: reason} }

// Metric records a custom measurement with this attempt.
func (c Context[C]) Metric(name string, value float64, labels map[string]string) {
	c.d.send(&stdio.Message{Type: stdio.TypeMetric, Delivery: c.d.item.Delivery, Name: name, Value: value, Labels: labels})
}

// Log returns a logger writing JSON lines to stderr, tagged with the delivery, item and
// attempt; the engine re-emits each line with its own fields.
func (c Context[C]) Log() *slog.Logger {
	return c.s.log.With("delivery", c.d.item.Delivery, "item", c.d.item.ID, "attempt", c.d.item.Attempt)
}

type abstainError struct{ reason string }

func (e *abstainError) Error() string { return "abstain: " + e.reason }

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err as retryable: the engine retries the item with backoff instead of
// failing it for good. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err: err}
}

// IsRetryable reports whether err, or an error it wraps, was marked by Retryable.
func IsRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

// Map runs fn for every item until shutdown, then exits the program with status 0 (1 when
// the engine's lines cannot be read). Each returned value is one output with the item's key.
// One call at a time, unless an option says otherwise (Concurrency).
func Map[C, In, Out any](fn func(Context[C], In) ([]Out, error), opts ...Option) {
	exit(Serve(os.Stdin, os.Stdout, os.Stderr, fn, opts...))
}

// MapKeyed is Map for functions that choose each output's key or outlet.
func MapKeyed[C, In, Out any](fn func(Context[C], In) ([]Keyed[Out], error), opts ...Option) {
	exit(ServeKeyed(os.Stdin, os.Stdout, os.Stderr, fn, opts...))
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "action:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve is Map over the given streams, returning instead of exiting: nil on shutdown or
// the end of in, else the error that stopped it (a line from the engine that breaks the
// protocol, or a write error). With Concurrency it returns once every call has returned.
func Serve[C, In, Out any](in io.Reader, out, logs io.Writer, fn func(Context[C], In) ([]Out, error), opts ...Option) error {
	return serve(in, out, logs, opts, func(c Context[C], v In) error {
		outs, err := fn(c, v)
		if err != nil {
			return err
		}
		for i := range outs {
			if err := c.d.emit(outs[i], nil, ""); err != nil {
				return err
			}
		}
		return nil
	})
}

// ServeKeyed is MapKeyed over the given streams, returning instead of exiting.
func ServeKeyed[C, In, Out any](in io.Reader, out, logs io.Writer, fn func(Context[C], In) ([]Keyed[Out], error), opts ...Option) error {
	return serve(in, out, logs, opts, func(c Context[C], v In) error {
		outs, err := fn(c, v)
		if err != nil {
			return err
		}
		for i := range outs {
			var key *string
			if outs[i].Key != "" {
				key = &outs[i].Key
			}
			if err := c.d.emit(outs[i].Value, key, outs[i].Outlet); err != nil {
				return err
			}
		}
		return nil
	})
}
