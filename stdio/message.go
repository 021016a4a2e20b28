package stdio

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Protocol is the action protocol version sent in hello.
const Protocol = 1

// MaxLineBytes is the largest line, newline excluded, either side may send: 8 MiB.
const MaxLineBytes = 8 << 20

// Message types of the action protocol.
const (
	TypeHello    = "hello"
	TypeReady    = "ready"
	TypeItem     = "item"
	TypeEmit     = "emit"
	TypeMetric   = "metric"
	TypeDone     = "done"
	TypeError    = "error"
	TypeAbstain  = "abstain"
	TypeShutdown = "shutdown"
	// TypeState stages a new state for the key of a delivery in flight,
	// {"type":"state","delivery":…,"state":V} (V null deletes it), applied only when the
	// delivery ends done. Only an action whose ready declared "state": true may send it.
	TypeState = "state"
	// TypeBatch is the batch envelope, {"type":"batch","messages":[…]}: several messages on
	// one line, each meaning what it means on its own line (see Packer and SplitBatch).
	TypeBatch = "batch"
	// TypeCancel, {"type":"cancel","delivery":…}, tells an action that declared "cancel": true
	// that the engine gave up on a delivery (its item timeout passed): the action stops it and
	// answers it with any final answer, which the engine drops with everything else it sends
	// for that delivery.
	TypeCancel = "cancel"
)

// Header is one record header. Value holds a UTF-8 value; ValueBase64 holds, base64-encoded,
// a value that is not UTF-8. Both absent means a header with a null value.
type Header struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"valueBase64,omitempty"`
}

// Hello is what the engine tells every process first: the action, its config (already
// resolved, raw JSON, sent as given) and the run's variables. Type and protocol are added on
// the wire.
type Hello struct {
	Action  string          `json:"action"`
	Version string          `json:"version,omitempty"`
	Config  json.RawMessage `json:"config,omitempty"`
	Vars    map[string]any  `json:"vars,omitempty"`
}

// Item is one delivery's input. The caller of Pool.Submit fills everything but Delivery and
// Attempt, which the pool sets for each attempt. Payload is raw JSON passed through unchanged
// (an empty value is null); Key is nil when the record has none, and KeyBase64 carries a key
// that is not UTF-8.
type Item struct {
	Delivery       string          `json:"delivery"`
	ID             string          `json:"id"`
	Run            string          `json:"run,omitempty"`
	Key            *string         `json:"key,omitempty"`
	KeyBase64      string          `json:"keyBase64,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Headers        []Header        `json:"headers,omitempty"`
	Inlet          string          `json:"inlet,omitempty"`
	Topic          string          `json:"topic,omitempty"`
	Partition      int32           `json:"partition"`
	Offset         int64           `json:"offset"`
	Timestamp      int64           `json:"timestamp"` // milliseconds since the epoch
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	// State is the key's state, the JSON value the action last staged for it; nil (never
	// null) when the key has none, which leaves "state" out of the line.
	State json.RawMessage `json:"state,omitempty"`
	// Trace is the W3C trace context of the attempt, sent as "traceparent" naming its SpanID
	// (none when zero); Tracestate, the input's tracestate, is sent as "tracestate" beside it.
	Trace      TraceContext `json:"-"`
	Tracestate string       `json:"tracestate,omitempty"`
}

// Emit is one staged output. Outlet may be empty when the action has one outlet; Key nil means
// no key (never an empty one); Payload is the raw JSON the action wrote.
type Emit struct {
	Outlet    string          `json:"outlet,omitempty"`
	Key       *string         `json:"key,omitempty"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []Header        `json:"headers,omitempty"`
}

// StagedState is the state a delivery staged with its last state message: Value is the JSON
// the action wrote, nil when it deleted the state (wrote null).
type StagedState struct {
	Value json.RawMessage
}

// StateInlet is what hello says of one inlet whose items keep state: its TTL as a Go duration
// ("" when states never expire) and the most bytes one state may be.
type StateInlet struct {
	TTL      string `json:"ttl,omitempty"`
	MaxBytes int    `json:"maxBytes"`
}

// Metric is a custom measurement an action recorded with an attempt.
type Metric struct {
	Name   string            `json:"name"`
	Value  float64           `json:"value"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Message is any line of the protocol, in either direction: the union of every field of every
// type, as decoded by DecodeMessage. Which fields mean something depends on Type.
type Message struct {
	Type     string `json:"type"`
	Delivery string `json:"delivery,omitempty"`

	// hello
	Protocol int             `json:"protocol,omitempty"`
	Action   string          `json:"action,omitempty"`
	Version  string          `json:"version,omitempty"`
	Config   json.RawMessage `json:"config,omitempty"`
	Vars     map[string]any  `json:"vars,omitempty"`

	// ready: deliveries the action accepts written ahead (0 or 1: one at a time), and whether
	// it reads and writes batch envelopes.
	Window int  `json:"window,omitempty"`
	Batch  bool `json:"batch,omitempty"`
	// ready: the action runs deliveries at once, answering them in any order and interleaving
	// their messages (Concurrent), and it understands cancel messages (Cancel). A value other
	// than a boolean makes the line a bad-field violation.
	Concurrent bool `json:"concurrent,omitempty"`
	Cancel     bool `json:"cancel,omitempty"`

	// state, raw as given. item: the key's state (nil: none). state: the new state, null to
	// delete it; nil when the message has no "state" member, which is not the same. ready:
	// true when the action keeps state (DeclaresState). hello: one StateInlet per inlet that
	// keeps state, by inlet (HelloState).
	State json.RawMessage `json:"state,omitempty"`

	// batch: the envelope's messages, the raw JSON array as given (SplitBatch reads a line's
	// messages without copying them).
	Messages json.RawMessage `json:"messages,omitempty"`

	// item (and emit: Key, KeyBase64, Payload, Headers)
	ID             string          `json:"id,omitempty"`
	Run            string          `json:"run,omitempty"`
	Key            *string         `json:"key,omitempty"`
	KeyBase64      string          `json:"keyBase64,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Headers        []Header        `json:"headers,omitempty"`
	Inlet          string          `json:"inlet,omitempty"`
	Topic          string          `json:"topic,omitempty"`
	Partition      int32           `json:"partition,omitempty"`
	Offset         int64           `json:"offset,omitempty"`
	Timestamp      int64           `json:"timestamp,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Traceparent    string          `json:"traceparent,omitempty"` // W3C: the attempt's span
	Tracestate     string          `json:"tracestate,omitempty"`

	// emit
	Outlet string `json:"outlet,omitempty"`

	// metric
	Name   string            `json:"name,omitempty"`
	Value  float64           `json:"value,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`

	// error: Message is the text ("error" is accepted as an alias).
	Message   string `json:"message,omitempty"`
	Error     string `json:"error,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`

	// abstain
	Reason string `json:"reason,omitempty"`
}

// DeclaresState reports whether a ready message declares "state": true.
func (m *Message) DeclaresState() bool { return string(bytes.TrimSpace(m.State)) == "true" }

// HelloState decodes a hello's "state": the inlets whose items keep state; nil when it has
// none.
func (m *Message) HelloState() (map[string]StateInlet, error) {
	if len(m.State) == 0 {
		return nil, nil
	}
	var s map[string]StateInlet
	if err := json.Unmarshal(m.State, &s); err != nil {
		return nil, fmt.Errorf("hello's \"state\" is not an object of inlets ({\"PORT\":{\"maxBytes\":N}}): %w", err)
	}
	return s, nil
}
