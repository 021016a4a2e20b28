package bridge

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// Headers the bridge adds to a record it routes to the --dead-letter or --fallback outlet. The
// record itself (key, value, headers) is left as it came.
const (
	headerError           = "millrace-error"            // why the record failed for good
	headerAttempts        = "millrace-attempts"         // attempts made, in decimal
	headerSourceTopic     = "millrace-source-topic"     // where the record was read
	headerSourcePartition = "millrace-source-partition" // in decimal
	headerSourceOffset    = "millrace-source-offset"    // in decimal
	headerAbstainReason   = "millrace-abstain-reason"   // --fallback: the action's reason
)

// maxHeaderError caps the error text written in a dead letter's header.
const maxHeaderError = 4 << 10

var nullJSON = json.RawMessage("null")

// recordID is the item id of a record: "topic/partition/offset".
func recordID(topic string, partition int32, offset int64) string {
	var stack [128]byte // one allocation, the string, for the usual topic lengths
	return string(appendRecordID(stack[:0], topic, partition, offset))
}

func appendRecordID(dst []byte, topic string, partition int32, offset int64) []byte {
	dst = append(dst, topic...)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, offset, 10)
}

// appendNames appends the item id of record in and its idempotency key to dst, the key last.
func (c *conversation) appendNames(dst []byte, b *flowv1.Batch, topic string, in *flowv1.InputRecord) []byte {
	dst = appendRecordID(dst, topic, b.GetPartition(), in.GetOffset())
	return actionconf.AppendIdempotencyKey(dst, c.s.opts.ReplayGeneration, c.start.GetPipeline(), c.s.opts.Action.Name, topic, b.GetPartition(), in.GetOffset())
}

// item maps one input record to an action item; names is appendNames' text for it (the
// batch's items share one string, one allocation for the whole batch).
func (c *conversation) item(b *flowv1.Batch, topic string, in *flowv1.InputRecord, names string) stdio.Item {
	r := in.GetRecord()
	n := len(names) - actionconf.IdempotencyKeyLen
	it := stdio.Item{
		ID:             names[:n],
		Run:            c.id,
		Inlet:          b.GetInlet(),
		Topic:          topic,
		Partition:      b.GetPartition(),
		Offset:         in.GetOffset(),
		Timestamp:      in.GetTimestampMs(),
		IdempotencyKey: names[n:],
	}
	// A value that is not JSON is refused by Submit (engine.ErrBadItem): it never reaches the
	// action.
	it.Payload = json.RawMessage(r.GetValue())
	if len(it.Payload) == 0 {
		it.Payload = nullJSON // an empty value is the payload null
	}
	if r.Key != nil {
		it.Key, it.KeyBase64 = textOrBase64(r.Key)
	}
	for _, h := range r.GetHeaders() {
		sh := stdio.Header{Key: h.GetKey()}
		sh.Value, sh.ValueBase64 = textOrBase64(h.GetValue())
		it.Headers = append(it.Headers, sh)
	}
	it.Trace, it.Tracestate = itemTrace(r.GetHeaders(), c.s.tracer != nil)
	return it
}

// textOrBase64 returns b as text when it is UTF-8, else base64 (standard, padded) for the
// sibling field.
func textOrBase64(b []byte) (*string, string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

// bytesOf is the inverse of textOrBase64 for what an action sent.
func bytesOf(text *string, b64, what string) ([]byte, error) {
	switch {
	case text != nil:
		return []byte(*text), nil
	case b64 != "":
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%sBase64 is not standard padded base64: %w", what, err)
		}
		return b, nil
	}
	return nil, nil
}

// settled is what became of one record of a batch: done, fallback or dead_letter (its
// messages are to be sent), failed (cause says why; the batch fails) or abandoned.
type settled struct {
	kind     string
	cause    error
	attempts int
}

