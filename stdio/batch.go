package stdio

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio/internal/errtext"
	"github.com/goccy/go-json"
)

// The batch envelope: {"type":"batch","messages":[M1,M2,…]} on one line means exactly what M1,
// M2, … mean each on its own line, in order. A peer writes envelopes only to one that declared
// "batch": true in its ready line; single lines stay legal in both directions.

// batchOpen is how every envelope this package writes begins; SplitBatch reads envelopes that
// begin so without looking at their keys.
const batchOpen = `{"type":"batch","messages":[`

// BatchOverhead is the bytes an envelope adds to the messages it holds, besides one comma
// between each two: its opening up to the "[" and its closing "]}". A message line of n bytes
// fits in an envelope of at most max bytes alone when n+BatchOverhead <= max.
const BatchOverhead = len(batchOpen) + len("]}")

// Packer packs protocol messages into the lines that carry them: batch envelopes, each at most
// Max bytes, for messages written together, and a line of its own for a message alone or one
// too large to fit in an envelope. It writes each message as AppendItem or AppendMessage does,
// and moves bytes only to open or close an envelope. The zero value packs envelopes of up to
// MaxLineBytes. A Packer is not safe for concurrent use.
type Packer struct {
	// Max bounds each envelope, newline excluded (MaxLineBytes when 0).
	Max int
	// Single writes every message on a line of its own, as a peer that did not declare
	// "batch": true must receive them.
	Single bool

	buf   []byte
	state packState
	start int // of the line or envelope that the next message may join
}

type packState uint8

const (
	packNone     packState = iota // the next message starts a line of its own
	packLine                      // the last message is a line alone, which the next may join
	packEnvelope                  // an envelope is open from start: its messages each end in ','
)

// AppendItem adds it, as AppendItem writes it.
func (p *Packer) AppendItem(it *Item) {
	s := len(p.buf)
	p.buf = AppendItem(p.buf, it)
	p.added(s)
}

// AppendMessage adds m, as AppendMessage writes it. m must not be a batch envelope.
func (p *Packer) AppendMessage(m *Message) {
	s := len(p.buf)
	p.buf = AppendMessage(p.buf, m)
	p.added(s)
}

// AppendLine adds one message already encoded: a JSON object without raw newlines, given
// without its newline.
func (p *Packer) AppendLine(msg []byte) {
	s := len(p.buf)
	p.buf = append(append(p.buf, msg...), '\n')
	p.added(s)
}

// Len returns the bytes packed so far (an open envelope's closing not counted).
func (p *Packer) Len() int { return len(p.buf) }

// Bytes closes the open envelope, if any, and returns every line packed since Reset, each
// ended by a newline, ready to write. The slice is valid until the next call that changes p;
// messages added after Bytes go on new lines.
func (p *Packer) Bytes() []byte {
	if p.state == packEnvelope {
		p.buf[len(p.buf)-1] = ']'
		p.buf = append(p.buf, '}', '\n')
	}
	p.state = packNone
	return p.buf
}

// Reset empties p for reuse, keeping its buffer unless it grew past 1 MiB (one large message
// must not hold its memory for the life of the Packer).
func (p *Packer) Reset() {
	if cap(p.buf) > 1<<20 {
		p.buf = nil
	}
	p.buf, p.state = p.buf[:0], packNone
}

// added places the message line just appended at p.buf[s:], newline included.
func (p *Packer) added(s int) {
	if p.Single {
		return
	}
	limit := p.Max
	if limit <= 0 {
		limit = MaxLineBytes
	}
	n := len(p.buf) - s - 1 // the message, without its newline
	switch {
	case n+BatchOverhead > limit: // too large for any envelope: a line of its own
		p.close(s)
		p.state = packNone
	case p.state == packEnvelope && s-p.start+n+len("]}") <= limit:
		p.buf[len(p.buf)-1] = ','
	case p.state == packLine && s-p.start+n+BatchOverhead <= limit:
		// The line before becomes the first message of an envelope, this one the second.
		p.buf = append(p.buf, batchOpen...)
		copy(p.buf[p.start+len(batchOpen):], p.buf[p.start:len(p.buf)-len(batchOpen)])
		copy(p.buf[p.start:], batchOpen)
		p.buf[s+len(batchOpen)-1] = ','
		p.buf[len(p.buf)-1] = ','
		p.state = packEnvelope
	default:
		p.state, p.start = packLine, p.close(s)
	}
}

