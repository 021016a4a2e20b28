package stdio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio/internal/errtext"
	"github.com/goccy/go-json"
)

// readBufSize is the buffered reader's size: lines up to it are returned without copying.
const readBufSize = 64 << 10

// LineReader reads newline-terminated lines of at most a fixed length from a stream, in
// bounded memory: a longer line is an error wrapping ErrLineTooLong that names the limit and
// quotes the line's start, never a hang or an unbounded buffer. It is not safe for concurrent
// use.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader returns a LineReader over r for lines of at most max bytes, newline excluded
// (MaxLineBytes when max <= 0).
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = MaxLineBytes
	}
	return &LineReader{r: bufio.NewReaderSize(r, readBufSize), max: max}
}

// Buffered reports whether a complete or partial next line is already buffered, so a writer
// answering lines can tell that more input is waiting before it flushes.
func (l *LineReader) Buffered() int { return l.r.Buffered() }

// ErrNoNewline is returned by ReadLine together with a last line that has no newline. It
// matches io.ErrUnexpectedEOF. Whether that is a line or a fault is the caller's to say: an
// input file's last line is a line; a protocol stream's is a violation (a writer that died
// mid-line, or forgot the newline).
var ErrNoNewline = fmt.Errorf("the last line has no newline: %w", io.ErrUnexpectedEOF)