// settle turns one record's result into its messages, appended to out for the caller to send
// (batchRun.hold); the bytes the result held of the budget stay held until the caller
// releases them. Its Emit messages are built in sc (nil: new ones), which the caller reuses
// once they are sent, unless pre holds them already.
func (c *conversation) settle(b *flowv1.Batch, topic string, in *flowv1.InputRecord, res engine.Result, sc *emitScratch, out []*flowv1.FromProcess, pre *preEmits) (settled, []*flowv1.FromProcess) {
	a := c.s.opts.Action
	id := b.GetBatchId()
	var cause error
	switch res.Outcome {
	case engine.Abandoned:
		return settled{kind: "abandoned"}, out
	case engine.Done:
		var (
			emits []*flowv1.FromProcess
			err   error
		)
		if pre != nil { // built when the record was done, for its state
			emits, err = append(out, pre.msgs...), pre.err
		} else {
			emits, err = c.emits(id, res.Emits, &res.Trace, emitTracestate(&res, in), sc, out)
		}
		if err == nil {
			return settled{kind: "done"}, emits
		}
		cause = err
		var dataErr *schema.DataError
		switch {
		case errors.Is(err, stdio.ErrProtocol):
			c.s.emit(Event{Kind: EventProtocolViolation, Conversation: c.id, Record: recordID(topic, b.GetPartition(), in.GetOffset()), Attempts: res.Attempts, Err: err})
		case configFault(err): // not the record's fault: never dead-lettered, the batch fails and is redelivered
			c.s.emit(Event{Kind: EventRegistryFailed, Conversation: c.id, Record: recordID(topic, b.GetPartition(), in.GetOffset()), Err: err})
			c.log.Warn("batch failed: an emit cannot be encoded: the schema registry did not answer, or lacks the outlet's schema; the sidecar redelivers it", "batch", id, "error", err)
			return settled{kind: "failed", cause: err, attempts: res.Attempts}, out
		case errors.As(err, &dataErr):
			c.s.emit(Event{Kind: EventEncodeFailed, Conversation: c.id, Record: recordID(topic, b.GetPartition(), in.GetOffset()), Attempts: res.Attempts, Err: err})
		}
	case engine.Abstained:
		if a.Fallback != "" {
			msg, err := c.route(id, a.Fallback, in, b, topic,
				&flowv1.Header{Key: headerAbstainReason, Value: []byte(res.Reason)})
			if err == nil {
				return settled{kind: "fallback"}, append(out, msg)
			}
			cause = err
		} else {
			cause = fmt.Errorf("the action abstained (%q) and the action config names no --fallback outlet; add --fallback PORT to route abstained records", res.Reason)
		}
	default: // Failed
		cause = res.Err
		if cause == nil {
			cause = errors.New("failed with no cause given")
		}
	}
	attempts := res.Attempts
	record := recordID(topic, b.GetPartition(), in.GetOffset())
	c.log.Warn("record failed for good", "batch", id, "record", record, "attempts", attempts, "error", cause)
	if a.DeadLetter != "" {
		errText := cause.Error()
		if len(errText) > maxHeaderError {
			errText = errText[:maxHeaderError]
		}
		msg, err := c.route(id, a.DeadLetter, in, b, topic,
			&flowv1.Header{Key: headerError, Value: []byte(errText)},
			&flowv1.Header{Key: headerAttempts, Value: []byte(strconv.Itoa(attempts))})
		if err == nil {
			c.s.emit(Event{Kind: EventRecordDeadLettered, Conversation: c.id, Record: record, Attempts: attempts, Err: cause})
			return settled{kind: "dead_letter"}, append(out, msg)
		}
		cause = fmt.Errorf("%w; and it cannot be dead-lettered: %w", cause, err)
	}
	c.s.emit(Event{Kind: EventRecordRefused, Conversation: c.id, Record: record, Attempts: attempts, Err: cause})
	return settled{kind: "failed", cause: cause, attempts: attempts}, out
}

// emitTracestate is the tracestate a Done record's emits carry: the record's, when their
// span is a child of the record's valid traceparent.
func emitTracestate(res *engine.Result, in *flowv1.InputRecord) []byte {
	if res.Trace.Parent != [8]byte{} {
		if st := recordTracestate(in.GetRecord().GetHeaders()); st != "" {
			return []byte(st)
		}
	}
	return nil
}

