package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// errRepeats is returned by Run for a fault that can only repeat, as soon as it is certain:
// a command that cannot run, a program that exits before ready every time or never readies,
// a record the action refuses for good on every delivery. Its text is one line: the cause and
// the fix.
var errRepeats = errors.New("a fault that can only repeat")

// repeatError is one fault that can only repeat, for one streamlet; a refused record stalls
// its partition too (it matches errStalled).
type repeatError struct {
	streamlet string
	msg       string
	stalls    bool
}

func (e *repeatError) Error() string { return "streamlet " + e.streamlet + ": " + e.msg }
func (e *repeatError) Is(target error) bool {
	return target == errRepeats || (e.stalls && target == errStalled)
}

// preflight checks the command of every streamlet before anything starts: a program that
// cannot be executed fails every start the same way, so it is named at once, with the fix.
func preflight(p *actiondir.Pipeline) error {
	for _, s := range p.Streamlets {
		if msg := actiondir.CommandFault(s.Action.Dir, s.Action.Command); msg != "" {
			return &repeatError{streamlet: s.Action.Name, msg: msg}
		}
	}
	return nil
}

// faults follows one streamlet's bridge events for faults that can only repeat, and decides
// when one is certain: a start that failed the same way twice (once, where no retry could
// differ: a command that cannot run, the ready timeout, a violation in the answer to hello,
// which is the same every time), the protocol broken twice (a retry would not mend a bug), or
// one record refused for good by the action on two deliveries.
//
// It also holds back the streamlet's warnings while a fault is in doubt (before its first
// conversation started; after a first protocol violation, for doubtFor): the one line of a
// fault replaces them, and they are passed on when the doubt ends otherwise.
type faults struct {
	name       string
	deadLetter bool

	mu         sync.Mutex
	startFails int
	violations int
	refused    map[string]int
	err        error
	started    bool      // a conversation started: its processes answered ready
	doubt      time.Time // when the last protocol violation was seen, until it is cleared
	held       []held    // the warnings held back while in doubt
}

// held is a log record kept back, with the handler it was for.
type held struct {
	h   slog.Handler
	rec slog.Record
}

// maxHeld bounds the records held back; doubtFor is how long a first protocol violation keeps
// warnings back for a second one to make it certain (a retry follows within a second).
const (
	maxHeld  = 64
	doubtFor = 3 * time.Second
)

func newFaults(name string, deadLetter bool) *faults {
	return &faults{name: name, deadLetter: deadLetter, refused: map[string]int{}}
}

// failed returns the fault once it is certain, else nil.
func (f *faults) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// release passes on the records held back and ends the doubt; the run calls it when it ends on
// anything but a fault that can only repeat (whose line replaces them). It may be called more
// than once.
func (f *faults) release(ctx context.Context) {
	f.mu.Lock()
	held := f.held
	f.held, f.started, f.doubt = nil, true, time.Time{}
	f.mu.Unlock()
	for _, h := range held {
		_ = h.h.Handle(ctx, h.rec)
	}
}

// expire releases the records held back for a protocol violation that did not repeat within
// doubtFor of now.
func (f *faults) expire(ctx context.Context, now time.Time) {
	f.mu.Lock()
	over := f.started && f.err == nil && !f.doubt.IsZero() && now.Sub(f.doubt) >= doubtFor
	f.mu.Unlock()
	if over {
		f.release(ctx)
	}
}

// hold keeps rec back while a fault is in doubt, and drops it once a fault is certain. It
// reports whether rec was kept or dropped.
func (f *faults) hold(h slog.Handler, rec slog.Record) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.err != nil:
		return true // the run stops with the fault's line: the rest is its aftermath
	case f.started && f.doubt.IsZero() || len(f.held) >= maxHeld:
		return false
	}
	f.held = append(f.held, held{h, rec.Clone()})
	return true
}

