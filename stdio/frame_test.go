package stdio_test

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio"
)

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		line    string
		want    string // type, when accepted
		wantErr string // substring of the error, when refused
	}{
		{line: `{"type":"ready"}`, want: "ready"},
		{line: `{"type":"ready","window":8,"future":[1,{"x":2}]}`, want: "ready"},
		{line: `{"type":"ready","window":64,"concurrent":true,"cancel":false}`, want: "ready"},
		{line: `{"type":"ready","concurrent":"yes"}`, wantErr: `concurrent`},
		{line: `{"type":"ready","cancel":1}`, wantErr: `cancel`},
		{line: `{"type":"cancel","delivery":"d1"}`, want: "cancel"},
		{line: `  {"type":"done","delivery":"d1"}`, want: "done"},
		{line: `{"type":"emit","delivery":"d1","payload":{"a" : [1, 2]}}`, want: "emit"},
		{line: ``, wantErr: "empty line"},
		{line: `hello world`, wantErr: `not a JSON object`},
		{line: `[1,2]`, wantErr: `not a JSON object`},
		{line: `"x"`, wantErr: `not a JSON object`},
		{line: `null`, wantErr: `not a JSON object`},
		{line: `{"type":"done"`, wantErr: `not a valid JSON object`},
		{line: `{"type":"done"} trailing`, wantErr: `not a valid JSON object`},
		{line: "{\"type\":\"done\",\"delivery\":\"\xff\"}", wantErr: `not valid UTF-8`},
		{line: `{"delivery":"d1"}`, wantErr: `without "type"`},
		{line: `{"type":"launch"}`, wantErr: `unknown message type "launch"`},
		{line: `{"type":7}`, wantErr: `not a valid JSON object`},
		{line: "{\"type\":\"emit\",\"delivery\":\"d\",\"payload\":1\v}", wantErr: `not a valid JSON object`}, // not JSON whitespace
		{line: "{\"type\":\"emit\",\"delivery\":\"d\",\"payload\":\u00a01}", wantErr: `not a valid JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			var m stdio.Message
			err := stdio.DecodeMessage([]byte(tt.line), &m)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, stdio.ErrProtocol) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeMessage(%q) = %v; want an ErrProtocol error containing %q", tt.line, err, tt.wantErr)
				}
				return
			}
			if err != nil || m.Type != tt.want {
				t.Fatalf("DecodeMessage(%q) = type %q, %v; want %q, nil", tt.line, m.Type, err, tt.want)
			}
		})
	}
}

func TestDecodeMessagePayloadRaw(t *testing.T) {
	line := `{"type":"emit","delivery":"d","payload":{"b" : 1.50, "a":"\u00e9"}}`
	var m stdio.Message
	if err := stdio.DecodeMessage([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if got, want := string(m.Payload), `{"b" : 1.50, "a":"\u00e9"}`; got != want {
		t.Fatalf("payload = %s; want %s (bytes passed through)", got, want)
	}
	out := stdio.AppendMessage(nil, &m)
	if !bytes.Contains(out, []byte(`{"b" : 1.50, "a":"\u00e9"}`)) {
		t.Fatalf("AppendMessage = %s; want the payload bytes unchanged", out)
	}
}

func TestLineReader(t *testing.T) {
	tests := []struct {
		in      string
		max     int
		want    []string
		wantErr error
	}{
		{in: "a\nbb\n", max: 4, want: []string{"a", "bb"}, wantErr: io.EOF},
		{in: "abcd\n", max: 4, want: []string{"abcd"}, wantErr: io.EOF},
		{in: "abcde\nx\n", max: 4, wantErr: stdio.ErrLineTooLong},
		{in: "ab\ncd", max: 4, want: []string{"ab"}, wantErr: io.ErrUnexpectedEOF},
		{in: strings.Repeat("x", 200000) + "\n", max: 300000, want: []string{strings.Repeat("x", 200000)}, wantErr: io.EOF},
		{in: strings.Repeat("x", 200001) + "\n", max: 200000, wantErr: stdio.ErrLineTooLong},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(name, func(t *testing.T) {
			r := stdio.NewLineReader(strings.NewReader(tt.in), tt.max)
			var got []string
			var err error
			for {
				var line []byte
				line, err = r.ReadLine()
				if err != nil {
					break
				}
				got = append(got, string(line))
			}
			if !errors.Is(err, tt.wantErr) || strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("ReadLine over %q = %d lines, %v; want %d lines, %v", name, len(got), err, len(tt.want), tt.wantErr)
			}
		})
	}
}

// TestLineReaderLastLineWithoutNewline: a last line without a newline is returned, with
// ErrNoNewline, never dropped; at any length up to the limit.
func TestLineReaderLastLineWithoutNewline(t *testing.T) {
	for _, last := range []string{"cd", strings.Repeat("z", 100000)} {
		r := stdio.NewLineReader(strings.NewReader("ab\n"+last), 200000)
		if line, err := r.ReadLine(); err != nil || string(line) != "ab" {
			t.Fatalf("first ReadLine = %q, %v; want ab", line, err)
		}
		line, err := r.ReadLine()
		if !errors.Is(err, stdio.ErrNoNewline) || !errors.Is(err, io.ErrUnexpectedEOF) || string(line) != last {
			t.Fatalf("last ReadLine = %d bytes, %v; want the %d-byte line with ErrNoNewline", len(line), err, len(last))
		}
		if !strings.Contains(err.Error(), "the last line has no newline") {
			t.Errorf("error %q does not say the last line has no newline", err)
		}
	}
	r := stdio.NewLineReader(strings.NewReader("abcde"), 4)
	if _, err := r.ReadLine(); !errors.Is(err, stdio.ErrLineTooLong) {
		t.Errorf("a 5-byte last line over a 4-byte limit: %v; want ErrLineTooLong", err)
	}
}

func TestLineReaderTooLongNamesLimit(t *testing.T) {
	r := stdio.NewLineReader(strings.NewReader(strings.Repeat("y", stdio.MaxLineBytes+10)+"\n"), 0)
	_, err := r.ReadLine()
	// ErrLineTooLong decides; the words are for the author, who must see the limit and the line.
	if !errors.Is(err, stdio.ErrLineTooLong) || !strings.Contains(err.Error(), "8 MiB") || !strings.Contains(err.Error(), `"yyyy`) {
		t.Fatalf("ReadLine(9 MiB line) = %v; want ErrLineTooLong naming the 8 MiB limit and quoting the start", err)
	}
}

