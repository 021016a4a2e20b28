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
// answers); it still handles one item at a time, in order. On shutdown, or when stdin ends, the program exits 0.
//
// State per key: when the action line keeps state (--state PORT, which hello names), the SDK
// declares "state": true and a function reads its key's state with Context.State and stages a
// new one with Context.SetState or Context.ClearState. What it stages is written only when it
// returns without error, before its done; a state the engine would refuse (a keyless item, an
// inlet that keeps no state, a state over the inlet's max-bytes) fails the item here, with the
// engine's words. Not calling either leaves the state as it was.
package action

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/ankka-flow/millrace/stdio"
)

// Window is the number of deliveries the SDK accepts written ahead, declared in its ready
// line.
const Window = 64

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
// call and not safe for use from other goroutines.
type Context[C any] struct {
	s *session[C]
}

// Config returns the action's config, decoded from hello into C once at start.
func (c Context[C]) Config() C { return c.s.config }

// Vars returns the run's variables from hello.
func (c Context[C]) Vars() map[string]any { return c.s.vars }

// Key returns the item's key; ok is false when it has none (or one that is not UTF-8, see
// KeyBase64).
func (c Context[C]) Key() (key string, ok bool) {
	if c.s.item.Key == nil {
		return "", false
	}
	return *c.s.item.Key, true
}

// KeyBase64 returns, base64-encoded, an item key that is not UTF-8 ("" otherwise).
func (c Context[C]) KeyBase64() string { return c.s.item.KeyBase64 }

// ID returns the item's stable id (the same on every attempt).
func (c Context[C]) ID() string { return c.s.item.ID }

// Delivery returns this attempt's delivery id.
func (c Context[C]) Delivery() string { return c.s.item.Delivery }

// Attempt returns the attempt number, from 1.
func (c Context[C]) Attempt() int { return c.s.item.Attempt }

// IdempotencyKey returns the key that is the same on every attempt of this item: pass it to
// any outside system the action changes, so a retried request is applied once.
func (c Context[C]) IdempotencyKey() string { return c.s.item.IdempotencyKey }

// Run returns the id of the run the item belongs to ("" when the engine sent none).
func (c Context[C]) Run() string { return c.s.item.Run }

// Headers returns the record's headers, in order; read only.
func (c Context[C]) Headers() []stdio.Header { return c.s.item.Headers }

// Inlet returns the name of the inlet the item came from ("" when the action has one).
func (c Context[C]) Inlet() string { return c.s.item.Inlet }

// Topic returns the Kafka topic of the record.
func (c Context[C]) Topic() string { return c.s.item.Topic }

// Partition returns the Kafka partition of the record.
func (c Context[C]) Partition() int32 { return c.s.item.Partition }

// Offset returns the Kafka offset of the record.
func (c Context[C]) Offset() int64 { return c.s.item.Offset }

// Timestamp returns the record's timestamp (milliseconds on the wire).
func (c Context[C]) Timestamp() time.Time { return time.UnixMilli(c.s.item.Timestamp) }

// Traceparent returns the W3C traceparent of this attempt ("" when the engine sent none): its
// parent-id is the attempt's span, so spans the action makes are its children. The engine
// already gives every output a traceparent with that span as parent; an output's own
// "traceparent" header wins.
func (c Context[C]) Traceparent() string { return c.s.item.Traceparent }

// Tracestate returns the W3C tracestate that came with the item's traceparent ("" when none).
func (c Context[C]) Tracestate() string { return c.s.item.Tracestate }

// StateRaw returns the state of the item's key as the engine sent it, the JSON the action last
// staged; nil when the key has none.
func (c Context[C]) StateRaw() json.RawMessage { return c.s.item.State }

