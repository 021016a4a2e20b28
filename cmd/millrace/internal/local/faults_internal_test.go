package local

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestFaultsDecideByEvents: the bridge's events alone make a fault certain (no log is read),
// and while one is in doubt the streamlet's warnings are held back: dropped once it is
// certain, passed on once its doubt ends.
func TestFaultsDecideByEvents(t *testing.T) {
	ctx := context.Background()
	violation := bridge.Event{Kind: bridge.EventProtocolViolation, Record: "t.in/0/3", PID: 7,
		Err: stdio.NewProtocolError(stdio.RuleNotObject, []byte("debug: got dl_1"), "a line that is not a JSON object")}
	// What the handler lets through to the author's terminal is the product: the log text is
	// checked for the test's own warnings, never to decide a fault.
	newLog := func(f *faults) (*slog.Logger, *bytes.Buffer) {
		var buf bytes.Buffer
		return slog.New(faultHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), f}), &buf
	}

	t.Run("violation twice", func(t *testing.T) {
		f := newFaults("t", false)
		log, buf := newLog(f)
		f.event(ctx, bridge.Event{Kind: bridge.EventConversationStarted})
		log.Warn("before any fault")
		f.event(ctx, violation)
		log.Warn("action process ended")
		if err := f.failed(); err != nil {
			t.Fatalf("failed() after one violation = %v; want nil (a retry may differ)", err)
		}
		f.event(ctx, violation)
		log.Warn("after the fault")
		err := f.failed()
		if !errors.Is(err, errRepeats) || !errors.Is(err, errStalled) {
			t.Fatalf("failed() after two violations = %v; want errRepeats and errStalled", err)
		}
		for _, w := range []string{"streamlet t: the action breaks the protocol (not-json) on record t.in/0/3", `"debug: got dl_1"`, stdio.RuleNotObject.Fix()} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("failed() = %q; want it to say %q", err, w)
			}
		}
		if got := buf.String(); !strings.Contains(got, "before any fault") || strings.Contains(got, "process ended") || strings.Contains(got, "after the fault") {
			t.Errorf("log = %q; want the warning before the violation only", got)
		}
	})

	t.Run("violation once", func(t *testing.T) {
		f := newFaults("t", false)
		log, buf := newLog(f)
		f.event(ctx, bridge.Event{Kind: bridge.EventConversationStarted})
		f.event(ctx, violation)
		log.Warn("action process ended")
		f.event(ctx, bridge.Event{Kind: bridge.EventConversationStarted}) // a redelivery's: still in doubt
		f.expire(ctx, time.Now())
		if buf.Len() != 0 {
			t.Fatalf("log = %q while in doubt; want the warning held", buf)
		}
		f.expire(ctx, time.Now().Add(doubtFor))
		if err := f.failed(); err != nil || !strings.Contains(buf.String(), "action process ended") {
			t.Errorf("after the doubt: failed() = %v, log %q; want no fault and the warning passed on", err, buf)
		}
	})

	t.Run("start", func(t *testing.T) {
		startErr := func(cause error) error { return errors.Join(engine.ErrStart, cause) }
		f := newFaults("t", false)
		f.event(ctx, bridge.Event{Kind: bridge.EventStartFailed, Err: startErr(errors.New("exit status 3"))})
		if err := f.failed(); err != nil {
			t.Fatalf("failed() after one start that exited = %v; want nil", err)
		}
		f.event(ctx, bridge.Event{Kind: bridge.EventStartFailed, Err: startErr(errors.New("exit status 3"))})
		if err := f.failed(); !errors.Is(err, errRepeats) || !strings.Contains(err.Error(), "exits before answering ready, every time") {
			t.Errorf("failed() after two = %v; want the start's fault", err)
		}
		f = newFaults("t", false)
		f.event(ctx, bridge.Event{Kind: bridge.EventStartFailed, Err: startErr(stdio.NewProtocolError(stdio.RuleNotObject, []byte("Welcome"), "a line that is not a JSON object"))})
		if err := f.failed(); !errors.Is(err, errRepeats) || !strings.Contains(err.Error(), `the program's answer to hello breaks the protocol (not-json): a line that is not a JSON object: "Welcome"`) {
			t.Errorf("failed() after a violation before ready = %v; want it certain at once", err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		refused := bridge.Event{Kind: bridge.EventRecordRefused, Record: "t.in/0/0", Attempts: 1, Err: &engine.ActionError{Message: "payload has no name"}}
		f := newFaults("t", false)
		f.event(ctx, refused)
		f.event(ctx, bridge.Event{Kind: bridge.EventRecordRefused, Record: "t.in/0/1", Attempts: 1, Err: &engine.ActionError{Message: "payload has no name"}})
		if err := f.failed(); err != nil {
			t.Fatalf("failed() after two records refused once = %v; want nil", err)
		}
		f.event(ctx, refused)
		if err := f.failed(); !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "refuses record t.in/0/0 on every delivery") {
			t.Errorf("failed() = %v; want the record refused twice", err)
		}
		f = newFaults("t", false)
		retryable := bridge.Event{Kind: bridge.EventRecordRefused, Record: "t.in/0/0", Err: &engine.ActionError{Message: "busy", Retryable: true}}
		f.event(ctx, retryable)
		f.event(ctx, retryable)
		if err := f.failed(); err != nil {
			t.Errorf("failed() after retryable errors = %v; want nil (they may pass)", err)
		}
	})
}
