package stdio_test

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio"
)

// msgOf returns a done message line of exactly n bytes (n >= 32).
func msgOf(n int) string {
	const head = `{"type":"done","delivery":"`
	return head + strings.Repeat("d", n-len(head)-2) + `"}`
}

// split returns the messages of packed lines: an envelope's, or the line itself.
func split(t *testing.T, out []byte) (msgs []string, shapes []string) {
	t.Helper()
	if len(out) > 0 && out[len(out)-1] != '\n' {
		t.Fatalf("packed output %q does not end with a newline", out)
	}
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		line = line[:len(line)-1]
		n := 0
		ok, err := stdio.SplitBatch(line, func(msg []byte) error {
			msgs = append(msgs, string(msg))
			n++
			return nil
		})
		switch {
		case err != nil:
			t.Fatalf("SplitBatch(%q) = %v", line, err)
		case ok:
			shapes = append(shapes, fmt.Sprintf("batch%d:%d", n, len(line)))
		default:
			msgs = append(msgs, string(line))
			shapes = append(shapes, fmt.Sprintf("line:%d", len(line)))
		}
	}
	return msgs, shapes
}

func TestPacker(t *testing.T) {
	tests := []struct {
		name  string
		max   int
		sizes []int
		want  string // the lines' shapes
	}{
		{"one message is a line", 1000, []int{100}, "line:100"},
		{"two make an envelope", 1000, []int{100, 200}, "batch2:331"},
		{"at the limit exactly", 331, []int{100, 200}, "batch2:331"},
		{"one byte over the limit: two lines", 330, []int{100, 200}, "line:100 line:200"},
		{"a full envelope, then the next", 400, []int{100, 100, 100, 100, 100}, "batch3:332 batch2:231"},
		{"too large for an envelope: a line between envelopes", 400, []int{100, 100, 371, 100, 100}, "batch2:231 line:371 batch2:231"},
		{"at the envelope limit alone: a line", 400, []int{100, 370}, "line:100 line:370"},
		{"a line alone after a full envelope", 240, []int{100, 100, 100}, "batch2:231 line:100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := stdio.Packer{Max: tt.max}
			var in []string
			for _, n := range tt.sizes {
				in = append(in, msgOf(n))
				p.AppendLine([]byte(in[len(in)-1]))
			}
			msgs, shapes := split(t, p.Bytes())
			if got := strings.Join(shapes, " "); got != tt.want {
				t.Errorf("Packer{Max: %d} of %v = %s; want %s", tt.max, tt.sizes, got, tt.want)
			}
			if strings.Join(msgs, "\n") != strings.Join(in, "\n") {
				t.Errorf("messages split back = %q; want %q", msgs, in)
			}
		})
	}
}

// TestPackerAtMaxLineBytes: the zero Packer packs up to MaxLineBytes exactly, and an item
// written by Packer is the item line AppendItem writes.
func TestPackerAtMaxLineBytes(t *testing.T) {
	it := stdio.Item{Delivery: "d1", ID: "t/0/1", Payload: []byte(`"x"`)}
	line := stdio.AppendItem(nil, &it)
	half := (stdio.MaxLineBytes - stdio.BatchOverhead - 1) / 2
	for _, extra := range []int{0, 1} {
		var p stdio.Packer
		p.AppendItem(&it)
		p.AppendLine([]byte(msgOf(half)))
		p.AppendLine([]byte(msgOf(stdio.MaxLineBytes - stdio.BatchOverhead - 2 - (len(line) - 1) - half + extra)))
		msgs, shapes := split(t, p.Bytes())
		want := fmt.Sprintf("batch3:%d", stdio.MaxLineBytes)
		if extra == 1 {
			want = fmt.Sprintf("batch2:%d line:%d", stdio.BatchOverhead+len(line)+half, stdio.MaxLineBytes-stdio.BatchOverhead-len(line)-half)
		}
		if got := strings.Join(shapes, " "); got != want {
			t.Errorf("extra %d: shapes %s; want %s", extra, got, want)
		}
		if msgs[0]+"\n" != string(line) {
			t.Errorf("the item in the envelope = %q; want %q", msgs[0], line)
		}
	}
}

