package bridge

import (
	"strings"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
)

// The W3C Trace Context headers (https://www.w3.org/TR/trace-context/), as record headers.
// Kafka's header keys are case-sensitive; the bridge reads them in any case, as HTTP would, and
// writes them in lowercase.
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// maxTracestate is the longest tracestate passed on: the 512 characters the W3C Trace Context
// asks every vendor to propagate. A longer one (or one with a byte outside printable ASCII) is
// dropped whole rather than cut between list members.
const maxTracestate = 512

// recordTrace reads the trace context of a record's headers: the trace-id, parent-id and flags
// of its traceparent, and its tracestate. ok is false when the record has no traceparent, has
// more than one, or one that is invalid: the record starts a trace of its own, and its
// tracestate is ignored, as the W3C Trace Context says.
func recordTrace(hs []*flowv1.Header) (tc stdio.TraceContext, state string, ok bool) {
	var tp []byte
	n := 0
	for _, h := range hs {
		if isHeader(h.GetKey(), headerTraceparent) {
			tp = h.GetValue()
			n++
		}
	}
	if n != 1 {
		return tc, "", false
	}
	tc.TraceID, tc.Parent, tc.Flags, ok = stdio.ParseTraceparent(tp)
	if !ok {
		return stdio.TraceContext{}, "", false
	}
	return tc, recordTracestate(hs), true
}

// recordTracestate is the tracestate of a record whose traceparent recordTrace accepted: its
// tracestate headers joined, or "" when there is none or it is not one to pass on.
func recordTracestate(hs []*flowv1.Header) string {
	var state string
	for _, h := range hs {
		if !isHeader(h.GetKey(), headerTracestate) {
			continue
		}
		v := strings.TrimSpace(string(h.GetValue()))
		switch {
		case v == "":
		case state == "":
			state = v
		default: // several tracestate headers are one list, as in HTTP
			state += "," + v
		}
	}
	if len(state) > maxTracestate || !printable(state) {
		return ""
	}
	return state
}

// itemTrace is the trace context of an item made from a record with headers hs: a child of
// the record's traceparent, or the root of a new trace (sampled when the bridge exports spans,
// since it then records them). The engine gives each attempt its span.
func itemTrace(hs []*flowv1.Header, exporting bool) (stdio.TraceContext, string) {
	tc, state, ok := recordTrace(hs)
	if ok {
		return tc, state
	}
	tc = stdio.TraceContext{TraceID: stdio.NewTraceID()}
	if exporting {
		tc.Flags = 1
	}
	return tc, ""
}

// isHeader reports whether key is name in any case; name is lowercase.
func isHeader(key, name string) bool {
	return len(key) == len(name) && (key == name || strings.EqualFold(key, name))
}

func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// emitTrace adds to rec, one output of a delivery whose trace context is tc, a traceparent
// with the input's trace-id and the delivery's span as parent, and the input's tracestate,
// unless the action set a traceparent of its own (then it is left as the action made it; a
// tracestate of the action's own is kept in any case). tp is the room for the header, in the
// emit's one allocation.
func emitTrace(rec *flowv1.Record, tc *stdio.TraceContext, state []byte, tp *traceHeader) {
	if !tc.IsValid() {
		return
	}
	ownState := false
	for _, h := range rec.Headers {
		switch {
		case isHeader(h.Key, headerTraceparent):
			return
		case isHeader(h.Key, headerTracestate):
			ownState = true
		}
	}
	tp.h.Key = headerTraceparent
	tp.value = tc.Traceparent(tc.SpanID)
	tp.h.Value = tp.value[:]
	if rec.Headers == nil {
		rec.Headers = tp.room[:0]
	}
	rec.Headers = append(rec.Headers, &tp.h)
	if len(state) > 0 && !ownState {
		rec.Headers = append(rec.Headers, &flowv1.Header{Key: headerTracestate, Value: state})
	}
}

// traceHeader is the room for an emit's traceparent header inside the emit's allocation.
type traceHeader struct {
	h     flowv1.Header
	value [stdio.TraceparentLen]byte
	room  [2]*flowv1.Header // the headers of an emit that set none
}
