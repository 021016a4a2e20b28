package stdio_test

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
)

// TestStateOnTheWire checks each place a state appears: the item's, a ready's declaration, a
// hello's inlets and the state message, on a line of its own and in an envelope.
func TestStateOnTheWire(t *testing.T) {
	key := "u-7"
	it := stdio.Item{Delivery: "dl_1", ID: "events/0/41", Key: &key, Payload: []byte(`{}`), State: []byte(`{"n":4}`)}
	line := stdio.AppendItem(nil, &it)
	var m stdio.Message
	if err := stdio.DecodeMessage(bytes.TrimSuffix(line, []byte("\n")), &m); err != nil || string(m.State) != `{"n":4}` {
		t.Fatalf("item %s decodes to state %q, %v; want {\"n\":4}", line, m.State, err)
	}
	it.State = nil
	if line := stdio.AppendItem(nil, &it); bytes.Contains(line, []byte(`"state"`)) {
		t.Fatalf("an item without state is written %s; want no \"state\" member", line)
	}

	for _, tc := range []struct {
		line     string
		declares bool
	}{
		{`{"type":"ready","state":true}`, true},
		{`{"type":"ready","window":8,"batch":true,"state":true}`, true},
		{`{"type":"ready","state":false}`, false},
		{`{"type":"ready"}`, false},
	} {
		if err := stdio.DecodeMessage([]byte(tc.line), &m); err != nil || m.DeclaresState() != tc.declares {
			t.Errorf("%s: DeclaresState() = %v, %v; want %v", tc.line, m.DeclaresState(), err, tc.declares)
		}
	}

	hello := stdio.AppendMessage(nil, &stdio.Message{Type: stdio.TypeHello, Protocol: 1, Action: "count", State: []byte(`{"events":{"ttl":"720h0m0s","maxBytes":65536}}`)})
	if err := stdio.DecodeMessage(bytes.TrimSuffix(hello, []byte("\n")), &m); err != nil {
		t.Fatal(err)
	}
	inlets, err := m.HelloState()
	if err != nil || inlets["events"] != (stdio.StateInlet{TTL: "720h0m0s", MaxBytes: 65536}) || len(inlets) != 1 {
		t.Fatalf("hello %s: HelloState() = %v, %v", hello, inlets, err)
	}
	m = stdio.Message{State: []byte(`[1]`)}
	if _, err := m.HelloState(); err == nil {
		t.Fatal("HelloState of an array: no error")
	}

	// The state message: a value, null (delete) and no member at all are three things.
	for _, tc := range []struct {
		line, want string
		isNil      bool
	}{
		{`{"type":"state","delivery":"d","state":{"n":5}}`, `{"n":5}`, false},
		{`{"type":"state","delivery":"d","state":null}`, `null`, false},
		{`{"type":"state", "delivery":"d", "state": null }`, `null`, false},
		{`{"type":"state","delivery":"d","state":"é\n"}`, `"é\n"`, false},
		{`{"type":"state","delivery":"d"}`, ``, true},
	} {
		if err := stdio.DecodeMessage([]byte(tc.line), &m); err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if m.Type != stdio.TypeState || string(m.State) != tc.want || (m.State == nil) != tc.isNil {
			t.Errorf("%s decodes to %s state %q (nil %v); want state %q (nil %v)", tc.line, m.Type, m.State, m.State == nil, tc.want, tc.isNil)
		}
		out := stdio.AppendMessage(nil, &m)
		var m2 stdio.Message
		if err := stdio.DecodeMessage(bytes.TrimSuffix(out, []byte("\n")), &m2); err != nil || !bytes.Equal(m2.State, m.State) || (m2.State == nil) != (m.State == nil) {
			t.Errorf("%s round trips as %s: state %q, %v", tc.line, out, m2.State, err)
		}
	}

	// In an envelope, the state message is split like the others and read by the fast path.
	var p stdio.Packer
	p.AppendMessage(&stdio.Message{Type: stdio.TypeState, Delivery: "d1", State: []byte(`{"n":5}`)})
	p.AppendMessage(&stdio.Message{Type: stdio.TypeState, Delivery: "d2", State: []byte(`null`)})
	p.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: "d1"})
	env := bytes.TrimSuffix(p.Bytes(), []byte("\n"))
	var got []string
	ok, err := stdio.SplitAnswers(env, func(typ string, delivery, _, payload []byte, _ bool, _ []byte) error {
		got = append(got, typ+" "+string(delivery)+" "+string(payload))
		return nil
	}, func(msg []byte) error { return errors.New("not fast: " + string(msg)) })
	if want := []string{`state d1 {"n":5}`, `state d2 null`, `done d1 `}; !ok || err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("SplitAnswers(%s) = %v, %v, %q; want %q", env, ok, err, got, want)
	}
}

