package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio"
)

// eventKind tells what the action wrote on one stdout line (or several, when it spread one
// object over several lines).
type eventKind int

const (
	evMessage eventKind = iota // a protocol message, perhaps recovered from bad framing (note)
	evBad                      // a line that looks like JSON but is no protocol message
	evText                     // a line that is not JSON at all: logging on stdout
	// evEnvelope: a batch envelope, before the messages it holds (each an evMessage), so the
	// session can tell whether the action declared envelopes; a malformed one is evBad
	evEnvelope
)

// event is one thing read from the action's stdout.
type event struct {
	kind eventKind
	at   time.Time
	msg  stdio.Message // evMessage
	raw  []byte        // the line(s), copied
	note string        // evBad: what is wrong; evMessage: the framing fault it was recovered from
	// badUTF8: an evBad line that is not valid UTF-8, which the kit charges to non-ascii when
	// the conversation carried non-ASCII text (the action broke it) and to framing otherwise
	badUTF8 bool
	shown   bool   // the note quotes the line already
	hint    string // evBad: the way out, when not the usual one
}

// maxJoin bounds the lines joined when the action spreads one JSON object over several lines.
const maxJoin = 2000

// pendingWait is how long the start of a JSON object waits, with nothing more arriving on
// stdout, for the lines that would complete it: a pretty-printer writes them at once, so a
// start left alone this long is a broken line (an object cut short), reported then rather
// than when the next line comes.
const pendingWait = 500 * time.Millisecond

// lastRead is an io.Reader that notes when it last returned bytes.
type lastRead struct {
	r  io.Reader
	at atomic.Int64 // UnixNano
}

func (l *lastRead) Read(b []byte) (int, error) {
	n, err := l.r.Read(b)
	if n > 0 {
		l.at.Store(time.Now().UnixNano())
	}
	return n, err
}

func (l *lastRead) since() time.Duration { return time.Duration(time.Now().UnixNano() - l.at.Load()) }

// readLine is one line of stdout, copied, or the error that ended it.
type readLine struct {
	line []byte
	err  error
}

// readStdout turns stdout into events, recovering what it can from bad framing so the rest of
// the conversation can still be checked: an object spread over several lines, several objects
// on one line.
func (p *proc) readStdout(r io.Reader) {
	defer close(p.events)
	in := &lastRead{r: r}
	lr := stdio.NewLineReader(in, 0)
	var pending []byte // a line starting with { that is not JSON yet: perhaps the first of several
	pendingLines := 0
	pendingAt := time.Time{}
	flush := func() {
		if pending != nil {
			p.events <- event{kind: evBad, at: pendingAt, raw: pending, note: badLine(firstLine(pending))}
			pending = nil
		}
	}
	// The lines are read on a goroutine of their own, so that a pending start can time out;
	// it ends with the error that ends stdout, which this loop always receives.
	lines := make(chan readLine)
	go func() {
		for {
			line, err := lr.ReadLine()
			lines <- readLine{bytes.Clone(line), err}
			if err != nil {
				return
			}
		}
	}()
	wait := time.NewTimer(pendingWait)
	defer wait.Stop()
	for {
		var rl readLine
		if pending == nil {
			rl = <-lines
		} else {
			select {
			case rl = <-lines:
			case <-wait.C:
				if d := in.since(); d < pendingWait { // a long line still coming
					wait.Reset(pendingWait - d)
					continue
				}
				flush()
				continue
			}
		}
		line, err := rl.line, rl.err
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
		if pending != nil {
			if t := bytes.TrimLeft(line, " \t\r"); len(t) > 0 && t[0] == '{' && len(t) == len(line) {
				flush() // a new object at the start of a line: the pending one was just bad
			} else {
				pending = append(append(pending, '\n'), line...)
				pendingLines++
				if !json.Valid(pending) && !jsonPrefix(pending) {
					flush() // no continuation can make this JSON: report it now, not at the next line
					continue
				}
				if json.Valid(pending) {
					p.recovered(pending, pendingAt, fmt.Sprintf("one JSON object spread over %d lines (pretty-printed?): write each message on one line", pendingLines))
					pending = nil
				} else if pendingLines >= maxJoin || len(pending) > stdio.MaxLineBytes {
					flush()
				}
				wait.Reset(pendingWait) // from now: reading the lines above took time of its own
				continue
			}
		}
		var m stdio.Message
		derr := stdio.DecodeMessage(line, &m)
		if derr == nil && m.Type == stdio.TypeBatch {
			p.envelope(line, now)
			continue
		}
		if derr == nil {
			p.events <- event{kind: evMessage, at: now, msg: m, raw: line}
			continue
		}
		t := bytes.TrimSpace(line)
		switch {
		case len(t) > 0 && t[0] == '{' && !utf8.Valid(t):
			p.events <- event{kind: evBad, at: now, raw: line, note: derr.Error(), badUTF8: true, shown: true}
		case len(t) == 0:
			p.events <- event{kind: evBad, at: now, raw: line, note: "an empty line on stdout: write exactly one JSON object per line"}
		case json.Valid(t):
			p.events <- event{kind: evBad, at: now, raw: line, note: derr.Error(), shown: true}
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
			if !jsonPrefix(t) { // broken JSON, not the first line of a pretty-printed object
				p.events <- event{kind: evBad, at: now, raw: line, note: derr.Error(), shown: true}
				continue
			}
			pending, pendingLines, pendingAt = line, 1, now
			wait.Reset(pendingWait)
		default:
			p.events <- event{kind: evText, at: now, raw: line}
		}
	}
}

// envelope delivers a batch envelope: an evEnvelope, then each message it holds as an
// evMessage, in order, up to the first that breaks the envelope's rules, which ends it as an
// evBad naming "a malformed batch envelope" (the messages before it stand, as in the engine).
func (p *proc) envelope(line []byte, at time.Time) {
	p.events <- event{kind: evEnvelope, at: at, raw: line}
	var msgs []event
	_, err := stdio.SplitBatch(line, func(msg []byte) error {
		var m stdio.Message
		if err := stdio.DecodeInBatch(msg, &m); err != nil {
			return err
		}
		switch m.Type {
		case stdio.TypeHello, stdio.TypeReady, stdio.TypeItem, stdio.TypeShutdown, stdio.TypeCancel:
			return fmt.Errorf("%w: %w: a %q message inside an envelope (an action's envelope holds emit, metric, state, done, error and abstain): %s", stdio.ErrProtocol, stdio.ErrMalformedBatch, m.Type, quote(msg))
		}
		msgs = append(msgs, event{kind: evMessage, at: at, msg: m, raw: bytes.Clone(msg)})
		return nil
	})
	for _, ev := range msgs {
		p.events <- ev
	}
	if err != nil {
		p.events <- event{kind: evBad, at: at, raw: line, note: err.Error(), shown: errors.Is(err, stdio.ErrMalformedBatch), hint: envelopeHint}
	}
}

// envelopeHint is the way out for a malformed envelope.
const envelopeHint = `write an envelope as {"type":"batch","messages":[…]}, holding emit, metric, state, done, error and abstain messages, each as it would be on its own line`

// jsonPrefix reports whether text is the start of a JSON value that more lines could complete
// (a pretty-printed object's first lines), rather than JSON already broken.
func jsonPrefix(text []byte) bool {
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(text)).Decode(&v)
	return errors.Is(err, io.ErrUnexpectedEOF)
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