// close ends the open envelope, if any, before the message line at p.buf[s:] and returns
// where that line now starts.
func (p *Packer) close(s int) int {
	if p.state != packEnvelope {
		return s
	}
	p.buf[s-1] = ']'
	p.buf = append(p.buf, 0, 0)
	copy(p.buf[s+2:], p.buf[s:len(p.buf)-2])
	p.buf[s], p.buf[s+1] = '}', '\n'
	return s + 2
}

// SplitBatch reads line as a batch envelope and calls fn with each of its messages in order:
// the bytes of one JSON object within line, valid during the call. fn decodes it (FastAnswer,
// DecodeInBatch); its error stops the split and is returned, naming the message's place.
//
// ok reports whether line is an envelope, that is a JSON object whose "type" is "batch": for
// any other line SplitBatch returns false and a nil error without calling fn, and
// DecodeMessage says what the line is. An envelope that breaks the rules ("messages" missing
// or not an array, a message that is not a JSON object, the type or messages given twice,
// bytes that are not JSON) is an error wrapping ErrProtocol and ErrMalformedBatch; the
// messages before the fault have been passed to fn. An empty "messages" array is an envelope
// of nothing. Keys the envelope has besides "type" and "messages" are ignored.
//
// An envelope written as Packer writes it is split in one pass without decoding.
func SplitBatch(line []byte, fn func(msg []byte) error) (ok bool, err error) {
	return splitBatch(line, nil, fn)
}

// FastFunc takes one message as FastAnswer recognises it (see there), msg being its bytes.
type FastFunc func(typ string, delivery, key, payload []byte, hasKey bool, msg []byte) error

// SplitAnswers is SplitBatch with FastAnswer applied: a message in one of FastAnswer's
// shapes goes to fast with what FastAnswer returns of it, read in the pass that finds where
// it ends; any other message goes to fn. It is how the engine reads an action's envelopes.
func SplitAnswers(line []byte, fast FastFunc, fn func(msg []byte) error) (ok bool, err error) {
	return splitBatch(line, fast, fn)
}

func splitBatch(line []byte, fast FastFunc, fn func([]byte) error) (bool, error) {
	if !bytes.HasPrefix(line, []byte(batchOpen)) {
		return splitMembers(line, fast, fn)
	}
	end, err := eachMessage(line, len(batchOpen)-1, fast, fn)
	if err != nil {
		return true, err
	}
	i := skipSpace(line, end)
	if i < len(line) && line[i] == '}' && skipSpace(line, i+1) == len(line) {
		return true, nil
	}
	// More keys after the messages: read them as any envelope's, having seen both.
	var seen envelopeKeys
	seen.typ, seen.messages = 1, 1
	if i < len(line) && line[i] == ',' {
		if err := seen.members(line, i+1); err != nil {
			return true, err
		}
		return true, seen.check(line)
	}
	return true, malformed(line, "after the messages array, %s where a comma or } was expected", quoteAt(line, i))
}