// ReadLine returns the next line without its newline. The slice is valid until the next call.
// At the end of the stream it returns io.EOF; a last line without a newline is returned with
// ErrNoNewline (never dropped).
func (l *LineReader) ReadLine() ([]byte, error) {
	if cap(l.buf) > 1<<20 {
		l.buf = nil // do not hold a long line's memory past its use
	}
	line, err := l.r.ReadSlice('\n')
	switch {
	case err == nil:
		if len(line)-1 > l.max {
			return nil, l.tooLong(line)
		}
		return line[:len(line)-1], nil
	case errors.Is(err, bufio.ErrBufferFull):
	case errors.Is(err, io.EOF):
		if len(line) > 0 {
			if len(line) > l.max {
				return nil, l.tooLong(line)
			}
			return line, ErrNoNewline
		}
		return nil, io.EOF
	default:
		return nil, err
	}
	l.buf = append(l.buf[:0], line...)
	for {
		line, err = l.r.ReadSlice('\n')
		if len(l.buf)+len(line) > l.max+1 {
			return nil, l.tooLong(append(l.buf, line...))
		}
		l.buf = append(l.buf, line...)
		switch {
		case err == nil:
			return l.buf[:len(l.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) > l.max {
				return nil, l.tooLong(l.buf)
			}
			return l.buf, ErrNoNewline
		default:
			return nil, err
		}
	}
}

func (l *LineReader) tooLong(start []byte) error {
	e := NewProtocolError(RuleLineTooLong, start, fmt.Sprintf("a line is longer than the %d-byte limit (%s); it starts", l.max, errtext.Size(l.max)))
	e.Err = ErrLineTooLong
	return e
}

// DecodeMessage decodes one protocol line (without its newline) into m, which it resets first.
// The line must be UTF-8, one JSON object, with a known "type"; unknown keys are ignored and
// payloads kept as raw bytes. Any other line gives a *ProtocolError (matching ErrProtocol):
// the rule it breaks, what is wrong, and the start of the line. A batch envelope decodes as a message of
// type batch with its array in Messages; SplitBatch reads its messages.
func DecodeMessage(line []byte, m *Message) error {
	*m = Message{}
	if decodeFast(line, m) {
		return nil
	}
	if pe := decodeObject(line, m, "a line"); pe != nil {
		return pe
	}
	return nil
}

// decodeObject is DecodeMessage past the fast path: it returns the violation of b, named as
// noun ("a line", "a message"), or nil when m holds it.
func decodeObject(b []byte, m *Message, noun string) *ProtocolError {
	trimmed := bytes.TrimLeft(b, " \t\r")
	if len(trimmed) == 0 {
		return NewProtocolError(RuleEmptyLine, nil, "an empty line where a JSON object was expected")
	}
	if !utf8.Valid(b) {
		return NewProtocolError(RuleNotUTF8, b, noun+" that is not valid UTF-8")
	}
	if trimmed[0] != '{' {
		return NewProtocolError(RuleNotObject, b, noun+" that is not a JSON object (one object per line; logs go to stderr)")
	}
	if err := json.Unmarshal(b, m); err != nil {
		rule := RuleInvalidJSON
		if json.Valid(b) {
			rule = RuleBadField
		}
		return NewProtocolError(rule, b, fmt.Sprintf("%s that is not a valid JSON object (%v)", noun, shortErr(err)))
	}
	switch m.Type {
	case TypeHello, TypeReady, TypeItem, TypeEmit, TypeMetric, TypeDone, TypeError, TypeAbstain, TypeShutdown, TypeBatch, TypeState, TypeCancel:
		return nil
	case "":
		return NewProtocolError(RuleNoType, b, `a JSON object without "type"`)
	}
	return NewProtocolError(RuleUnknownType, b, fmt.Sprintf("unknown message type %q (want emit, metric, state, done, error, abstain, batch or ready)", m.Type))
}

// FastAnswer recognises, without the general decoder and without allocating, the three lines
// an action writes most, when written exactly as AppendMessage writes them:
// {"type":"done","delivery":"<id>"},
// {"type":"emit","delivery":"<id>",["key":"<key>",]"payload":<value>} and
// {"type":"state","delivery":"<id>","state":<value>}, with an id and key free of escapes and
// non-ASCII bytes and one valid JSON value, returned as payload (a state's "null" included).
// The slices point into line. ok is false for any other line, which the general decoder
// then reads.
func FastAnswer(line []byte) (typ string, delivery, key, payload []byte, hasKey, ok bool) {
	const donePrefix, emitPrefix = `{"type":"done","delivery":"`, `{"type":"emit","delivery":"`
	if len(line) < len(donePrefix)+2 || line[len(line)-1] != '}' {
		return "", nil, nil, nil, false, false
	}
	switch string(line[:len(donePrefix)]) {
	case donePrefix:
		id, rest, ok := plainString(line[len(donePrefix):])
		if !ok || len(rest) != 1 {
			return "", nil, nil, nil, false, false
		}
		return TypeDone, id, nil, nil, false, true
	case emitPrefix:
	default:
		if !bytes.HasPrefix(line, []byte(statePrefix)) {
			return "", nil, nil, nil, false, false
		}
		id, rest, ok := plainString(line[len(statePrefix):])
		if !ok || !bytes.HasPrefix(rest, []byte(`,"state":`)) {
			return "", nil, nil, nil, false, false
		}
		value := trimSpace(rest[len(`,"state":`) : len(rest)-1])
		if len(value) == 0 || !utf8.Valid(value) || !json.Valid(value) {
			return "", nil, nil, nil, false, false
		}
		return TypeState, id, nil, value, false, true
	}
	id, rest, ok := plainString(line[len(emitPrefix):])
	if !ok {
		return "", nil, nil, nil, false, false
	}
	if bytes.HasPrefix(rest, []byte(`,"key":"`)) {
		if key, rest, ok = plainString(rest[len(`,"key":"`):]); !ok {
			return "", nil, nil, nil, false, false
		}
		hasKey = true
	}
	if !bytes.HasPrefix(rest, []byte(`,"payload":`)) {
		return "", nil, nil, nil, false, false
	}
	payload = trimSpace(rest[len(`,"payload":`) : len(rest)-1])
	if len(payload) == 0 || !utf8.Valid(payload) || !json.Valid(payload) {
		return "", nil, nil, nil, false, false
	}
	return TypeEmit, id, key, payload, hasKey, true
}

// statePrefix begins a state message as AppendMessage writes it: FastAnswer's third shape.
const statePrefix = `{"type":"state","delivery":"`

// trimSpace cuts JSON's whitespace (not every Unicode space: a line padded with those is
// no JSON) from both ends of b.
func trimSpace(b []byte) []byte {
	i := skipSpace(b, 0)
	j := len(b)
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t' || b[j-1] == '\r' || b[j-1] == '\n') {
		j--
	}
	return b[i:j]
}

