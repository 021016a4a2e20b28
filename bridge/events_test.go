package bridge_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// events collects what a bridge tells Options.Events.
type events struct {
	mu  sync.Mutex
	all []bridge.Event
}

func (e *events) add(ev bridge.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) of(kind bridge.EventKind) []bridge.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []bridge.Event
	for _, ev := range e.all {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// started reports whether conversation started (every process of its Start answered ready).
func (e *events) started(conversation string) bool {
	return slices.ContainsFunc(e.of(bridge.EventConversationStarted), func(ev bridge.Event) bool { return ev.Conversation == conversation })
}

func (e *events) record(kind bridge.EventKind, record string) (bridge.Event, bool) {
	i := slices.IndexFunc(e.of(kind), func(ev bridge.Event) bool { return ev.Record == record })
	if i < 0 {
		return bridge.Event{}, false
	}
	return e.of(kind)[i], true
}

// TestEvents: what happens to the processes and the records is told to Options.Events as typed
// values: the conversation's start, each process's start and end, a protocol violation with
// its rule, line and record (a debug print on stdout, an emit to an outlet not declared), a
// record refused.
func TestEvents(t *testing.T) {
	var got events
	r := startBridge(t, oneOutlet, func(o *bridge.Options) { o.Events = got.add })
	s := dial(t, r.addr)
	s.start(r, "conv-ev", 0)
	s.batch(1, 7,
		rec(0, nil, `{"op":"debug","n":1}`),
		rec(1, nil, `{"op":"fail"}`),
		rec(2, nil, `{"op":"to","outlets":["nope"]}`),
	)
	if a := s.wait(1); a.fail == nil {
		t.Fatalf("answer = %v; want Fail for the refused record", a)
	}

	if evs := got.of(bridge.EventConversationStarted); len(evs) != 1 || evs[0].Conversation != "conv-ev" || evs[0].Streamlet != "t" {
		t.Errorf("conversation-started events = %+v; want one for conv-ev of streamlet t", evs)
	}
	if n := len(got.of(bridge.EventProcessStarted)); n < 2 {
		t.Errorf("process-started events = %d; want the first process and its replacement", n)
	}
	v, ok := got.record(bridge.EventProtocolViolation, "in-topic/7/0")
	var pe *stdio.ProtocolError
	if !ok || !errors.As(v.Err, &pe) || pe.Rule != stdio.RuleNotObject || !strings.HasPrefix(string(pe.Line), "debug: got dl_") || v.PID == 0 {
		t.Errorf("protocol-violation of in-topic/7/0 = %+v (found %v); want rule %s, the debug line and the process", v, ok, stdio.RuleNotObject)
	}
	exited := slices.IndexFunc(got.of(bridge.EventProcessExited), func(ev bridge.Event) bool {
		return ev.PID == v.PID && errors.Is(ev.Err, stdio.ErrProtocol)
	})
	if exited < 0 {
		t.Errorf("process-exited events = %+v; want the violating process %d ended with the violation as cause", got.of(bridge.EventProcessExited), v.PID)
	}
	if _, ok := got.record(bridge.EventRecordRefused, "in-topic/7/0"); ok {
		t.Errorf("record in-topic/7/0 refused; want it done on its retry")
	}

	ref, ok := got.record(bridge.EventRecordRefused, "in-topic/7/1")
	var ae *engine.ActionError
	if !ok || !errors.As(ref.Err, &ae) || ae.Retryable || ae.Message != "cannot score this listing" || ref.Attempts != 1 {
		t.Errorf("record-refused of in-topic/7/1 = %+v (found %v); want the action's non-retryable error after 1 attempt", ref, ok)
	}

	v, ok = got.record(bridge.EventProtocolViolation, "in-topic/7/2")
	if !ok || !errors.As(v.Err, &pe) || pe.Rule != stdio.RuleUndeclaredOutlet || v.PID != 0 {
		t.Errorf("protocol-violation of in-topic/7/2 = %+v (found %v); want rule %s from the bridge", v, ok, stdio.RuleUndeclaredOutlet)
	}
	if ref, ok := got.record(bridge.EventRecordRefused, "in-topic/7/2"); !ok || !errors.As(ref.Err, &pe) || pe.Rule != stdio.RuleUndeclaredOutlet {
		t.Errorf("record-refused of in-topic/7/2 = %+v (found %v); want the undeclared outlet as its cause", ref, ok)
	}
}

// TestEventsDeadLetterAndStart: a record failed for good under --dead-letter is told as
// dead-lettered; processes that cannot start are told as a failed start wrapping
// engine.ErrStart.
func TestEventsDeadLetterAndStart(t *testing.T) {
	t.Run("dead-letter", func(t *testing.T) {
		var got events
		r := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq", func(o *bridge.Options) { o.Events = got.add })
		s := dial(t, r.addr)
		s.start(r, "conv-dl", 0)
		s.batch(1, 0, rec(5, nil, `{"op":"fail"}`))
		if a := s.wait(1); !a.ack {
			t.Fatalf("answer = %v; want Ack with the record dead-lettered", a)
		}
		ev, ok := got.record(bridge.EventRecordDeadLettered, "in-topic/0/5")
		if !ok || !errors.Is(ev.Err, engine.ErrAction) {
			t.Errorf("record-dead-lettered of in-topic/0/5 = %+v (found %v); want the action's error as cause", ev, ok)
		}
		if evs := got.of(bridge.EventRecordRefused); len(evs) != 0 {
			t.Errorf("record-refused events = %+v; want none", evs)
		}
	})
	t.Run("start-failed", func(t *testing.T) {
		var got events
		r := startBridge(t, oneOutlet, func(o *bridge.Options) {
			o.Events = got.add
			o.Action.Command = []string{"/no/such/program"}
		})
		s := dial(t, r.addr)
		s.start(r, "conv-sf", 0)
		if err := s.waitEnd(); err == nil {
			t.Fatal("stream ended cleanly; want it failed for the start")
		}
		evs := got.of(bridge.EventStartFailed)
		if len(evs) != 1 || !errors.Is(evs[0].Err, engine.ErrStart) || evs[0].Conversation != "conv-sf" {
			t.Errorf("start-failed events = %+v; want one wrapping engine.ErrStart", evs)
		}
		if evs := got.of(bridge.EventConversationStarted); len(evs) != 0 {
			t.Errorf("conversation-started events = %+v; want none", evs)
		}
	})
}

// TestEventsStderr: each stderr line of a process is told as EventStderr, with the record and
// the attempt of the delivery it was written during.
func TestEventsStderr(t *testing.T) {
	var got events
	r := startBridge(t, oneOutlet, func(o *bridge.Options) { o.Events = got.add })
	s := dial(t, r.addr)
	s.start(r, "conv-se", 0)
	s.batch(1, 3, rec(4, nil, `{"op":"crash","n":1}`))
	if a := s.wait(1); !a.ack {
		t.Fatalf("answer = %v; want Ack once the retry is done", a)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := got.of(bridge.EventStderr)
		i := slices.IndexFunc(evs, func(ev bridge.Event) bool { return ev.Line == "fake action: crashing on purpose" })
		if i >= 0 {
			if ev := evs[i]; ev.Record != "in-topic/3/4" || ev.Attempts != 1 || ev.PID == 0 || ev.Streamlet != "t" {
				t.Errorf("stderr event = %+v; want record in-topic/3/4, attempt 1, its process, streamlet t", ev)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr events = %+v; want the crash's line", evs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