// event takes one event of the streamlet's bridge (bridge.Options.Events).
func (f *faults) event(ctx context.Context, e bridge.Event) {
	f.mu.Lock()
	var act *engine.ActionError
	switch e.Kind {
	case bridge.EventConversationStarted:
		f.started = true
		inDoubt := !f.doubt.IsZero()
		f.mu.Unlock()
		if !inDoubt {
			f.release(ctx)
		}
		return
	case bridge.EventStartFailed:
		f.startFails++
		msg, final := startFault(e.Err)
		if f.err == nil && (final || f.startFails >= 2) {
			f.err = &repeatError{streamlet: f.name, msg: msg}
		}
	case bridge.EventProtocolViolation:
		f.violations++
		f.doubt = time.Now()
		if f.err == nil && f.violations >= 2 {
			f.err = &repeatError{streamlet: f.name, stalls: true, msg: violationFault(e)}
		}
	case bridge.EventRecordRefused:
		if !f.deadLetter && errors.As(e.Err, &act) && !act.Retryable {
			f.refused[e.Record]++
			if f.err == nil && f.refused[e.Record] >= 2 {
				f.err = &repeatError{streamlet: f.name, stalls: true, msg: fmt.Sprintf("the action refuses record %s on every delivery (%q), and it stops the partition: if such input is expected, set it aside with --dead-letter PORT on the config line (PORT one of its --out ports); else fix the input", e.Record, shorten(act.Message, 200))}
			}
		}
	}
	f.mu.Unlock()
}

// violationFault is the line that names a protocol violation: the rule, the line, the record
// and the fix.
func violationFault(e bridge.Event) string {
	where := "between deliveries"
	if e.Record != "" {
		where = "on record " + e.Record
	}
	var pe *stdio.ProtocolError
	if !errors.As(e.Err, &pe) {
		return fmt.Sprintf("the action breaks the protocol %s, every time: %s", where, shorten(e.Err.Error(), 300))
	}
	return fmt.Sprintf("the action breaks the protocol (%s) %s, every time: %s (run with -v for every attempt)", pe.Rule, where, violated(pe))
}

// violated says what is wrong with a line that breaks the protocol, quotes its start and says
// the fix.
func violated(pe *stdio.ProtocolError) string {
	what := pe.Detail
	if line := pe.Line; line != nil {
		const n = 120
		if len(line) > n {
			what += ": " + strconv.Quote(string(line[:n])) + "…"
		} else {
			what += ": " + strconv.Quote(string(line))
		}
	}
	return what + "; fix: " + pe.Rule.Fix()
}

// startFault is the line that names why the processes do not start, and whether one failure
// is enough to know it repeats.
func startFault(err error) (string, bool) {
	text := shorten(err.Error(), 300)
	var pe *stdio.ProtocolError
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return "the command is not found: install the runtime the action needs, or check PATH and the command after -- (" + text + ")", true
	case errors.Is(err, fs.ErrPermission):
		return "the program is not executable: chmod +x it (" + text + ")", true
	case errors.Is(err, syscall.ENOEXEC):
		return "the program has no #! line (exec format error): add one, e.g. #!/usr/bin/env python3 (" + text + ")", true
	case errors.Is(err, engine.ErrNoReady):
		return "the program never answered hello with ready within its ready timeout: " + text + "; flush stdout after each line and read stdin line by line (or raise --ready-timeout)", true
	case errors.As(err, &pe): // hello is the same on every start: so is the answer
		return fmt.Sprintf("the program's answer to hello breaks the protocol (%s): %s", pe.Rule, violated(pe)), true
	}
	return "the program exits before answering ready, every time: " + text + "; run it by hand in the action's folder to see why", false
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// faultHandler passes records on to its Handler, but holds back a streamlet's warnings while
// f has a fault in doubt (unless the Handler logs at info: millrace run -v), for f's one line
// to replace them.
type faultHandler struct {
	slog.Handler
	f *faults
}

func (t faultHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn && !t.Handler.Enabled(ctx, slog.LevelInfo) && t.f.hold(t.Handler, rec) {
		return nil
	}
	return t.Handler.Handle(ctx, rec)
}

func (t faultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return faultHandler{t.Handler.WithAttrs(as), t.f}
}

func (t faultHandler) WithGroup(name string) slog.Handler {
	return faultHandler{t.Handler.WithGroup(name), t.f}
}
