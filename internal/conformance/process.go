package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// eventKind tells what the action wrote on one stdout line (or several, when it spread one
// object over several lines).
type eventKind int

const (
	evMessage eventKind = iota // a protocol message, perhaps recovered from bad framing (note)
	evBad                      // a line that looks like JSON but is no protocol message
	evText                     // a line that is not JSON at all: logging on stdout
)

// event is one thing read from the action's stdout.
type event struct {
	kind eventKind
	at   time.Time
	msg  stdio.Message // evMessage
	raw  []byte        // the line(s), copied
	note string        // evBad: what is wrong; evMessage: the framing fault it was recovered from
}

// maxJoin bounds the lines joined when the action spreads one JSON object over several lines.
const maxJoin = 2000

// proc is one running action process with its pipes read on owned goroutines: stdout turned
// into events, stderr counted and its last lines kept, stdin written from a queue so the
// driver never blocks on a child that stopped reading.
type proc struct {
	child   *engine.Child
	stdin   io.WriteCloser
	writes  chan []byte
	events  chan event
	done    chan struct{} // closed when the process exited and its pipes were read to the end
	exitErr error         // valid once done is closed
	endNote string        // how stdout ended, when not cleanly (valid once events is closed)
	tooLong bool          // stdout ended on a line over the limit: a framing fault, not a crash
	stderr  *stderrLog
	started time.Time

	inClosed bool           // stdin's queue is closed (driver goroutine only)
	wg       sync.WaitGroup // the writer goroutine
}

// startProc starts a's command in a.Dir with MILLSTREAM_WORKDIR set to a fresh folder under
// workdir.
func startProc(a *Action, workdir string, stderrMax int) (*proc, error) {
	if len(a.Command) == 0 {
		return nil, fmt.Errorf("%w: action %q has no command", ErrAction, a.Name)
	}
	wd, err := os.MkdirTemp(workdir, "work-")
	if err != nil {
		return nil, fmt.Errorf("conformance: a work folder for action %q: %w", a.Name, err)
	}
	p := &proc{
		writes: make(chan []byte, 4096), events: make(chan event, 256),
		done: make(chan struct{}), stderr: &stderrLog{max: stderrMax},
	}
	p.child = &engine.Child{
		Argv:   a.Command,
		Dir:    a.Dir,
		Env:    append(append(os.Environ(), "MILLSTREAM_WORKDIR="+wd), a.Env...),
		Stdout: p.readStdout,
		Stderr: p.stderr.read,
	}
	if err := p.child.Start(); err != nil {
		return nil, fmt.Errorf("%w: action %q: cannot start %q in %s: %w (check the command after -- in the config line)", ErrAction, a.Name, strings.Join(a.Command, " "), dirName(a.Dir), err)
	}
	p.stdin, p.started = p.child.Stdin(), time.Now()
	p.wg.Add(1)
	go p.writer()
	go func() {
		p.exitErr = p.child.Wait() // the pipes read to their end (or closed after the grace) first
		close(p.done)
	}()
	return p, nil
}

func dirName(dir string) string {
	if dir == "" {
		return "the current folder"
	}
	return dir
}

// write queues line for stdin; it never blocks the driver (up to the queue's 4096 lines). After
// closeStdin the line is dropped. write and closeStdin are called from the driver's goroutine.
func (p *proc) write(line []byte) {
	if p.inClosed {
		return
	}
	p.writes <- line
}

// closeStdin closes stdin once every queued line is written. It may be called more than once.
func (p *proc) closeStdin() {
	if !p.inClosed {
		p.inClosed = true
		close(p.writes)
	}
}

func (p *proc) writer() {
	defer p.wg.Done()
	failed := false
	for line := range p.writes {
		if failed {
			continue
		}
		if _, err := p.stdin.Write(line); err != nil {
			failed = true // the child is gone or closed stdin; its exit tells why
		}
	}
	_ = p.stdin.Close()
}

// kill kills the process group and waits until everything of the process is gone. It may be
// called more than once.
func (p *proc) kill() {
	p.child.Kill()
	p.closeStdin()
	for range p.events { // let the stdout reader finish
	}
	<-p.done
	p.wg.Wait()
}

// exitStatus describes how the process ended, once done is closed.
func (p *proc) exitStatus() (code int, desc string) {
	var ee *exec.ExitError
	switch {
	case p.exitErr == nil:
		return 0, "exited with status 0"
	case errors.As(p.exitErr, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), fmt.Sprintf("exited with status %d", ee.ExitCode())
	case errors.As(p.exitErr, &ee):
		return -1, "was killed (" + ee.String() + ")"
	default:
		return -1, p.exitErr.Error()
	}
}

