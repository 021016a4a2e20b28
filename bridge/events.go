package bridge

import (
	"fmt"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// EventKind says what an [Event] reports.
type EventKind int

// The kinds of Event, each with the fields it sets.
const (
	// EventConversationStarted: every process of a Start answered ready (Conversation).
	EventConversationStarted EventKind = iota + 1
	// EventStartFailed: the action's processes did not start, for a Start or to replace one
	// that ended; Err wraps engine.ErrStart (engine.ErrConfig for a config the pool cannot run)
	// and names the cause (a violation before ready wraps a *stdio.ProtocolError).
	EventStartFailed
	// EventProcessStarted: a process answered ready (PID).
	EventProcessStarted
	// EventProcessExited: a process ended (PID); Err is nil for a clean shutdown, else the
	// exit status, the cause and the last stderr lines.
	EventProcessExited
	// EventProtocolViolation: the action broke the protocol; Err wraps a *stdio.ProtocolError
	// (the rule, the line). Record is the record it is charged to ("" for a line between
	// deliveries). For a line on stdout, PID is the process, killed for it, whose deliveries in
	// flight are retried; for an emit to an outlet the action does not declare (PID 0), the
	// record fails for good.
	EventProtocolViolation
	// EventRecordRefused: Record failed for good after Attempts and its batch is failed (no
	// --dead-letter, or the dead letter itself could not be sent); Err is the cause: an
	// *engine.ActionError for the action's own error answer, a *stdio.ProtocolError, a timeout.
	EventRecordRefused
	// EventRecordDeadLettered: Record failed for good after Attempts and was sent to the
	// --dead-letter outlet; Err is the cause, as for EventRecordRefused.
	EventRecordDeadLettered
	// EventDecodeFailed: Record, of a registry-encoded inlet (--decode), cannot be decoded (no
	// magic byte, an id the registry does not know, bytes that do not fit the schema) and never
	// reaches the program; Err wraps the *schema.DataError. EventRecordDeadLettered or
	// EventRecordRefused follows, as for any record that failed for good.
	EventDecodeFailed
	// EventEncodeFailed: an emit of Record to a registry-encoded outlet (--encode) does not fit
	// the outlet's schema; Err wraps the *schema.DataError (its Path, its Reason). The record
	// failed for good: EventRecordDeadLettered or EventRecordRefused follows.
	EventEncodeFailed
	// EventRegistryFailed: the schema registry did not answer for Options.RegistryRetryFor
	// (Err wraps schema.ErrUnavailable), or holds no schema for a port's subject
	// (schema.ErrNoSubject): the batch is answered with Fail, nothing of it is committed and the
	// sidecar redelivers it; no record is dead-lettered for it. Record is the record whose emit
	// could not be encoded, "" when the batch could not be decoded.
	EventRegistryFailed
	// EventStderr: a process wrote a line to stderr (PID, Line); Record is the record of the
	// delivery it belongs to and Attempts that delivery's attempt, as the action tagged the
	// line (a JSON line with item and attempt, as the SDKs' item logs) or else when the engine
	// can tell (as its log line is tagged), else "" and 0. Emitted with every line: an Events callback that
	// keeps them bounds what it keeps.
	EventStderr
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventConversationStarted:
		return "conversation-started"
	case EventStartFailed:
		return "start-failed"
	case EventProcessStarted:
		return "process-started"
	case EventProcessExited:
		return "process-exited"
	case EventProtocolViolation:
		return "protocol-violation"
	case EventRecordRefused:
		return "record-refused"
	case EventRecordDeadLettered:
		return "record-dead-lettered"
	case EventDecodeFailed:
		return "decode-failed"
	case EventEncodeFailed:
		return "encode-failed"
	case EventRegistryFailed:
		return "registry-failed"
	case EventStderr:
		return "stderr"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is something that happened to the action's processes or records, told to
// [Options].Events as a value to decide on (Kind, fields, errors.Is/As on Err), where the log
// tells a person the same story.
type Event struct {
	Kind         EventKind
	Streamlet    string // the action's name
	Conversation string // the Start's conversation id ("" before one is known)
	PID          int    // the process (0 when none is concerned)
	Record       string // the record, topic/partition/offset ("" when none is concerned)
	Attempts     int    // attempts made, for the record events; the attempt, for EventStderr
	Line         string // EventStderr: the line, without its line end
	Err          error  // the cause, as each kind says
}

// emit tells e to the Events callback, if any.
func (s *Server) emit(e Event) {
	if s.opts.Events == nil {
		return
	}
	e.Streamlet = s.opts.Action.Name
	s.opts.Events(e)
}

// eventHooks chains to h the pool callbacks that turn what the pool reports into the
// conversation's events. Without an Events callback it returns h unchanged.
func (c *conversation) eventHooks(h engine.Hooks) engine.Hooks {
	if c.s.opts.Events == nil {
		return h
	}
	started, exited := h.ProcessStarted, h.ProcessExited
	h.ProcessStarted = func(pid int) {
		if started != nil {
			started(pid)
		}
		c.s.emit(Event{Kind: EventProcessStarted, Conversation: c.id, PID: pid})
	}
	h.ProcessExited = func(pid int, err error) {
		if exited != nil {
			exited(pid, err)
		}
		c.s.emit(Event{Kind: EventProcessExited, Conversation: c.id, PID: pid, Err: err})
	}
	h.ProcessStartFailed = func(err error) {
		c.s.emit(Event{Kind: EventStartFailed, Conversation: c.id, Err: err})
	}
	h.ProtocolViolation = func(pid int, it *stdio.Item, err error) {
		e := Event{Kind: EventProtocolViolation, Conversation: c.id, PID: pid, Err: err}
		if it != nil {
			e.Record = it.ID // the record's id: topic/partition/offset
		}
		c.s.emit(e)
	}
	h.Stderr = func(l engine.StderrLine) {
		c.s.emit(Event{Kind: EventStderr, Conversation: c.id, PID: l.PID, Record: l.Item, Attempts: l.Attempt, Line: l.Line})
	}
	return h
}
