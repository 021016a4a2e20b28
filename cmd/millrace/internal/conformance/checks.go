package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ankka-flow/millrace/stdio"
)

const (
	unknownHelloKeys = `,"lessons":[{"text":"keep answers short"}],"x-conformance-future":{"nested":[1,"two",{"three":null}],"flag":true}`
	unknownItemKeys  = `,"artifacts":[],"x-conformance-future":{"nested":[1,"two",{"three":null}],"n":1.5e3}`
)

// unknownKeys: the same inputs, with keys the action cannot know in hello and every item; the
// answers must be the same as without them.
func (r *runner) unknownKeys() {
	t0 := time.Now()
	s := r.open(checkUnknownKeys, r.a.Config, unknownHelloKeys)
	if !r.awaitMain(checkUnknownKeys, s, true) {
		return
	}
	n := 0
	for _, i := range r.answeredInputs() {
		d := s.deliver(i, r.inputs[i].Item, checkUnknownKeys)
		if d == nil || d.answer == nil {
			break
		}
		n++
		if got, want := d.outcome(), r.main[i]; got != want {
			r.fail(checkUnknownKeys, fmt.Sprintf("%s was answered %s with unknown keys in hello and the item, but %s without them%s: ignore keys you do not know", r.inputs[i].Source, got, want, answerText(d.answer)))
		}
	}
	s.finish()
	r.passed(checkUnknownKeys, fmt.Sprintf("hello and %s with unknown keys answered as without them", plural(n, "item", "items")), time.Since(t0))
}

func answerText(m *stdio.Message) string {
	switch {
	case m.Message != "":
		return fmt.Sprintf(" (%q)", m.Message)
	case m.Error != "":
		return fmt.Sprintf(" (%q)", m.Error)
	case m.Reason != "":
		return fmt.Sprintf(" (%q)", m.Reason)
	}
	return ""
}

// badConfig: the same inputs under a config whose every value has the wrong type.
func (r *runner) badConfig() {
	t0 := time.Now()
	cfg := malform(r.a.Config)
	if cfg == nil {
		r.passed(checkConfig, "the action declares no parameter: nothing to malform", 0)
		return
	}
	s := r.open(checkConfig, cfg, "")
	if !r.awaitMain(checkConfig, s, true) {
		return
	}
	got := map[string]int{}
	for _, i := range r.answeredInputs() {
		d := s.deliver(i, r.inputs[i].Item, checkConfig)
		if d == nil || d.answer == nil {
			break
		}
		got[d.outcome()]++
	}
	s.finish()
	r.passed(checkConfig, fmt.Sprintf("config %s answered item by item (%s)", shorten(string(cfg), 80), counts(got)), time.Since(t0))
}