// readStdout turns stdout into events, recovering what it can from bad framing so the rest of
// the conversation can still be checked: an object spread over several lines, several objects
// on one line.
func (p *proc) readStdout(r io.Reader) {
	defer close(p.events)
	lr := stdio.NewLineReader(r, 0)
	var pending []byte // a line starting with { that is not JSON yet: perhaps the first of several
	pendingLines := 0
	pendingAt := time.Time{}
	flush := func() {
		if pending != nil {
			p.events <- event{kind: evBad, at: pendingAt, raw: pending, note: badLine(firstLine(pending))}
			pending = nil
		}
	}
	for {
		line, err := lr.ReadLine()
		if err != nil {
			flush()
			switch {
			case errors.Is(err, io.EOF):
			case errors.Is(err, io.ErrUnexpectedEOF):
				p.endNote = "the last line on stdout has no newline: end every message with \\n"
			case errors.Is(err, stdio.ErrLineTooLong):
				p.endNote, p.tooLong = err.Error(), true
				p.child.Kill() // nothing after an unbounded line can be framed again
			default:
				p.endNote = "reading stdout: " + err.Error()
			}
			return
		}
		now := time.Now()
		line = bytes.Clone(line)
		if pending != nil {
			if t := bytes.TrimLeft(line, " \t\r"); len(t) > 0 && t[0] == '{' && len(t) == len(line) {
				flush() // a new object at the start of a line: the pending one was just bad
			} else {
				pending = append(append(pending, '\n'), line...)
				pendingLines++
				if json.Valid(pending) {
					p.recovered(pending, pendingAt, fmt.Sprintf("one JSON object spread over %d lines (pretty-printed?): write each message on one line", pendingLines))
					pending = nil
				} else if pendingLines >= maxJoin || len(pending) > stdio.MaxLineBytes {
					flush()
				}
				continue
			}
		}
		var m stdio.Message
		derr := stdio.DecodeMessage(line, &m)
		if derr == nil {
			p.events <- event{kind: evMessage, at: now, msg: m, raw: line}
			continue
		}
		t := bytes.TrimSpace(line)
		switch {
		case len(t) == 0:
			p.events <- event{kind: evBad, at: now, raw: line, note: "an empty line on stdout: write exactly one JSON object per line"}
		case json.Valid(t):
			p.events <- event{kind: evBad, at: now, raw: line, note: derr.Error()}
		case t[0] == '{':
			if msgs, ok := splitObjects(t); ok {
				for i, m := range msgs {
					note := ""
					if i == 0 {
						note = fmt.Sprintf("%d JSON objects on one line: end each message with a newline", len(msgs))
					}
					p.events <- event{kind: evMessage, at: now, msg: m, raw: line, note: note}
				}
				continue
			}
			pending, pendingLines, pendingAt = line, 1, now
		default:
			p.events <- event{kind: evText, at: now, raw: line}
		}
	}
}

// recovered delivers the message in text as an event carrying the framing fault in note, or a
// bad line if it is no protocol message.
func (p *proc) recovered(text []byte, at time.Time, note string) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, text); err == nil {
		var m stdio.Message
		if err := stdio.DecodeMessage(buf.Bytes(), &m); err == nil {
			p.events <- event{kind: evMessage, at: at, msg: m, raw: text, note: note}
			return
		}
	}
	p.events <- event{kind: evBad, at: at, raw: text, note: note}
}

// splitObjects decodes a line holding several JSON objects one after another.
func splitObjects(line []byte) ([]stdio.Message, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	var msgs []stdio.Message
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, false
		}
		var m stdio.Message
		if stdio.DecodeMessage(raw, &m) != nil {
			return nil, false
		}
		msgs = append(msgs, m)
	}
	return msgs, len(msgs) > 1
}

func badLine(line []byte) string {
	var m stdio.Message
	if err := stdio.DecodeMessage(line, &m); err != nil {
		return err.Error()
	}
	return "a bad line " + quote(line)
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// quote quotes the start of a line for a report.
func quote(b []byte) string {
	const n = 100
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

// stderrLog reads the action's stderr to the end, always, so a chatty action never blocks on
// a full pipe; it counts lines and bytes, keeps the last few lines for error messages, and
// notes lines over max.
type stderrLog struct {
	max     int
	mu      sync.Mutex
	lines   int
	bytes   int64
	tooLong int
	last    []string
}

const keepStderr = 6

func (l *stderrLog) read(r io.Reader) {
	lr := stdio.NewLineReader(r, l.max)
	for {
		line, err := lr.ReadLine()
		l.mu.Lock()
		switch {
		case err == nil || errors.Is(err, io.ErrUnexpectedEOF):
			l.lines++
			l.bytes += int64(len(line)) + 1
			s := string(line)
			if len(s) > 200 {
				s = s[:200] + "…"
			}
			if err == nil {
				l.last = append(l.last, s)
				if len(l.last) > keepStderr {
					l.last = l.last[1:]
				}
			}
		case errors.Is(err, stdio.ErrLineTooLong):
			l.tooLong++
			l.bytes += int64(l.max)
		}
		l.mu.Unlock()
		if err != nil && !errors.Is(err, stdio.ErrLineTooLong) {
			return // the Child discards the rest
		}
	}
}

// tail returns the last stderr lines for an error message, or "" when there were none.
func (l *stderrLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return "; last stderr: " + strings.Join(l.last, " | ")
}

// waitCtx waits for ch or ctx.
func waitCtx(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