// DecodeInBatch is DecodeMessage for one message of a batch envelope, as SplitBatch passes
// it. What DecodeMessage refuses, and a message of type batch (envelopes do not nest), make a
// malformed envelope: the error wraps ErrMalformedBatch as well as ErrProtocol. Which types
// an envelope may hold in each direction is the caller's to check.
func DecodeInBatch(msg []byte, m *Message) error {
	*m = Message{}
	if decodeFast(msg, m) {
		return nil
	}
	if pe := decodeObject(msg, m, "a message"); pe != nil {
		pe.Detail, pe.Err = ErrMalformedBatch.Error()+": "+pe.Detail, ErrMalformedBatch
		return pe
	}
	if m.Type == TypeBatch {
		return malformed(msg, "a batch envelope inside an envelope (envelopes do not nest)")
	}
	return nil
}

func malformed(line []byte, format string, args ...any) error {
	e := NewProtocolError(RuleMalformedBatch, line, ErrMalformedBatch.Error()+": "+fmt.Sprintf(format, args...))
	e.Err = ErrMalformedBatch
	return e
}

// eachMessage calls fn (or fast, for FastAnswer's shapes, when given) with each element of
// the array at line[i] ('['), which must be JSON objects, and returns the index just after
// the array.
func eachMessage(line []byte, i int, fast FastFunc, fn func([]byte) error) (int, error) {
	j := skipSpace(line, i+1)
	if j < len(line) && line[j] == ']' {
		return j + 1, nil
	}
	for n := 1; ; n++ {
		if j >= len(line) {
			return 0, malformed(line, "the messages array is not closed")
		}
		if line[j] != '{' {
			return 0, malformed(line, "message %d is not a JSON object (it starts %s)", n, quoteAt(line, j))
		}
		var err error
		end := -1
		if fast != nil {
			if typ, delivery, key, payload, hasKey, e, ok := fastAt(line, j); ok {
				end, err = e, fast(typ, delivery, key, payload, hasKey, line[j:e])
			}
		}
		if end < 0 {
			if end = valueEnd(line, j); end < 0 {
				return 0, malformed(line, "message %d is not a complete JSON object", n)
			}
			if fn != nil {
				err = fn(line[j:end])
			}
		}
		if err != nil {
			return 0, fmt.Errorf("%w (message %d of a batch envelope)", err, n)
		}
		j = skipSpace(line, end)
		switch {
		case j >= len(line):
			return 0, malformed(line, "the messages array is not closed")
		case line[j] == ',':
			j = skipSpace(line, j+1)
		case line[j] == ']':
			return j + 1, nil
		default:
			return 0, malformed(line, "after message %d, %s where a comma or ] was expected", n, quoteAt(line, j))
		}
	}
}

// envelopeKeys is what the members of a line's top-level object say of it as an envelope.
type envelopeKeys struct {
	typ, messages int    // how many times each key appears (in any case, as the decoder matches keys)
	batch         bool   // some "type" is "batch"
	msgs          [2]int // the last "messages" value's bounds
	fault         string // the first thing that is not JSON, once found
}

// splitMembers is SplitBatch for a line that does not begin as Packer writes envelopes: it
// reads the members of the object to find its type and messages, then splits the messages.
func splitMembers(line []byte, fast FastFunc, fn func([]byte) error) (bool, error) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return false, nil
	}
	var k envelopeKeys
	err := k.members(line, i+1)
	if !k.batch {
		return false, nil // not an envelope; or not JSON, which DecodeMessage reports
	}
	if err != nil {
		return true, err
	}
	if err := k.check(line); err != nil {
		return true, err
	}
	if line[k.msgs[0]] != '[' {
		return true, malformed(line, `"messages" is not an array (want {"type":"batch","messages":[…]})`)
	}
	_, err = eachMessage(line, k.msgs[0], fast, fn)
	return true, err
}

// check refuses an envelope without messages or with its type or messages given twice.
func (k *envelopeKeys) check(line []byte) error {
	switch {
	case k.typ > 1 || k.messages > 1:
		return malformed(line, `a batch envelope gives "type" or "messages" more than once`)
	case k.messages == 0:
		return malformed(line, `"messages" is missing (want {"type":"batch","messages":[…]})`)
	}
	return nil
}