// finalFor is the last message of batch b once every record settled: Ack, or a single Fail
// for the first record (in record order) that failed for good. It returns nil when a record
// was abandoned: the conversation is over and the batch must not be answered.
func (c *conversation) finalFor(b *flowv1.Batch, topic string, records []settled) *flowv1.FromProcess {
	m := c.s.opts.Metrics
	id := b.GetBatchId()
	for i, r := range records {
		if r.kind == "abandoned" {
			m.items("abandoned", len(records)-i)
			return nil
		}
	}
	// The records' outcomes counted once a kind for the batch, not once a record.
	var done, fallback, deadLetter int
	defer func() {
		m.items("done", done)
		m.items("fallback", fallback)
		m.items("dead_letter", deadLetter)
	}()
	for i, r := range records {
		switch r.kind {
		case "done":
			done++
			continue
		case "fallback":
			fallback++
			continue
		case "dead_letter":
			deadLetter++
			continue
		}
		in := b.GetRecords()[i]
		m.items("failed", 1)
		m.items("abandoned", len(records)-i-1)
		m.batch("fail")
		return failMsg(id, fmt.Sprintf("record %s failed for good after %d attempt(s): %v", recordID(topic, b.GetPartition(), in.GetOffset()), r.attempts, r.cause))
	}
	m.batch("ack")
	return &flowv1.FromProcess{Message: &flowv1.FromProcess_Ack{Ack: &flowv1.Ack{BatchId: id}}}
}

// emitMessage is the four messages of one Emit, allocated together: one allocation per
// emit instead of four.
type emitMessage struct {
	msg   flowv1.FromProcess
	oneof flowv1.FromProcess_Emit
	emit  flowv1.Emit
	rec   flowv1.Record
	trace traceHeader
}

// emitScratch is the room of a batch's Emit messages until they are sent, reused from run to
// run of the batch and from batch to batch (batchBlocks): it spares two allocations a record.
// Room once handed out stays the message's until reset: a block too small for the next
// record is left to the messages in it (the collector takes it once they are sent) and a
// larger one is made.
type emitScratch struct {
	msgs []emitMessage
	used int
}

// next returns zeroed room for n messages.
func (sc *emitScratch) next(n int) []emitMessage {
	if sc.used+n > len(sc.msgs) {
		sc.msgs, sc.used = make([]emitMessage, max(n, 2*len(sc.msgs), 16)), 0
	}
	m := sc.msgs[sc.used : sc.used+n : sc.used+n]
	sc.used += n
	return m
}

// reset makes the room reusable once every message built in it was sent (encoded), letting go
// of what they referred to (their payloads).
func (sc *emitScratch) reset() {
	clear(sc.msgs[:sc.used])
	sc.used = 0
}

// emits maps a record's staged emits to Emit messages, checking each: a declared outlet
// bound by Start (when the emit names none, the one outlet that is neither --dead-letter nor --fallback), a key and header values that
// decode, and a message under max_message_bytes. Each gets the trace headers of tc and state
// (emitTrace). The messages are built in sc (nil: newly allocated) and appended to out.
func (c *conversation) emits(id uint64, staged []stdio.Emit, tc *stdio.TraceContext, state []byte, sc *emitScratch, out []*flowv1.FromProcess) ([]*flowv1.FromProcess, error) {
	var msgs []emitMessage
	if sc == nil {
		msgs = make([]emitMessage, len(staged)) // exactly the room needed: nothing reuses it
	} else {
		msgs = sc.next(len(staged))
	}
	return c.emitsInto(id, staged, tc, state, msgs, out)
}