func TestFastAnswerState(t *testing.T) {
	for _, tc := range []struct {
		line, state string
		ok          bool
	}{
		{`{"type":"state","delivery":"dl_1","state":{"n":5}}`, `{"n":5}`, true},
		{`{"type":"state","delivery":"dl_1","state":null}`, `null`, true},
		{`{"type":"state","delivery":"dl_1","state": 7 }`, `7`, true},
		{`{"type":"state","delivery":"dl_1","state":}`, ``, false},
		{`{"type":"state","delivery":"dl_1"}`, ``, false},
		{`{"type":"state","delivery":"dl_1","state":1,"x":2}`, ``, false},
		{`{"type":"state","delivery":"d\u0031","state":1}`, ``, false},
		{`{"type":"state","delivery":"dl_1","payload":1}`, ``, false},
	} {
		typ, delivery, _, state, _, ok := stdio.FastAnswer([]byte(tc.line))
		if ok != tc.ok || ok && (typ != stdio.TypeState || string(delivery) != "dl_1" || string(state) != tc.state) {
			t.Errorf("FastAnswer(%s) = %s %q %q %v; want state %q %v", tc.line, typ, delivery, state, ok, tc.state, tc.ok)
		}
	}
}

// FuzzStateMessage checks the "state" member of any accepted line: DecodeMessage keeps
// exactly what encoding/json reads there, null as null, and leaves it nil only when the line
// has no such member; AppendMessage writes it back so that a second decode says the same.
func FuzzStateMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"state","delivery":"d","state":{"n":5}}`,
		`{"type":"state","delivery":"d","state":null}`,
		`{"type":"state","delivery":"d"}`,
		`{"type":"state","delivery":"d","state":[1,{"a":null}]}`,
		`{"type":"state","delivery":"d","state":"x","state":null}`,
		`{"type":"item","delivery":"d","id":"i","key":"k","payload":1,"state":{"n":1}}`,
		`{"type":"ready","state":true}`,
		`{"type":"hello","protocol":1,"action":"a","state":{"events":{"maxBytes":65536}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		var m stdio.Message
		if stdio.DecodeMessage(line, &m) != nil {
			return
		}
		if raw, ok := rawField(line, "state"); ok && !bytes.Equal(bytes.TrimSpace(raw), m.State) {
			t.Fatalf("DecodeMessage(%q) state %q; encoding/json reads %s", line, m.State, raw)
		}
		var obj map[string]stdjson.RawMessage
		if stdjson.Unmarshal(line, &obj) == nil && m.State != nil {
			found := false
			for k := range obj {
				found = found || strings.EqualFold(k, "state")
			}
			if !found {
				t.Fatalf("DecodeMessage(%q) state %q from a line without one", line, m.State)
			}
		}
		if m.Type != stdio.TypeState {
			return
		}
		out := stdio.AppendMessage(nil, &m)
		var m2 stdio.Message
		if err := stdio.DecodeMessage(out[:len(out)-1], &m2); err != nil {
			t.Fatalf("DecodeMessage(AppendMessage(%q)) = %v (encoded %q)", line, err, out)
		}
		if !bytes.Equal(m.State, bytes.TrimSpace(m2.State)) || (m.State == nil) != (m2.State == nil) {
			t.Fatalf("state of %q: %q, then %q after a round trip (encoded %q)", line, m.State, m2.State, out)
		}
	})
}