// decodeFast fills m from a line FastAnswer recognises.
func decodeFast(line []byte, m *Message) bool {
	typ, delivery, key, payload, hasKey, ok := FastAnswer(line)
	if !ok {
		return false
	}
	m.Type, m.Delivery = typ, string(delivery)
	if hasKey {
		k := string(key)
		m.Key = &k
	}
	switch {
	case typ == TypeState:
		m.State = append(json.RawMessage(nil), payload...)
	case payload != nil:
		m.Payload = append(json.RawMessage(nil), payload...)
	}
	return true
}

// plainString splits b after a JSON string body free of escapes, control and non-ASCII
// bytes, whose opening quote was already consumed.
func plainString(b []byte) (body, rest []byte, ok bool) {
	for i, c := range b {
		switch {
		case c == '"':
			return b[:i], b[i+1:], true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// AppendMessage appends m as one protocol line, newline included, to dst. Payload and Config
// are written as the raw bytes given (they must be valid JSON without a raw newline; an empty
// one is written as null where the type requires it). Fields that mean nothing for m.Type are
// left out when zero.
func AppendMessage(dst []byte, m *Message) []byte {
	return append(appendBody(dst, m), '}', '\n')
}

// appendBody is AppendMessage without the closing brace and newline.
func appendBody(dst []byte, m *Message) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, m.Type)
	if m.Delivery != "" {
		dst = append(dst, `,"delivery":`...)
		dst = appendString(dst, m.Delivery)
	}
	switch m.Type {
	case TypeHello:
		dst = append(dst, `,"protocol":`...)
		dst = strconv.AppendInt(dst, int64(m.Protocol), 10)
		dst = appendField(dst, "action", m.Action)
		dst = appendField(dst, "version", m.Version)
		dst = append(dst, `,"config":`...)
		dst = appendRaw(dst, m.Config, "{}")
		if len(m.Vars) > 0 {
			vars, err := json.Marshal(m.Vars)
			if err == nil {
				dst = append(dst, `,"vars":`...)
				dst = append(dst, vars...)
			}
		}
		dst = appendState(dst, m.State)
	case TypeReady:
		if m.Window != 0 {
			dst = append(dst, `,"window":`...)
			dst = strconv.AppendInt(dst, int64(m.Window), 10)
		}
		if m.Batch {
			dst = append(dst, `,"batch":true`...)
		}
		if m.Concurrent {
			dst = append(dst, `,"concurrent":true`...)
		}
		if m.Cancel {
			dst = append(dst, `,"cancel":true`...)
		}
		dst = appendState(dst, m.State)
	case TypeState:
		dst = appendState(dst, m.State)
	case TypeBatch:
		dst = append(dst, `,"messages":`...)
		dst = appendRaw(dst, m.Messages, "[]")
	case TypeItem:
		dst = appendItemFields(dst, &Item{
			ID: m.ID, Run: m.Run, Key: m.Key, KeyBase64: m.KeyBase64, Payload: m.Payload,
			Headers: m.Headers, Inlet: m.Inlet, Topic: m.Topic, Partition: m.Partition,
			Offset: m.Offset, Timestamp: m.Timestamp, Attempt: m.Attempt, IdempotencyKey: m.IdempotencyKey,
			State: m.State,
		})
		dst = appendField(dst, "traceparent", m.Traceparent)
		dst = appendField(dst, "tracestate", m.Tracestate)
	case TypeEmit:
		dst = appendField(dst, "outlet", m.Outlet)
		dst = appendKey(dst, m.Key, m.KeyBase64)
		dst = append(dst, `,"payload":`...)
		dst = appendRaw(dst, m.Payload, "null")
		dst = appendHeaders(dst, m.Headers)
	case TypeMetric:
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, m.Name)
		dst = append(dst, `,"value":`...)
		dst = appendFloat(dst, m.Value)
		if len(m.Labels) > 0 {
			names := make([]string, 0, len(m.Labels))
			for k := range m.Labels {
				names = append(names, k)
			}
			sort.Strings(names)
			dst = append(dst, `,"labels":{`...)
			for i, k := range names {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendString(dst, k)
				dst = append(dst, ':')
				dst = appendString(dst, m.Labels[k])
			}
			dst = append(dst, '}')
		}
	case TypeError:
		dst = appendField(dst, "message", m.Message)
		dst = appendField(dst, "error", m.Error)
		dst = append(dst, `,"retryable":`...)
		dst = strconv.AppendBool(dst, m.Retryable)
	case TypeAbstain:
		dst = appendField(dst, "reason", m.Reason)
	}
	return dst
}