// emitsInto is emits building the messages in msgs, room for exactly len(staged) messages.
func (c *conversation) emitsInto(id uint64, staged []stdio.Emit, tc *stdio.TraceContext, state []byte, msgs []emitMessage, out []*flowv1.FromProcess) ([]*flowv1.FromProcess, error) {
	a := c.s.opts.Action
	for i, e := range staged {
		outlet, err := a.EmitOutlet(i+1, &e)
		if err != nil {
			return nil, err
		}
		if _, ok := c.outlets[outlet]; !ok {
			return nil, fmt.Errorf("emit %d names outlet %q, to which the sidecar's Start bound no topic; check the deployment's outlet bindings", i+1, outlet)
		}
		m := &msgs[i]
		rec := &m.rec
		rec.Value = e.Payload
		key, err := bytesOf(e.Key, e.KeyBase64, "key")
		if err != nil {
			return nil, fmt.Errorf("emit %d: %w", i+1, err)
		}
		if e.Key != nil || e.KeyBase64 != "" {
			if key == nil {
				key = []byte{}
			}
			rec.Key = key // a keyless emit leaves Record.key unset, never empty
		}
		if len(e.Headers) > 0 {
			rec.Headers = make([]*flowv1.Header, 0, len(e.Headers)+2)
		}
		for _, h := range e.Headers {
			v, err := bytesOf(h.Value, h.ValueBase64, "header "+strconv.Quote(h.Key)+" value")
			if err != nil {
				return nil, fmt.Errorf("emit %d: %w", i+1, err)
			}
			rec.Headers = append(rec.Headers, &flowv1.Header{Key: h.Key, Value: v})
		}
		if c.s.enc != nil {
			if pc, ok := c.s.enc[outlet]; ok {
				if err := c.encodeEmit(i+1, pc, outlet, rec, e.Key != nil); err != nil {
					return nil, err
				}
			}
		}
		emitTrace(rec, tc, state, &m.trace)
		m.emit.BatchId, m.emit.Outlet, m.emit.Record = id, outlet, rec
		m.oneof.Emit = &m.emit
		m.msg.Message = &m.oneof
		msg := &m.msg
		if sizeBound(outlet, rec) >= c.maxBytes { // the exact size only when it may matter
			if n := proto.Size(msg); n >= c.maxBytes {
				return nil, fmt.Errorf("emit %d to outlet %q (topic %s) is %d bytes, over the %d bytes of max_message_bytes, the largest record the sidecar writes to this streamlet's outlet topics (their smallest max.message.bytes less framing, or its FLOW_MAX_MESSAGE_BYTES); emit smaller records, or raise the topic's max.message.bytes", i+1, outlet, c.outlets[outlet], n, c.maxBytes)
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

// sizeBound is at least the encoded size of an Emit of rec to outlet: every field's bytes plus
// a generous 16 bytes of tag and length for each.
func sizeBound(outlet string, rec *flowv1.Record) int {
	n := 64 + len(outlet) + len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += 48 + len(h.Key) + len(h.Value)
	}
	return n
}

// route emits the input record unchanged to outlet, with the source headers and extra
// headers added after its own. Its trace headers are the input's, as they came: a dead letter
// or a fallback is the input record, not an output of the action.
func (c *conversation) route(id uint64, outlet string, in *flowv1.InputRecord, b *flowv1.Batch, topic string, extra ...*flowv1.Header) (*flowv1.FromProcess, error) {
	r := in.GetRecord()
	if _, ok := c.outlets[outlet]; !ok {
		return nil, fmt.Errorf("outlet %q has no topic bound in the sidecar's Start", outlet)
	}
	rec := &flowv1.Record{Key: r.GetKey(), Value: r.GetValue()}
	rec.Headers = append(rec.Headers, r.GetHeaders()...)
	rec.Headers = append(rec.Headers, extra...)
	rec.Headers = append(rec.Headers,
		&flowv1.Header{Key: headerSourceTopic, Value: []byte(topic)},
		&flowv1.Header{Key: headerSourcePartition, Value: []byte(strconv.FormatInt(int64(b.GetPartition()), 10))},
		&flowv1.Header{Key: headerSourceOffset, Value: []byte(strconv.FormatInt(in.GetOffset(), 10))},
	)
	msg := &flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: id, Outlet: outlet, Record: rec}}}
	if n := proto.Size(msg); n >= c.maxBytes {
		return nil, fmt.Errorf("routed to %q (topic %s) with its headers it is %d bytes, over the %d bytes of max_message_bytes, the largest record the sidecar writes to this streamlet's outlet topics", outlet, c.outlets[outlet], n, c.maxBytes)
	}
	return msg, nil
}

func failMsg(id uint64, message string) *flowv1.FromProcess {
	return &flowv1.FromProcess{Message: &flowv1.FromProcess_Fail{Fail: &flowv1.Fail{BatchId: id, Error: &flowv1.Error{Message: message}}}}
}