// FuzzDecodeMessage checks DecodeMessage's properties on any line: it never panics, accepts
// only UTF-8 JSON objects with a known type, and a message it accepts survives
// AppendMessage → DecodeMessage unchanged.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"ready","window":4}`,
		`{"type":"emit","delivery":"d1","key":"k","payload":{"x":[1,2,{"y":null}]},"headers":[{"key":"h","value":"v"},{"key":"b","valueBase64":"AAE="}]}`,
		`{"type":"metric","delivery":"d1","name":"n","value":1.5e3,"labels":{"a":"b"}}`,
		`{"type":"error","delivery":"d1","message":"boom","retryable":true}`,
		`{"type":"abstain","delivery":"d1","reason":"unsure"}`,
		`{"type":"item","delivery":"d","id":"t/0/1","key":"é","payload":"s","partition":3,"offset":9,"timestamp":1,"attempt":2,"idempotencyKey":"k"}`,
		`{"type":"hello","protocol":1,"action":"a","config":{"n":1},"vars":{"v":"x"}}`,
		`{"type":"done","delivery":"d1","unknown":{"deep":[true]}}`,
		`[]`, `{"type":"x"}`, "\xff", `{"type":"done"} {}`,
		`{"type":"done","delivery":"dl_1"}`, `{"type":"emit","delivery":"d","key":"k","payload":{"a":[1,"x"]}}`,
		`{"type":"emit","delivery":"d","payload": 1 ,"payload":2}`, "{\"type\":\"emit\",\"delivery\":\"d\",\"payload\":1\v}", `{"type":"emit","delivery":"d","payload":"é"}`, `{"type":"done","delivery":"a\"b"}`, `{"type":"done","delivery":"x"}"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // a LineReader never returns one
		}
		var m stdio.Message
		if err := stdio.DecodeMessage(line, &m); err != nil {
			if !errors.Is(err, stdio.ErrProtocol) {
				t.Fatalf("DecodeMessage(%q) = %v; want an ErrProtocol error", line, err)
			}
			return
		}
		if !utf8.Valid(line) || !stdjson.Valid(line) || m.Type == "" {
			t.Fatalf("DecodeMessage(%q) accepted a line that is not a UTF-8 JSON object with a type", line)
		}
		var generic map[string]any
		if err := stdjson.Unmarshal(line, &generic); err != nil {
			t.Fatalf("DecodeMessage(%q) accepted what encoding/json refuses: %v", line, err)
		}
		if v, ok := field(generic, "type"); ok && v != m.Type {
			t.Fatalf("DecodeMessage(%q) type %q; encoding/json reads %v", line, m.Type, v)
		}
		if v, ok := field(generic, "delivery"); ok && v != m.Delivery {
			t.Fatalf("DecodeMessage(%q) delivery %q; encoding/json reads %v", line, m.Delivery, v)
		}
		if v, ok := field(generic, "key"); ok && (m.Key == nil || *m.Key != v) {
			t.Fatalf("DecodeMessage(%q) key %v; encoding/json reads %q", line, m.Key, v)
		}
		if raw, ok := rawField(line, "payload"); ok && !bytes.Equal(bytes.TrimSpace(raw), m.Payload) && m.Type != stdio.TypeHello {
			t.Fatalf("DecodeMessage(%q) payload %s; encoding/json reads %s", line, m.Payload, raw)
		}
		if len(m.Payload) > 0 && !stdjson.Valid(m.Payload) {
			t.Fatalf("DecodeMessage(%q) payload %q is not valid JSON", line, m.Payload)
		}
		out := stdio.AppendMessage(nil, &m)
		if bytes.IndexByte(out[:len(out)-1], '\n') >= 0 || out[len(out)-1] != '\n' {
			t.Fatalf("AppendMessage(%+v) = %q; want exactly one line", m, out)
		}
		var m2 stdio.Message
		if err := stdio.DecodeMessage(out[:len(out)-1], &m2); err != nil {
			t.Fatalf("DecodeMessage(AppendMessage(%q)) = %v; want nil (encoded %q)", line, err, out)
		}
		if out2 := stdio.AppendMessage(nil, &m2); !bytes.Equal(out, out2) {
			t.Fatalf("round trip of %q:\n first %q\nsecond %q", line, out, out2)
		}
	})
}

// field returns the string value of the one key of obj matching name case-insensitively (as
// struct decoding does); ok is false when there is none, more than one, or it is no string.
func field(obj map[string]any, name string) (v string, ok bool) {
	n := 0
	isString := false
	for k, x := range obj {
		if strings.EqualFold(k, name) {
			v, isString = x.(string)
			n++
		}
	}
	return v, n == 1 && isString
}

// rawField returns the raw bytes of the one key of a JSON object line matching name exactly;
// ok is false when there is none or it appears twice, or a case-folded twin exists.
func rawField(line []byte, name string) (stdjson.RawMessage, bool) {
	var obj map[string]stdjson.RawMessage
	if stdjson.Unmarshal(line, &obj) != nil {
		return nil, false
	}
	n := 0
	for k := range obj {
		if strings.EqualFold(k, name) {
			n++
		}
	}
	raw, ok := obj[name]
	if !ok || n != 1 || bytes.Count(line, []byte(`"`+name+`"`)) != 1 {
		return nil, false
	}
	return raw, true
}

// FuzzDecodeLines checks LineReader on any stream and limit: every line it returns fits the
// limit and holds no newline, and the lines it returns are the stream's lines in order.
func FuzzDecodeLines(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 2)
	f.Add([]byte(strings.Repeat("z", 70000)+"\nq\n"), 80000)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		if limit <= 0 || limit > 1<<20 {
			return
		}
		r := stdio.NewLineReader(bytes.NewReader(in), limit)
		rest := in
		for {
			line, err := r.ReadLine()
			if err != nil {
				i := bytes.IndexByte(rest, '\n')
				switch {
				case errors.Is(err, io.EOF):
					if len(rest) != 0 {
						t.Fatalf("EOF with %d bytes left", len(rest))
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
					if i >= 0 || len(rest) == 0 {
						t.Fatalf("ErrUnexpectedEOF with a complete line left")
					}
					if !bytes.Equal(line, rest) {
						t.Fatalf("last line without a newline = %q; want %q", line, rest)
					}
				case errors.Is(err, stdio.ErrLineTooLong):
					if i >= 0 && i <= limit {
						t.Fatalf("ErrLineTooLong for a %d-byte line, limit %d", i, limit)
					}
				default:
					t.Fatalf("ReadLine: %v", err)
				}
				return
			}
			i := bytes.IndexByte(rest, '\n')
			if i < 0 || !bytes.Equal(line, rest[:i]) || len(line) > limit {
				t.Fatalf("ReadLine = %q; want %q (limit %d)", line, rest[:max(i, 0)], limit)
			}
			rest = rest[i+1:]
		}
	})
}

// BenchmarkAppendItem measures one item line of a 200-byte record as the bridge writes it to
// a child: every string field set, a trace context.
//
//	go test -run '^$' -bench BenchmarkAppendItem -benchmem ./stdio/
func BenchmarkAppendItem(b *testing.B) {
	it := stdio.Item{
		Delivery: "d3f-18a2c", ID: "listings/3/104217", Run: "conv-7f3a9c2e1b", Inlet: "in", Topic: "listings",
		Payload:   []byte(`{"id":104217,"name":"listing-42","city":"Lyon","price":1234.5,"tags":["a","b"],"pad":"qmVh3kLs9TzR2wXy7pBn4cJd8fGa1eHu6iKo0lMv5NtQxZ3rYsW9bCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}`),
		Partition: 3, Offset: 104217, Timestamp: 1764590000000, Attempt: 1, IdempotencyKey: "25ec15e1e9cdf74d5a74c078f578c602",
		Trace: stdio.TraceContext{TraceID: stdio.NewTraceID(), SpanID: stdio.NewSpanID(), Flags: 1},
	}
	var line []byte
	b.ReportAllocs()
	for b.Loop() {
		line = stdio.AppendItem(line[:0], &it)
	}
	b.SetBytes(int64(len(line)))
}