// AppendItem appends it as an item line; a valid it.Trace is written as "traceparent" (the
// attempt's span as parent-id) without a string made for it. It writes what AppendMessage
// writes of the same item, without copying it into a Message.
func AppendItem(dst []byte, it *Item) []byte {
	dst = append(dst, `{"type":"`+TypeItem+`"`...)
	if it.Delivery != "" {
		dst = append(dst, `,"delivery":`...)
		dst = appendString(dst, it.Delivery)
	}
	dst = appendItemFields(dst, it)
	if it.Trace.IsValid() {
		dst = append(dst, `,"traceparent":"`...)
		dst = it.Trace.AppendTraceparent(dst, it.Trace.SpanID)
		dst = append(dst, '"')
		dst = appendField(dst, "tracestate", it.Tracestate)
	}
	return append(dst, '}', '\n')
}

// appendItemFields appends the fields of an item line from "id" to "state".
func appendItemFields(dst []byte, it *Item) []byte {
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, it.ID)
	dst = appendField(dst, "run", it.Run)
	dst = appendKey(dst, it.Key, it.KeyBase64)
	dst = append(dst, `,"payload":`...)
	dst = appendRaw(dst, it.Payload, "null")
	dst = appendHeaders(dst, it.Headers)
	dst = appendField(dst, "inlet", it.Inlet)
	dst = appendField(dst, "topic", it.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(it.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, it.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, it.Timestamp, 10)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(it.Attempt), 10)
	dst = appendField(dst, "idempotencyKey", it.IdempotencyKey)
	return appendState(dst, it.State)
}

// appendState appends a "state" member holding raw as given, or nothing when raw is empty:
// a state message's "state": null is written, a missing one is not.
func appendState(dst, raw []byte) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return dst
	}
	dst = append(dst, `,"state":`...)
	return append(dst, raw...)
}

func appendField(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendString(dst, v)
}

func appendKey(dst []byte, key *string, keyBase64 string) []byte {
	if key != nil {
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, *key)
	}
	return appendField(dst, "keyBase64", keyBase64)
}

func appendHeaders(dst []byte, hs []Header) []byte {
	if len(hs) == 0 {
		return dst
	}
	dst = append(dst, `,"headers":[`...)
	for i := range hs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":`...)
		dst = appendString(dst, hs[i].Key)
		if hs[i].Value != nil {
			dst = append(dst, `,"value":`...)
			dst = appendString(dst, *hs[i].Value)
		}
		dst = appendField(dst, "valueBase64", hs[i].ValueBase64)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendRaw(dst, raw []byte, empty string) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return append(dst, empty...)
	}
	return append(dst, raw...)
}

func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

const hexDigits = "0123456789abcdef"

// plain[c] reports whether byte c stands for itself in a JSON string as appendString writes
// it: ASCII from the space up, except the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string. Bytes that are not UTF-8 become U+FFFD, as
// encoding/json does. A string of plain bytes only (ids, topics, keys: nearly every string of
// an item line) is found so with one table look-up a byte and copied whole.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	i := 0
	for i < len(s) && plain[s[i]] {
		i++
	}
	if i == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	start := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