// malform returns cfg with every value replaced by one of another JSON type, or nil when cfg
// is not an object with at least one key.
func malform(cfg json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(cfg, &m) != nil || len(m) == 0 {
		return nil
	}
	for k, v := range m {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) == 0:
		case v[0] == '"':
			m[k] = json.RawMessage(`12345`)
		case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
			m[k] = json.RawMessage(`"not-a-number"`)
		case v[0] == 't' || v[0] == 'f':
			m[k] = json.RawMessage(`"not-a-boolean"`)
		default:
			m[k] = json.RawMessage(`"malformed"`)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// exemplar is the input the made-up items of the later checks are built on: the first the
// main conversation answered done, else the first answered, else the first.
func (r *runner) exemplar() stdio.Item {
	idx := r.answeredInputs()
	for _, i := range idx {
		if r.main[i] == stdio.TypeDone {
			return r.inputs[i].Item
		}
	}
	if len(idx) > 0 {
		return r.inputs[idx[0]].Item
	}
	return r.inputs[0].Item
}

const marker = "conformance-"

// withField returns payload with a field added when it is an object; a string payload is
// replaced by value when it is a string; anything else becomes an object with the field.
func withField(payload json.RawMessage, name string, value string) json.RawMessage {
	v, _ := json.Marshal(value)
	p := bytes.TrimSpace(payload)
	switch {
	case len(p) > 0 && p[0] == '{':
		inner := bytes.TrimSpace(p[1:])
		out := append([]byte(`{"`+name+`":`), v...)
		if len(inner) > 0 && inner[0] != '}' {
			out = append(out, ',')
		}
		return append(out, inner...)
	case len(p) > 0 && p[0] == '"':
		return v
	default:
		return append(append([]byte(`{"`+name+`":`), v...), '}')
	}
}

// nonASCII: two items whose key, a header and a payload field carry non-ASCII text, the first
// from every script, the second only from Latin-1 (a program that never encodes its text may
// write that as one byte a character, and the first hides it: mixed with wider characters,
// Perl, for one, writes the whole line as UTF-8); whatever of it comes back in the outputs must
// come back unchanged.
func (r *runner) nonASCII() {
	t0 := time.Now()
	s := r.open(checkNonASCII, r.a.Config, "")
	if !r.awaitMain(checkNonASCII, s, false) {
		return
	}
	// a long run of multi-byte text crosses the buffer boundaries of the usual line readers
	wide := []string{marker + "clé-ключ-键-🔑", marker + "naïve café — ελληνικά, עברית, 日本語 🙂",
		marker + "ünïcödé ✓ e\u0301 \u2028 tab\t \"quoted\" back\\slash " + strings.Repeat("日本語 ελληνικά 🙂 ", 800)}
	latin := []string{marker + "clé-ß", marker + "naïve façade ¿", marker + "Ünïcödé ñ ø å æ " + strings.Repeat("déjà vu ", 200)}
	outcomes, echoed := map[string]int{}, 0
	for i, text := range [][]string{wide, latin} {
		it := r.exemplar()
		it.Offset += int64(i)
		it.Key, it.KeyBase64 = &text[0], ""
		it.Headers = append(slices.Clone(it.Headers), stdio.Header{Key: "x-conformance-note", Value: &text[1]})
		it.Payload = withField(it.Payload, "x-conformance-text", text[2])
		d := s.deliver(-1, it, checkNonASCII)
		if d == nil || d.answer == nil {
			s.finish()
			return
		}
		outcomes[d.outcome()]++
		echoed += roundTrip(r, d, checkNonASCII, text)
	}
	s.finish()
	if echoed == 0 {
		r.passed(checkNonASCII, fmt.Sprintf("answered %s; none of the text came back in its outputs, so only the answers were checked", counts(outcomes)), time.Since(t0))
		return
	}
	r.passed(checkNonASCII, fmt.Sprintf("answered %s; %d of the non-ASCII strings sent came back unchanged", counts(outcomes), echoed), time.Since(t0))
}

// roundTrip compares every string of d's outputs that starts with the marker with the strings
// sent, charging check with any that changed; it returns how many came back unchanged. A
// string that holds a sent one whole, or is part of one, is unchanged: the action may add to
// the text or cut it, but not alter its characters.
func roundTrip(r *runner, d *delivery, check string, sent []string) int {
	echoed := 0
	visit := func(where, s string) {
		if !strings.HasPrefix(s, marker) {
			return
		}
		for _, t := range sent {
			// the action may add to the text or take part of it, but not change it
			if strings.Contains(s, t) || strings.Contains(t, s) {
				echoed++
				return
			}
		}
		want := ""
		for _, t := range sent {
			if len(t) > len(want) && commonPrefix(s, t) > commonPrefix(s, want) {
				want = t
			}
		}
		r.fail(check, fmt.Sprintf("text sent as %s came back changed in %s: %s (%d bytes) instead of %s (%d bytes); read stdin and write stdout as UTF-8", shortQ(want), where, shortQ(s), len(s), shortQ(want), len(want)))
	}
	for i, e := range d.emits {
		if e.Key != nil {
			visit(fmt.Sprintf("emits[%d].key", i), *e.Key)
		}
		for j, h := range e.Headers {
			if h.Value != nil {
				visit(fmt.Sprintf("emits[%d].headers[%d]", i, j), *h.Value)
			}
		}
		var v any
		if json.Unmarshal(e.Payload, &v) == nil {
			walkStrings(v, fmt.Sprintf("emits[%d].payload", i), visit)
		}
	}
	return echoed
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func shortQ(s string) string {
	if len(s) > 60 {
		cut := 60
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

func walkStrings(v any, path string, visit func(where, s string)) {
	switch t := v.(type) {
	case string:
		visit(path, t)
	case []any:
		for i, x := range t {
			walkStrings(x, fmt.Sprintf("%s[%d]", path, i), visit)
		}
	case map[string]any:
		for k, x := range t {
			walkStrings(x, path+"."+k, visit)
		}
	}
}