func TestPackerSingleAndReset(t *testing.T) {
	p := stdio.Packer{Single: true}
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "a"})
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "b"})
	if got, want := string(p.Bytes()), "{\"type\":\"done\",\"delivery\":\"a\"}\n{\"type\":\"done\",\"delivery\":\"b\"}\n"; got != want {
		t.Errorf("Single Packer = %q; want %q", got, want)
	}
	p = stdio.Packer{}
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "a"})
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "b"})
	first := string(p.Bytes())
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "c"}) // after Bytes: a line of its own
	if got, want := string(p.Bytes()), first+"{\"type\":\"done\",\"delivery\":\"c\"}\n"; got != want {
		t.Errorf("after Bytes = %q; want %q", got, want)
	}
	p.Reset()
	if p.Len() != 0 || len(p.Bytes()) != 0 {
		t.Errorf("after Reset: %d bytes; want 0", p.Len())
	}
	p.AppendMessage(&stdio.Message{Type: stdio.TypeReady, Window: 8, Batch: true})
	if got, want := string(p.Bytes()), "{\"type\":\"ready\",\"window\":8,\"batch\":true}\n"; got != want {
		t.Errorf("ready = %q; want %q", got, want)
	}
}

func TestSplitBatch(t *testing.T) {
	const done1, emit2 = `{"type":"done","delivery":"d1"}`, `{"type":"emit","delivery":"d2","payload":{"a":[1,"]}"]}}`
	tests := []struct {
		line    string
		notOK   bool
		want    []string // the messages, when split
		wantErr string   // substring of a malformed envelope's error
	}{
		{line: `{"type":"batch","messages":[` + done1 + `,` + emit2 + `]}`, want: []string{done1, emit2}},
		{line: `{"type":"batch","messages":[]}`},
		{line: `{"type":"batch","messages":[ ` + done1 + ` , ` + emit2 + ` ]} `, want: []string{done1, emit2}},
		{line: ` { "type" : "batch" , "messages" : [` + done1 + `] }`, want: []string{done1}},
		{line: `{"messages":[` + done1 + `],"future":{"x":[1]},"type":"batch"}`, want: []string{done1}},
		{line: `{"type":"batch","messages":[` + done1 + `],"future":"ok"}`, want: []string{done1}},
		{line: `{"Type":"b\u0061tch","MESSAGES":[` + done1 + `]}`, want: []string{done1}},
		{line: done1, notOK: true},
		{line: `{"type":"emit","messages":[1]}`, notOK: true},
		{line: `[1,2]`, notOK: true},
		{line: `not json`, notOK: true},
		{line: `{"delivery":"d","type":"done"}`, notOK: true},
		{line: `{"type":"batch"}`, wantErr: `"messages" is missing`},
		{line: `{"type":"batch","messages":{}}`, wantErr: `"messages" is not an array`},
		{line: `{"type":"batch","messages":"x"}`, wantErr: `"messages" is not an array`},
		{line: `{"type":"batch","messages":[1]}`, wantErr: `message 1 is not a JSON object`},
		{line: `{"type":"batch","messages":[` + done1 + `,"x"]}`, want: []string{done1}, wantErr: `message 2 is not a JSON object`},
		{line: `{"type":"batch","messages":[` + done1 + ` ` + done1 + `]}`, want: []string{done1}, wantErr: `after message 1`},
		{line: `{"type":"batch","messages":[` + done1, want: []string{done1}, wantErr: `not closed`},
		{line: `{"type":"batch","messages":[{"type":"done"`, wantErr: `message 1 is not a complete JSON object`},
		{line: `{"type":"batch","messages":[],"type":"done"}`, wantErr: `more than once`},
		{line: `{"type":"batch","messages":[],"messages":[]}`, wantErr: `more than once`},
		{line: `{"type":"batch","messages":[],"x":tru}`, wantErr: `not valid JSON`},
		{line: `{"type":"batch","messages":[]} {}`, wantErr: `where a comma or } was expected`},
		{line: `{"type":"batch","x":1,"messages":[]`, wantErr: `not valid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			var got []string
			ok, err := stdio.SplitBatch([]byte(tt.line), func(msg []byte) error {
				got = append(got, string(msg))
				return nil
			})
			if ok == tt.notOK {
				t.Fatalf("SplitBatch(%s) ok = %v; want %v", tt.line, ok, !tt.notOK)
			}
			if tt.wantErr != "" {
				if !errors.Is(err, stdio.ErrProtocol) || !errors.Is(err, stdio.ErrMalformedBatch) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "a malformed batch envelope: ") {
					t.Fatalf("SplitBatch(%s) = %v; want a malformed batch envelope error containing %q", tt.line, err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("SplitBatch(%s) = %v; want nil", tt.line, err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("SplitBatch(%s) passed %q; want %q", tt.line, got, tt.want)
			}
		})
	}
}

// TestSplitBatchStopsAtFn: fn's error ends the split, naming the message's place, with the
// messages before it passed.
func TestSplitBatchStopsAtFn(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	ok, err := stdio.SplitBatch([]byte(`{"type":"batch","messages":[{"a":1},{"b":2},{"c":3}]}`), func([]byte) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !ok || !errors.Is(err, stop) || !strings.Contains(err.Error(), "message 2 of a batch envelope") || n != 2 {
		t.Fatalf("SplitBatch = %v, %v after %d messages; want fn's error at message 2", ok, err, n)
	}
}

func TestDecodeInBatch(t *testing.T) {
	tests := []struct {
		msg     string
		want    string // the type, when accepted
		wantErr string
	}{
		{msg: `{"type":"done","delivery":"d1"}`, want: stdio.TypeDone},
		{msg: `{"type":"emit","delivery":"d1","key":"k","payload":[1]}`, want: stdio.TypeEmit},
		{msg: `{"type":"error","delivery":"d1","message":"m","retryable":true}`, want: stdio.TypeError},
		{msg: `{"type":"ready"}`, want: stdio.TypeReady}, // which types a direction allows is the caller's
		{msg: `{"type":"batch","messages":[]}`, wantErr: "envelopes do not nest"},
		{msg: `{"type":"launch"}`, wantErr: `unknown message type "launch"`},
		{msg: `{"delivery":"d1"}`, wantErr: `without "type"`},
		{msg: `{"type":"metric","value":"3"}`, wantErr: "a message that is not a valid JSON object"},
		{msg: "{\"type\":\"done\",\"delivery\":\"\xff\"}", wantErr: "a message that is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			var m stdio.Message
			err := stdio.DecodeInBatch([]byte(tt.msg), &m)
			if tt.wantErr != "" {
				if !errors.Is(err, stdio.ErrMalformedBatch) || !errors.Is(err, stdio.ErrProtocol) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeInBatch(%s) = %v; want a malformed batch envelope error containing %q", tt.msg, err, tt.wantErr)
				}
				return
			}
			if err != nil || m.Type != tt.want {
				t.Fatalf("DecodeInBatch(%s) = %q, %v; want %q", tt.msg, m.Type, err, tt.want)
			}
		})
	}
}

// TestDecodeMessageBatch: an envelope is a known type for DecodeMessage, its array in
// Messages, and AppendMessage writes it back.
func TestDecodeMessageBatch(t *testing.T) {
	line := `{"type":"batch","messages":[{"type":"done","delivery":"d1"}]}`
	var m stdio.Message
	if err := stdio.DecodeMessage([]byte(line), &m); err != nil || m.Type != stdio.TypeBatch || string(m.Messages) != `[{"type":"done","delivery":"d1"}]` {
		t.Fatalf("DecodeMessage(%s) = %+v, %v; want a batch with its messages", line, m, err)
	}
	if got := string(stdio.AppendMessage(nil, &m)); got != line+"\n" {
		t.Errorf("AppendMessage = %q; want %q", got, line+"\n")
	}
	if err := stdio.DecodeMessage([]byte(`{"type":"ready","window":4,"batch":true}`), &m); err != nil || !m.Batch || m.Window != 4 {
		t.Errorf("DecodeMessage(ready) = %+v, %v; want window 4, batch", m, err)
	}
}

// FuzzSplitBatch checks SplitBatch's properties on any line: it never panics; it refuses only
// with an ErrProtocol error naming a malformed envelope; an envelope it splits (each message
// through DecodeInBatch) is valid JSON with exactly one "type", "batch", and one "messages"
// array whose elements are the messages it passed, in order; a line it says is no envelope
// DecodeMessage does not read as one; and the messages packed again by Packer, at any size,
// split back to the same messages.
func FuzzSplitBatch(f *testing.F) {
	for _, s := range []string{
		`{"type":"batch","messages":[{"type":"done","delivery":"d1"},{"type":"emit","delivery":"d2","key":"k","payload":{"a":[1,"x"]}}]}`,
		`{"type":"batch","messages":[]}`,
		`{"type":"batch","messages":[{"type":"metric","delivery":"d","name":"n","value":1.5,"labels":{"a":"b"}},{"type":"error","delivery":"d","message":"m\n","retryable":true}]}`,
		`{"type":"batch","messages":[{"type":"item","delivery":"d","id":"t/0/1","payload":"é","partition":3,"offset":9,"timestamp":1,"attempt":2}]}`,
		` { "messages" : [ {"type":"abstain","delivery":"d","reason":"r"} ] , "type" : "batch" , "x" : null } `,
		`{"type":"batch","messages":[{"type":"batch","messages":[]}]}`,
		`{"type":"batch","messages":[1,2]}`, `{"type":"batch"}`, `{"type":"batch","messages":{}}`,
		`{"type":"batch","messages":[{"type":"done","delivery":"a\"]}"}]}`, `{"type":"done","delivery":"d"}`,
		`{"type":"batch","messages":[],"Type":"batch"}`, `{"type":"batch","messages":[{"type":"done","delivery":"d"}`,
	} {
		f.Add([]byte(s), 64)
	}
	f.Fuzz(func(t *testing.T, line []byte, max int) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // a LineReader never returns one
		}
		var msgs [][]byte
		ok, err := stdio.SplitBatch(line, func(msg []byte) error {
			var m stdio.Message
			if err := stdio.DecodeInBatch(msg, &m); err != nil {
				return err
			}
			msgs = append(msgs, bytes.Clone(msg))
			return nil
		})
		// SplitAnswers splits the same way, FastAnswer's shapes going to fast as FastAnswer reads them.
		var fastMsgs [][]byte
		okA, errA := stdio.SplitAnswers(line, func(typ string, delivery, key, payload []byte, hasKey bool, msg []byte) error {
			t2, d2, k2, p2, h2, ok2 := stdio.FastAnswer(msg)
			if !ok2 || t2 != typ || !bytes.Equal(d2, delivery) || !bytes.Equal(k2, key) || !bytes.Equal(p2, payload) || h2 != hasKey {
				t.Fatalf("SplitAnswers passed %q as %s %q %q %q %v; FastAnswer reads %v %s %q %q %q %v", msg, typ, delivery, key, payload, hasKey, ok2, t2, d2, k2, p2, h2)
			}
			fastMsgs = append(fastMsgs, bytes.Clone(msg))
			return nil
		}, func(msg []byte) error {
			if _, _, _, _, _, isFast := stdio.FastAnswer(msg); isFast {
				t.Fatalf("SplitAnswers passed %q, which FastAnswer reads, to fn", msg)
			}
			var m stdio.Message
			if err := stdio.DecodeInBatch(msg, &m); err != nil {
				return err
			}
			fastMsgs = append(fastMsgs, bytes.Clone(msg))
			return nil
		})
		if okA != ok || (errA == nil) != (err == nil) || len(fastMsgs) != len(msgs) {
			t.Fatalf("SplitAnswers(%q) = %v, %v, %d messages; SplitBatch %v, %v, %d", line, okA, errA, len(fastMsgs), ok, err, len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(fastMsgs[i], msgs[i]) {
				t.Fatalf("SplitAnswers(%q) message %d = %q; SplitBatch %q", line, i+1, fastMsgs[i], msgs[i])
			}
		}
		var m stdio.Message
		decodeErr := stdio.DecodeMessage(line, &m)
		if !ok {
			if err != nil || len(msgs) > 0 {
				t.Fatalf("SplitBatch(%q) = false, %v after %d messages; want no error, nothing passed", line, err, len(msgs))
			}
			if decodeErr == nil && m.Type == stdio.TypeBatch && typeKeys(line) == 1 {
				t.Fatalf("SplitBatch(%q) = not an envelope; DecodeMessage reads one", line)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, stdio.ErrProtocol) || !errors.Is(err, stdio.ErrMalformedBatch) {
				t.Fatalf("SplitBatch(%q) = %v; want a malformed batch envelope error", line, err)
			}
			return
		}
		if !utf8.Valid(line) || !stdjson.Valid(line) {
			t.Fatalf("SplitBatch(%q) accepted a line that is not UTF-8 JSON", line)
		}
		if decodeErr != nil || m.Type != stdio.TypeBatch {
			t.Fatalf("SplitBatch(%q) split an envelope that DecodeMessage reads as %q, %v", line, m.Type, decodeErr)
		}
		var generic map[string]stdjson.RawMessage
		if err := stdjson.Unmarshal(line, &generic); err != nil {
			t.Fatalf("SplitBatch(%q) accepted what encoding/json refuses: %v", line, err)
		}
		var elems []stdjson.RawMessage
		for k, v := range generic {
			if strings.EqualFold(k, "messages") {
				if err := stdjson.Unmarshal(v, &elems); err != nil {
					t.Fatalf("SplitBatch(%q): messages is no array for encoding/json: %v", line, err)
				}
			}
		}
		if len(elems) != len(msgs) {
			t.Fatalf("SplitBatch(%q) passed %d messages; encoding/json reads %d", line, len(msgs), len(elems))
		}
		for i := range elems {
			if !bytes.Equal(elems[i], msgs[i]) {
				t.Fatalf("SplitBatch(%q) message %d = %q; encoding/json reads %q", line, i+1, msgs[i], elems[i])
			}
		}
		p := stdio.Packer{Max: max}
		for _, msg := range msgs {
			p.AppendLine(msg)
		}
		out := p.Bytes()
		var back [][]byte
		for _, l := range bytes.SplitAfter(out, []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			l = l[:len(l)-1]
			isBatch, err := stdio.SplitBatch(l, func(msg []byte) error { back = append(back, bytes.Clone(msg)); return nil })
			if err != nil {
				t.Fatalf("SplitBatch(Packer's %q) = %v", l, err)
			}
			if !isBatch {
				back = append(back, bytes.Clone(l))
			} else if max > 0 && len(l) > max {
				t.Fatalf("Packer{Max: %d} wrote an envelope of %d bytes", max, len(l))
			}
		}
		if len(back) != len(msgs) {
			t.Fatalf("Packer then SplitBatch: %d messages; want %d (%q)", len(back), len(msgs), out)
		}
		for i := range back {
			if !bytes.Equal(back[i], msgs[i]) {
				t.Fatalf("Packer then SplitBatch: message %d = %q; want %q", i+1, back[i], msgs[i])
			}
		}
	})
}

// typeKeys counts the top-level keys of a JSON object line that match "type" in any case.
func typeKeys(line []byte) int {
	dec := stdjson.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != stdjson.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if k, _ := tok.(string); strings.EqualFold(k, "type") {
			n++
		}
		var skip stdjson.RawMessage
		if dec.Decode(&skip) != nil {
			return n
		}
	}
	return n
}

// FuzzPacker checks Packer on any run of message sizes and limit: splitting its lines gives
// the messages back in order; every envelope holds two messages or more and fits the limit;
// a message is a line of its own only when it could not join the line before; no envelope
// could have taken the next line's first message.
func FuzzPacker(f *testing.F) {
	f.Add(uint64(1), 400, 12)
	f.Add(uint64(7), 100, 40)
	f.Fuzz(func(t *testing.T, seed uint64, max, count int) {
		if max < 40 || max > 4096 || count < 0 || count > 64 {
			return
		}
		r := rand.New(rand.NewPCG(seed, seed))
		p := stdio.Packer{Max: max}
		var in []string
		for range count {
			in = append(in, msgOf(32+r.IntN(max)))
			p.AppendLine([]byte(in[len(in)-1]))
		}
		out := p.Bytes()
		var got []string
		var lines [][]string // the messages of each line
		for _, l := range bytes.SplitAfter(out, []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			l = l[:len(l)-1]
			var these []string
			isBatch, err := stdio.SplitBatch(l, func(msg []byte) error { these = append(these, string(msg)); return nil })
			if err != nil {
				t.Fatalf("SplitBatch(%q) = %v", l, err)
			}
			if !isBatch {
				these = []string{string(l)}
			} else if len(these) < 2 || len(l) > max {
				t.Fatalf("an envelope of %d messages, %d bytes (limit %d)", len(these), len(l), max)
			}
			lines = append(lines, these)
			got = append(got, these...)
		}
		if strings.Join(got, "\n") != strings.Join(in, "\n") {
			t.Fatalf("messages split back differ from those packed")
		}
		for i := 1; i < len(lines); i++ {
			size := stdio.BatchOverhead // the envelope the line before would be with one more
			for _, m := range lines[i-1] {
				size += len(m) + 1
			}
			if size+len(lines[i][0]) <= max {
				t.Fatalf("line %d's first message (%d bytes) fits in line %d (%d messages; limit %d)", i+1, len(lines[i][0]), i, len(lines[i-1]), max)
			}
		}
	})
}

// BenchmarkReadAnswers measures the engine's read of 64 answers (an emit of a 200-byte
// payload and a done each) as lines, one FastAnswer a line, and as one envelope: SplitBatch
// then FastAnswer a message, and SplitAnswers as the engine reads it.
//
//	go test -run '^$' -bench BenchmarkReadAnswers -benchmem ./stdio/
func BenchmarkReadAnswers(b *testing.B) {
	payload := `{"id":104217,"name":"listing-42","city":"Lyon","price":1234.5,"tags":["a","b"],"pad":"qmVh3kLs9TzR2wXy7pBn4cJd8fGa1eHu6iKo0lMv5NtQxZ3rYsW9bCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}`
	var lines [][]byte
	var p stdio.Packer
	for i := range 64 {
		d := fmt.Sprintf("dl_3fa1c2e4b5d6_%d", i)
		key := "k" + d
		for _, m := range []stdio.Message{{Type: stdio.TypeEmit, Delivery: d, Key: &key, Payload: []byte(payload)}, {Type: stdio.TypeDone, Delivery: d}} {
			line := stdio.AppendMessage(nil, &m)
			lines = append(lines, line[:len(line)-1])
			p.AppendMessage(&m)
		}
	}
	envelope := bytes.TrimSuffix(p.Bytes(), []byte("\n"))
	fast := func(msg []byte) error {
		if _, _, _, _, _, ok := stdio.FastAnswer(msg); !ok {
			return errors.New("not fast")
		}
		return nil
	}
	b.Run("lines", func(b *testing.B) {
		for b.Loop() {
			for _, l := range lines {
				if fast(l) != nil {
					b.Fatal("not fast")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/msg")
	})
	b.Run("envelope", func(b *testing.B) {
		for b.Loop() {
			if ok, err := stdio.SplitBatch(envelope, fast); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/msg")
	})
	b.Run("answers", func(b *testing.B) {
		fastFn := func(string, []byte, []byte, []byte, bool, []byte) error { return nil }
		for b.Loop() {
			if ok, err := stdio.SplitAnswers(envelope, fastFn, fast); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/msg")
	})
}
