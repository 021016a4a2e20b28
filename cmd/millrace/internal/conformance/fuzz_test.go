package conformance

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// FuzzReadStdout feeds any bytes to the stdout reader: it never panics or hangs, every message
// it delivers is a protocol message of a known type, and clean protocol lines come out as
// messages with no framing note.
func FuzzReadStdout(f *testing.F) {
	for _, s := range []string{
		"{\"type\":\"ready\"}\n",
		"{\n  \"type\": \"done\",\n  \"delivery\": \"d\"\n}\n",
		"{\"type\":\"emit\",\"delivery\":\"d\",\"payload\":1}{\"type\":\"done\",\"delivery\":\"d\"}\n",
		"log line\n{\"type\":\"done\"\n",
		"{'type': 'done'}\n\n[1,2]\n",
		"{\"type\":\"done\",\"delivery\":\"d\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &proc{child: &engine.Child{}, events: make(chan event, 16)}
		go p.readStdout(bytes.NewReader(data))
		for ev := range p.events {
			if ev.kind != evMessage {
				continue
			}
			line := stdio.AppendMessage(nil, &ev.msg)
			var back stdio.Message
			if err := stdio.DecodeMessage(bytes.TrimRight(line, "\n"), &back); err != nil {
				t.Fatalf("a delivered message does not round-trip: %v (%s)", err, line)
			}
		}
	})
}

// FuzzCompareAnswer: any golden line against an answer never panics, and a golden line written
// from an answer always matches it.
func FuzzCompareAnswer(f *testing.F) {
	f.Add([]byte(`{"outcome":"done","emits":[{"payload":{"a":1}}]}`), []byte(`{"a":1.0}`))
	f.Add([]byte(`{"outcome":"error","retryable":false}`), []byte(`[]`))
	f.Add([]byte(`{"emits":[1,{"x":2}],"outcome":"done"}`), []byte(`"s"`))
	f.Fuzz(func(t *testing.T, golden, payload []byte) {
		a := &Action{Action: actionconf.Action{Outlets: []actionconf.Port{{Name: "out"}}}}
		if !json.Valid(payload) {
			payload = []byte("null")
		}
		key := "k"
		got := &answer{Outcome: "done", Emits: []emitOut{{Outlet: "out", Key: &key, Payload: payload}}}
		_ = compareAnswer(a, golden, got)
		line, err := marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if p := compareAnswer(a, line, got); len(p) != 0 {
			t.Fatalf("compareAnswer(its own golden line %s) = %q; want no difference", line, p)
		}
	})
}