// FuzzAppendItemString checks the strings of an item line: whatever the bytes, encoding/json
// reads back the same text (each byte that is not UTF-8 as U+FFFD, as encoding/json writes it).
func FuzzAppendItemString(f *testing.F) {
	for _, s := range []string{"", "listings/3/42", `a"b\c`, "tab\tnl\n\x00\x1f\x7f", "é\xff\xc3\x28", "plain then \u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		line := stdio.AppendItem(nil, &stdio.Item{Delivery: "d1", ID: s, Topic: s, Payload: []byte("null")})
		var got struct{ ID, Topic string }
		if err := stdjson.Unmarshal(line, &got); err != nil {
			t.Fatalf("AppendItem(id %q) = %s: not JSON: %v", s, line, err)
		}
		var want strings.Builder
		for _, r := range s { // each byte that is not UTF-8 is U+FFFD
			want.WriteRune(r)
		}
		if got.ID != want.String() || got.Topic != want.String() {
			t.Fatalf("AppendItem(id %q) read back as %q, %q; want %q", s, got.ID, got.Topic, want.String())
		}
	})
}

// TestAppendItemIsAppendMessage: AppendItem writes exactly what AppendMessage writes of the
// same item, field for field, with and without a trace context.
func TestAppendItemIsAppendMessage(t *testing.T) {
	key, hv := "k\"1", "v\n"
	it := stdio.Item{
		Delivery: "d7", ID: "t/3/42", Run: "c1", Key: &key, Payload: []byte(`{"a":1}`),
		Headers: []stdio.Header{{Key: "h", Value: &hv}, {Key: "b", ValueBase64: "/w=="}}, Inlet: "in", Topic: "t",
		Partition: 3, Offset: 42, Timestamp: 1700000000000, Attempt: 2, IdempotencyKey: "25ec15e1e9cdf74d5a74c078f578c602",
	}
	m := stdio.Message{
		Type: stdio.TypeItem, Delivery: it.Delivery, ID: it.ID, Run: it.Run, Key: it.Key, Payload: it.Payload,
		Headers: it.Headers, Inlet: it.Inlet, Topic: it.Topic, Partition: it.Partition, Offset: it.Offset,
		Timestamp: it.Timestamp, Attempt: it.Attempt, IdempotencyKey: it.IdempotencyKey,
	}
	if got, want := string(stdio.AppendItem(nil, &it)), string(stdio.AppendMessage(nil, &m)); got != want {
		t.Errorf("AppendItem = %s\nAppendMessage = %s", got, want)
	}
	it.Trace = stdio.TraceContext{TraceID: stdio.NewTraceID(), SpanID: stdio.NewSpanID(), Flags: 1}
	it.Tracestate = "vendor=1"
	tp := it.Trace.Traceparent(it.Trace.SpanID)
	m.Traceparent, m.Tracestate = string(tp[:]), it.Tracestate
	if got, want := string(stdio.AppendItem(nil, &it)), string(stdio.AppendMessage(nil, &m)); got != want {
		t.Errorf("AppendItem(trace) = %s\nAppendMessage = %s", got, want)
	}
}

// TestReadyFlagsRoundTrip: ready's "concurrent" and "cancel" are written as AppendMessage
// writes them, only when true, and read back; cancel names its delivery.
func TestReadyFlagsRoundTrip(t *testing.T) {
	for _, m := range []stdio.Message{
		{Type: stdio.TypeReady, Window: 128, Batch: true, Concurrent: true, Cancel: true},
		{Type: stdio.TypeReady, Window: 8},
		{Type: stdio.TypeCancel, Delivery: "dl_1"},
	} {
		line := stdio.AppendMessage(nil, &m)
		var got stdio.Message
		if err := stdio.DecodeMessage(line[:len(line)-1], &got); err != nil || got.Type != m.Type || got.Delivery != m.Delivery ||
			got.Window != m.Window || got.Batch != m.Batch || got.Concurrent != m.Concurrent || got.Cancel != m.Cancel {
			t.Errorf("DecodeMessage(AppendMessage(%+v) = %s) = %+v, %v; want the same fields", m, line, got, err)
		}
		if !m.Concurrent && strings.Contains(string(line), "concurrent") {
			t.Errorf("AppendMessage(%+v) = %s; want no \"concurrent\" when false", m, line)
		}
	}
}