// members reads the members of the object whose first member starts at or after line[i],
// up to the end of the line. A fault once the type is known to be batch is a malformed
// envelope; before, it only stops the reading (the line is then no envelope SplitBatch reads).
func (k *envelopeKeys) members(line []byte, i int) error {
	i = skipSpace(line, i)
	if i < len(line) && line[i] == '}' && k.typ == 0 {
		return k.fail(line, "an object without members")
	}
	for {
		if i >= len(line) || line[i] != '"' {
			return k.fail(line, "%s where a key was expected", quoteAt(line, i))
		}
		kend := stringEnd(line, i)
		if kend < 0 {
			return k.fail(line, "a key that is not closed")
		}
		key, ok := jsonString(line[i : kend+1])
		if !ok {
			return k.fail(line, "a key that is not a valid JSON string")
		}
		i = skipSpace(line, kend+1)
		if i >= len(line) || line[i] != ':' {
			return k.fail(line, "%s where a colon was expected", quoteAt(line, i))
		}
		v := skipSpace(line, i+1)
		end := valueEnd(line, v)
		if end < 0 {
			return k.fail(line, "the value of %q is not complete", key)
		}
		switch {
		case strings.EqualFold(key, "type"):
			k.typ++
			if s, ok := jsonString(line[v:end]); ok && s == TypeBatch {
				k.batch = true
			}
		case strings.EqualFold(key, "messages"):
			k.messages++
			k.msgs = [2]int{v, end} // its messages are checked when split
		default:
			if raw := line[v:end]; !utf8.Valid(raw) || !json.Valid(raw) {
				return k.fail(line, "the value of %q is not valid JSON", key)
			}
		}
		i = skipSpace(line, end)
		switch {
		case i >= len(line):
			return k.fail(line, "the object is not closed")
		case line[i] == ',':
			i = skipSpace(line, i+1)
		case line[i] == '}':
			if skipSpace(line, i+1) != len(line) {
				return k.fail(line, "%s after the object", quoteAt(line, i+1))
			}
			return nil
		default:
			return k.fail(line, "%s where a comma or } was expected", quoteAt(line, i))
		}
	}
}

func (k *envelopeKeys) fail(line []byte, format string, args ...any) error {
	return malformed(line, "not valid JSON: "+format, args...)
}

// jsonString decodes tok, a JSON string token with its quotes; ok is false when it is none.
func jsonString(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[0] != '"' {
		return "", false
	}
	body := tok[1 : len(tok)-1]
	plainBody := true
	for _, c := range body {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			plainBody = false
			break
		}
	}
	if plainBody {
		return string(body), true
	}
	var s string
	if !utf8.Valid(body) || json.Unmarshal(tok, &s) != nil {
		return "", false
	}
	return s, true
}

func quoteAt(line []byte, i int) string {
	if i >= len(line) {
		return "the end of the line"
	}
	return errtext.Quote(line[i:])
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// scanClass sorts the bytes valueEnd stops at inside an object or array.
var scanClass = func() (t [256]uint8) {
	t['"'], t['{'], t['['], t['}'], t[']'] = 1, 2, 2, 3, 3
	return t
}()

// valueEnd returns the index just after the JSON value starting at b[i], or -1 when it does
// not end within b. It follows only what bounds a value (strings and brackets, and for a
// scalar the next delimiter); whether the value is valid JSON is for its decoder to say.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		if e := stringEnd(b, i); e >= 0 {
			return e + 1
		}
		return -1
	case '{', '[':
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j
			}
			j++
		}
		return j
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch scanClass[b[j]] {
		case 1:
			e := stringEnd(b, j)
			if e < 0 {
				return -1
			}
			j = e
		case 2:
			depth++
		case 3:
			if depth--; depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// stringEnd returns the index of the quote closing the JSON string whose opening quote is
// b[i], or -1 when it is not closed.
func stringEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		escapes := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q
		}
		j = q + 1
	}
}