// State decodes the key's state into v; ok is false, v untouched, when the key has none.
func (c Context[C]) State(v any) (ok bool, err error) {
	if len(c.s.item.State) == 0 {
		return false, nil
	}
	if err := gojson.Unmarshal(c.s.item.State, v); err != nil {
		return false, fmt.Errorf("the state of item %s does not decode into %T: %w", c.s.item.ID, v, err)
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
	return c.s.stage(raw)
}

// ClearState stages the deletion of the key's state: its next item has none.
func (c Context[C]) ClearState() { _ = c.s.stage(nil) }

// Abstain returns an error that answers the delivery with "abstain": the engine hands the
// item to the step's fallback. Return it from the function.
func (c Context[C]) Abstain(reason string) error { return &abstainError{reason: reason} }

// Metric records a custom measurement with this attempt.
func (c Context[C]) Metric(name string, value float64, labels map[string]string) {
	c.s.send(&stdio.Message{Type: stdio.TypeMetric, Delivery: c.s.item.Delivery, Name: name, Value: value, Labels: labels})
}

// Log returns a logger writing JSON lines to stderr, tagged with the delivery, item and
// attempt; the engine re-emits each line with its own fields.
func (c Context[C]) Log() *slog.Logger {
	return c.s.log.With("delivery", c.s.item.Delivery, "item", c.s.item.ID, "attempt", c.s.item.Attempt)
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
func Map[C, In, Out any](fn func(Context[C], In) ([]Out, error)) {
	exit(Serve(os.Stdin, os.Stdout, os.Stderr, fn))
}

// MapKeyed is Map for functions that choose each output's key or outlet.
func MapKeyed[C, In, Out any](fn func(Context[C], In) ([]Keyed[Out], error)) {
	exit(ServeKeyed(os.Stdin, os.Stdout, os.Stderr, fn))
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
// protocol, or a write error).
func Serve[C, In, Out any](in io.Reader, out, logs io.Writer, fn func(Context[C], In) ([]Out, error)) error {
	return serve(in, out, logs, func(s *session[C], v In) error {
		outs, err := fn(Context[C]{s: s}, v)
		if err != nil {
			return err
		}
		for i := range outs {
			if err := s.emit(outs[i], nil, ""); err != nil {
				return err
			}
		}
		return nil
	})
}

// ServeKeyed is MapKeyed over the given streams, returning instead of exiting.
func ServeKeyed[C, In, Out any](in io.Reader, out, logs io.Writer, fn func(Context[C], In) ([]Keyed[Out], error)) error {
	return serve(in, out, logs, func(s *session[C], v In) error {
		outs, err := fn(Context[C]{s: s}, v)
		if err != nil {
			return err
		}
		for i := range outs {
			var key *string
			if outs[i].Key != "" {
				key = &outs[i].Key
			}
			if err := s.emit(outs[i].Value, key, outs[i].Outlet); err != nil {
				return err
			}
		}
		return nil
	})
}

// answersHeld bounds the answer bytes the SDK packs before it writes them even though more
// input is waiting.
const answersHeld = 1 << 20

// session is one conversation with the engine.
type session[C any] struct {
	w         *bufio.Writer
	out       stdio.Packer // the answers not yet written, packed into envelopes
	log       *slog.Logger
	config    C
	configErr error
	vars      map[string]any
	item      stdio.Message
	emitted   int
	inlets    map[string]stdio.StateInlet // from hello: the inlets that keep state
	staged    bool                        // the function staged a state (state: nil deletes)
	state     json.RawMessage
	stateErr  error // a state the engine would refuse: the item's error
}

// stage stages raw (nil: delete) as the item's new state, refusing what the engine refuses.
func (s *session[C]) stage(raw json.RawMessage) error {
	it := &s.item
	lim, ok := s.inlets[it.Inlet]
	var err error
	switch {
	case it.Key == nil && it.KeyBase64 == "":
		err = fmt.Errorf("item %s has no key, so it has no state: a state message is only for keyed records (route keyless ones elsewhere, or stage no state for them)", it.ID)
	case !ok:
		err = fmt.Errorf("inlet %s keeps no state: add --state %s to the action line, or stage no state for its items", it.Inlet, it.Inlet)
	case string(raw) == "null":
		raw = nil
	case lim.MaxBytes > 0 && len(raw) > lim.MaxBytes:
		err = fmt.Errorf("the state staged for item %s is %d bytes, over max-bytes %d (--state %s,max-bytes=…): keep less per key, or raise max-bytes", it.ID, len(raw), lim.MaxBytes, it.Inlet)
	}
	if err != nil {
		s.stateErr = err
		return err
	}
	s.staged, s.state = true, raw
	return nil
}

func (s *session[C]) send(m *stdio.Message) { s.out.AppendMessage(m) }

// flush writes the answers packed so far, then everything buffered.
func (s *session[C]) flush() error {
	s.w.Write(s.out.Bytes())
	s.out.Reset()
	return s.w.Flush()
}

// emit stages one output, keeping the item's key unless key is set.
func (s *session[C]) emit(v any, key *string, outlet string) error {
	var payload []byte
	switch p := v.(type) {
	case json.RawMessage:
		payload = p
	default:
		b, err := gojson.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding output %d as JSON: %w", s.emitted+1, err)
		}
		payload = b
	}
	m := stdio.Message{Type: stdio.TypeEmit, Delivery: s.item.Delivery, Outlet: outlet, Key: key, Payload: payload}
	if key == nil {
		m.Key, m.KeyBase64 = s.item.Key, s.item.KeyBase64
	}
	s.emitted++
	s.send(&m)
	return nil
}

func serve[C, In any](in io.Reader, out, logs io.Writer, handle func(*session[C], In) error) error {
	s := &session[C]{w: bufio.NewWriterSize(out, 64<<10), log: slog.New(slog.NewJSONHandler(logs, nil))}
	lr := stdio.NewLineReader(in, stdio.MaxLineBytes)
	var m stdio.Message
	helloSeen, stop := false, false
	// one is what a message means, on its own line or in an envelope.
	one := func(m *stdio.Message) error {
		switch m.Type {
		case stdio.TypeHello:
			helloSeen = true
			s.vars = m.Vars
			if cfg := m.Config; len(cfg) > 0 && string(cfg) != "null" {
				if err := gojson.Unmarshal(cfg, &s.config); err != nil {
					var zero C
					s.configErr = fmt.Errorf("the action's config does not decode into %T: %w (fix the config; every item fails until then)", zero, err)
					s.log.Error("bad config", "err", s.configErr.Error())
				}
			}
			inlets, err := m.HelloState()
			if err != nil {
				s.log.Error("bad hello", "err", err.Error())
			}
			s.inlets = inlets
			ready := stdio.Message{Type: stdio.TypeReady, Window: Window, Batch: true}
			if len(inlets) > 0 { // declared only when the action line keeps state
				ready.State = json.RawMessage(`true`)
			}
			// ready is a line of its own: the engine reads nothing else first.
			s.w.Write(s.out.Bytes())
			s.out.Reset()
			s.w.Write(stdio.AppendMessage(nil, &ready))
		case stdio.TypeShutdown:
			stop = true
		case stdio.TypeItem:
			if !helloSeen {
				return errors.New("an item before hello")
			}
			s.item = *m
			answer(s, handle)
			if s.out.Len() >= answersHeld {
				s.w.Write(s.out.Bytes())
				s.out.Reset()
			}
		}
		return nil
	}
	inBatch := func(msg []byte) error {
		if stop {
			return nil // what follows a shutdown is not read
		}
		if err := stdio.DecodeInBatch(msg, &m); err != nil {
			return err
		}
		return one(&m)
	}
	for !stop {
		if lr.Buffered() == 0 {
			// Nothing more is waiting: answers go out now, not when the buffer fills.
			if err := s.flush(); err != nil {
				return fmt.Errorf("writing to stdout: %w", err)
			}
		}
		line, err := lr.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			// Answers take the framing of what they answer: those to the items of an
			// envelope go in one, those to a line on lines (an engine that wrote lines, or
			// a tool that knows no envelopes, reads lines back).
			s.out.Bytes()
			s.out.Single = false
			var isBatch bool
			if isBatch, err = stdio.SplitBatch(line, inBatch); !isBatch {
				s.out.Single = true
				if err = stdio.DecodeMessage(line, &m); err == nil {
					err = one(&m)
				}
			}
		}
		if err != nil {
			s.flush()
			return fmt.Errorf("reading the engine's line: %w", err)
		}
	}
	return s.flush()
}

// answer runs the function for the current item and writes its answer line.
func answer[C, In any](s *session[C], handle func(*session[C], In) error) {
	s.emitted = 0
	s.staged, s.state, s.stateErr = false, nil, nil
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic", "delivery", s.item.Delivery, "item", s.item.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		if s.configErr != nil {
			return s.configErr
		}
		var v In
		if raw, ok := any(&v).(*json.RawMessage); ok {
			*raw = s.item.Payload
		} else if len(s.item.Payload) > 0 {
			if err := gojson.Unmarshal(s.item.Payload, &v); err != nil {
				return fmt.Errorf("the payload of item %s does not decode into %T: %w", s.item.ID, v, err)
			}
		}
		if err := handle(s, v); err != nil {
			return err
		}
		return s.stateErr
	}()
	d := s.item.Delivery
	var ab *abstainError
	switch {
	case err == nil:
		if s.staged {
			state := s.state
			if state == nil {
				state = json.RawMessage(`null`)
			}
			s.send(&stdio.Message{Type: stdio.TypeState, Delivery: d, State: state})
		}
		s.send(&stdio.Message{Type: stdio.TypeDone, Delivery: d})
	case errors.As(err, &ab):
		s.send(&stdio.Message{Type: stdio.TypeAbstain, Delivery: d, Reason: ab.reason})
	default:
		s.send(&stdio.Message{Type: stdio.TypeError, Delivery: d, Message: err.Error(), Retryable: IsRetryable(err)})
	}
}
