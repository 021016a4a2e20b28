package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

const oneOutlet = "t --in in=x.v1 --out out=y.v1"

func TestDiscover(t *testing.T) {
	r := startBridge(t, oneOutlet+" --param min-rooms:integer=2 --description 'a test'")
	s := dial(t, r.addr)
	spec, err := s.disc.Discover(context.Background(), &flowv1.SidecarInfo{ProtocolVersion: "1.0", SidecarVersion: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := r.action.Spec("test"); !proto.Equal(spec, want) {
		t.Errorf("Discover = %v; want %v", spec, want)
	}
	if probs := protocol.Validate(spec); len(probs) > 0 {
		t.Errorf("Validate(Discover()) = %v; want none", probs)
	}
	// ReportError logs every problem and a summary, and the bridge keeps serving. The log is
	// what ReportError is for (a person reads there why the sidecar refused the process), so
	// its text is checked: each problem and the fix.
	_, err = s.disc.ReportError(context.Background(), &flowv1.Problems{Problems: []*flowv1.Problem{
		{Message: "outlets[0].contract.fingerprint: deployed AAA, discovered BBB"},
		{Message: "config_parameters[0].key: deployed min-room, discovered min-rooms"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	logs := r.logs.String()
	for _, want := range []string{"deployed AAA, discovered BBB", "deployed min-room, discovered min-rooms", "make the action config line", `"problems":2`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log after ReportError lacks %q:\n%s", want, logs)
		}
	}
	if _, err := s.disc.Discover(context.Background(), &flowv1.SidecarInfo{}); err != nil {
		t.Errorf("Discover after ReportError = %v; want the bridge still serving", err)
	}
}

// emitted decodes an emit's value.
func emitted(t *testing.T, e *flowv1.Emit) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(e.GetRecord().GetValue(), &v); err != nil {
		t.Fatalf("emit value %q: %v", e.GetRecord().GetValue(), err)
	}
	return v
}

func TestItemAndHello(t *testing.T) {
	r := startBridge(t, oneOutlet+" --param min-rooms:integer=2")
	s := dial(t, r.addr)
	s.start(r, "conv-1", 0)
	s.sendStart(r, "conv-2", 0, `{"min-rooms": 3}`) // a second Start on the same stream replaces the first
	s.batch(1, 7,
		rec(40, []byte("listing-42"), `{"op":"inspect"}`, &flowv1.Header{Key: "trace", Value: []byte("abc")}),
		rec(41, nil, `{"op":"inspect"}`),
		rec(42, []byte(""), `{"op":"inspect"}`),
	)
	a := s.wait(1)
	if !a.ack || len(a.emits) != 3 {
		t.Fatalf("answer = %v; want Ack after 3 emits", a)
	}
	first := emitted(t, a.emits[0])
	item := first["item"].(map[string]any)
	want := map[string]any{
		"type": "item", "id": "in-topic/7/40", "run": "conv-2", "key": "listing-42", "payload": map[string]any{"op": "inspect"},
		"headers": []any{map[string]any{"key": "trace", "value": "abc"}}, "inlet": "in", "topic": "in-topic",
		"partition": 7.0, "offset": 40.0, "timestamp": 1_700_000_000_040.0, "attempt": 1.0,
		"idempotencyKey": actionconf.IdempotencyKey("pipe", "t", "in-topic", 7, 40),
	}
	for k, v := range want {
		if !reflect.DeepEqual(item[k], v) {
			t.Errorf("item[%q] = %#v; want %#v", k, item[k], v)
		}
	}
	if d, _ := item["delivery"].(string); d == "" {
		t.Errorf("item delivery = %q; want one", d)
	}
	hello := first["hello"].(map[string]any)
	if got := hello["config"]; !reflect.DeepEqual(got, map[string]any{"min-rooms": 3.0}) {
		t.Errorf("hello config = %v; want Start.config_json", got)
	}
	wantVars := map[string]any{"pipeline": "pipe", "streamlet": "t", "conversation": "conv-2",
		"inlets": map[string]any{"in": "in-topic"}, "outlets": map[string]any{"out": "out-topic"}}
	if got := hello["vars"]; !reflect.DeepEqual(got, wantVars) {
		t.Errorf("hello vars = %v; want %v", got, wantVars)
	}
	// Keyed, keyless and empty-keyed records map to their items and back.
	if k := a.emits[0].GetRecord().Key; string(k) != "listing-42" {
		t.Errorf("emit 1 key = %q; want listing-42", k)
	}
	if k := a.emits[1].GetRecord().Key; k != nil {
		t.Errorf("emit of a keyless record has key %q; want it unset", k)
	}
	if _, ok := emitted(t, a.emits[1])["item"].(map[string]any)["key"]; ok {
		t.Errorf("item of a keyless record has a key; want none")
	}
	if k := a.emits[2].GetRecord().Key; k == nil || len(k) != 0 {
		t.Errorf("emit of an empty-keyed record has key %v; want an empty key, set", k)
	}
	for _, e := range a.emits {
		if e.GetOutlet() != "out" {
			t.Errorf("emit outlet = %q; want the only outlet, out", e.GetOutlet())
		}
	}
	expectEOF(t, s.stop())
	s.check()
}

func TestRecords(t *testing.T) {
	const twoOutlets = "t --in in=x.v1 --out a=y.v1 --out b=z.v1"
	tests := []struct {
		name  string
		line  string
		max   uint32
		recs  []*flowv1.InputRecord
		check func(t *testing.T, a *answer)
	}{{
		name: "skip",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"skip"}`), rec(1, nil, `{"op":"skip"}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 0 {
				t.Errorf("answer = %v; want Ack with no emit", a)
			}
		},
	}, {
		name: "several emits and outlets in record order",
		line: twoOutlets,
		recs: []*flowv1.InputRecord{rec(0, []byte("k"), `{"op":"emits","n":3,"outlets":["a","b"]}`), rec(1, nil, `{"op":"skip"}`), rec(2, nil, `{"op":"emits","n":2,"outlets":["b"]}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 5 {
				t.Fatalf("answer = %v; want Ack after 5 emits", a)
			}
			var got []string
			for _, e := range a.emits {
				got = append(got, fmt.Sprintf("%s:%v", e.GetOutlet(), emitted(t, e)["i"]))
			}
			if want := []string{"a:0", "b:1", "a:2", "b:0", "b:1"}; !reflect.DeepEqual(got, want) {
				t.Errorf("emits = %v; want %v", got, want)
			}
		},
	}, {
		name: "one process per item",
		line: oneOutlet + " --per-item --concurrency 2",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"emits","n":1}`), rec(1, []byte("k"), `{"op":"emits","n":2}`), rec(2, nil, `{"op":"emits","n":1}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 4 {
				t.Errorf("answer = %v; want Ack after 4 emits", a)
			}
		},
	}, {
		name: "window",
		line: oneOutlet + " --window 4",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"sleep","ms":5}`), rec(1, nil, `1`), rec(2, nil, `2`), rec(3, nil, `{"op":"sleep","ms":1}`), rec(4, nil, `4`), rec(5, nil, `5`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 6 || string(a.emits[4].GetRecord().GetValue()) != "4" {
				t.Errorf("answer = %v; want Ack after 6 emits in record order", a)
			}
		},
	}, {
		name: "no outlet named among several",
		line: twoOutlets,
		recs: []*flowv1.InputRecord{rec(5, nil, `{"op":"emits","n":1}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), `record in-topic/0/5 failed for good after 1 attempt(s): stdio: protocol violation: emit 1 names no outlet, and the action has 2 outlets besides its --dead-letter and --fallback ports (a, b)`) || len(a.emits) != 0 {
				t.Errorf("answer = %v; want Fail naming the record and the missing outlet", a)
			}
		},
	}, {
		name: "no outlet named: the one that is neither dead-letter nor fallback",
		line: "t --in in=x.v1 --out dlq=d.v1 --out out=y.v1 --out fb=f.v1 --dead-letter dlq --fallback fb",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"emits","n":2}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 2 || a.emits[0].GetOutlet() != "out" || a.emits[1].GetOutlet() != "out" {
				t.Errorf("answer = %v; want Ack after 2 emits to out", a)
			}
		},
	}, {
		name: "undeclared outlet",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"skip"}`), rec(1, nil, `{"op":"to","outlets":["nope"]}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), `record in-topic/0/1 failed for good after 1 attempt(s): stdio: protocol violation: emit 1 names outlet "nope", which the action config does not declare`) {
				t.Errorf("answer = %v; want Fail naming the undeclared outlet", a)
			}
		},
	}, {
		name: "fail",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(9, []byte("k"), `{"op":"fail"}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "record in-topic/0/9 failed for good after 1 attempt(s)") ||
				!strings.Contains(a.fail.GetError().GetMessage(), "cannot score this listing") {
				t.Errorf("answer = %v; want Fail naming the record and the action's message", a)
			}
		},
	}, {
		name: "retry then success",
		line: oneOutlet + " --retries 3",
		recs: []*flowv1.InputRecord{rec(3, nil, `{"op":"flaky","n":2}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 {
				t.Fatalf("answer = %v; want Ack after 1 emit", a)
			}
			v := emitted(t, a.emits[0])
			if v["attempt"] != 3.0 || v["idempotencyKey"] != actionconf.IdempotencyKey("pipe", "t", "in-topic", 0, 3) {
				t.Errorf("emit = %v; want attempt 3 with the record's idempotencyKey", v)
			}
		},
	}, {
		name: "retries exhausted",
		line: oneOutlet + " --retries 1",
		recs: []*flowv1.InputRecord{rec(3, nil, `{"op":"flaky","n":5}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "after 2 attempt(s)") || !strings.Contains(a.fail.GetError().GetMessage(), "flaky attempt 2") {
				t.Errorf("answer = %v; want Fail after 2 attempts", a)
			}
		},
	}, {
		name: "dead letter",
		line: "t --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl --retries 0",
		recs: []*flowv1.InputRecord{
			rec(0, nil, `{"op":"emits","n":1,"outlets":["out"]}`),
			rec(1, []byte("k1"), `{"op":"fail"}`, &flowv1.Header{Key: "h", Value: []byte("v")}),
			rec(2, nil, `{"op":"emits","n":1,"outlets":["out"]}`),
		},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 3 {
				t.Fatalf("answer = %v; want Ack after 3 emits", a)
			}
			dl := a.emits[1]
			if dl.GetOutlet() != "dl" || string(dl.GetRecord().GetKey()) != "k1" || string(dl.GetRecord().GetValue()) != `{"op":"fail"}` {
				t.Fatalf("emit 2 = %v; want the failed record unchanged on dl", dl)
			}
			h := map[string]string{}
			var order []string
			for _, x := range dl.GetRecord().GetHeaders() {
				h[x.GetKey()] = string(x.GetValue())
				order = append(order, x.GetKey())
			}
			if order[0] != "h" || h["h"] != "v" || !strings.Contains(h[bridge.HeaderError], "cannot score this listing") || h[bridge.HeaderAttempts] != "1" ||
				h[bridge.HeaderSourceTopic] != "in-topic" || h[bridge.HeaderSourcePartition] != "0" || h[bridge.HeaderSourceOffset] != "1" {
				t.Errorf("dead letter headers = %v (order %v); want the original first, then error, attempts and source", h, order)
			}
		},
	}, {
		name: "abstain with fallback",
		line: "t --in in=x.v1 --out out=y.v1 --out unsure=x.v1 --fallback unsure",
		recs: []*flowv1.InputRecord{rec(4, nil, `{"op":"abstain"}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 || a.emits[0].GetOutlet() != "unsure" || string(a.emits[0].GetRecord().GetValue()) != `{"op":"abstain"}` {
				t.Fatalf("answer = %v; want Ack after the record routed to unsure", a)
			}
			hs := a.emits[0].GetRecord().GetHeaders()
			if hs[0].GetKey() != bridge.HeaderAbstainReason || string(hs[0].GetValue()) != "no surface area" {
				t.Errorf("fallback headers = %v; want the abstain reason", hs)
			}
		},
	}, {
		name: "abstain without fallback",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(4, nil, `{"op":"abstain"}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), `the action abstained ("no surface area") and the action config names no --fallback outlet`) {
				t.Errorf("answer = %v; want Fail naming the abstain", a)
			}
		},
	}, {
		name: "crash mid-batch",
		line: oneOutlet + " --retries 2",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"emits","n":1}`), rec(1, nil, `{"op":"crash","n":1}`), rec(2, nil, `{"op":"emits","n":1}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 3 || emitted(t, a.emits[1])["attempt"] != 2.0 {
				t.Errorf("answer = %v; want Ack after 3 emits, the crashed record on attempt 2", a)
			}
		},
	}, {
		name: "crash for good",
		line: oneOutlet + " --retries 1",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"crash","n":9}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "after 2 attempt(s)") || !strings.Contains(a.fail.GetError().GetMessage(), "crash") {
				t.Errorf("answer = %v; want Fail naming the crash", a)
			}
		},
	}, {
		name: "timeout then success",
		line: oneOutlet + " --timeout 300ms --retries 1",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"hang","n":1}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 || emitted(t, a.emits[0])["attempt"] != 2.0 {
				t.Errorf("answer = %v; want Ack after the second attempt", a)
			}
		},
	}, {
		name: "timeout for good",
		line: oneOutlet + " --timeout 200ms --retries 0",
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"hang","n":1}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "timed out") {
				t.Errorf("answer = %v; want Fail naming the timeout", a)
			}
		},
	}, {
		name: "oversized emit",
		line: oneOutlet,
		max:  1000,
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"big","n":2000}`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), `emit 1 to outlet "out" (topic out-topic) is`) || !strings.Contains(a.fail.GetError().GetMessage(), "over the 1000 bytes of max_message_bytes") {
				t.Errorf("answer = %v; want Fail naming the outlet, its topic and the limit", a)
			}
		},
	}, {
		name: "oversized emit dead-lettered",
		line: "t --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl",
		max:  1000,
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"big","n":2000}`)},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 || a.emits[0].GetOutlet() != "dl" {
				t.Errorf("answer = %v; want Ack after the record routed to dl", a)
			}
		},
	}, {
		name: "not JSON",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(0, nil, `{"op":"skip"}`), rec(1, nil, `not json`)},
		check: func(t *testing.T, a *answer) {
			if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "record in-topic/0/1 failed for good after 0 attempt(s): the value cannot be handed to the action: engine: bad item: item in-topic/0/1: the payload is not valid JSON") {
				t.Errorf("answer = %v; want Fail naming the record as not JSON", a)
			}
		},
	}, {
		name: "not JSON dead-lettered",
		line: "t --in in=x.v1 --out out=y.v1 --out dl=x.v1 --dead-letter dl",
		recs: []*flowv1.InputRecord{rec(1, nil, "\xff")},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 || string(a.emits[0].GetRecord().GetValue()) != "\xff" {
				t.Errorf("answer = %v; want Ack after the record routed to dl unchanged", a)
			}
		},
	}, {
		name: "empty value is null, pretty JSON passes",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(0, nil, ``), rec(1, nil, "{\n  \"a\": [1,\n 2]\n}\n")},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 2 {
				t.Fatalf("answer = %v; want Ack after 2 echoes", a)
			}
			if v := string(a.emits[0].GetRecord().GetValue()); v != "null" {
				t.Errorf("echo of an empty value = %q; want null", v)
			}
			var v any
			if err := json.Unmarshal(a.emits[1].GetRecord().GetValue(), &v); err != nil || !reflect.DeepEqual(v, map[string]any{"a": []any{1.0, 2.0}}) {
				t.Errorf("echo of pretty JSON = %q; want the same JSON", a.emits[1].GetRecord().GetValue())
			}
		},
	}, {
		name: "binary key and header values",
		line: oneOutlet,
		recs: []*flowv1.InputRecord{rec(0, []byte("\xff\x00k"), `{"op":"inspect"}`, &flowv1.Header{Key: "bin", Value: []byte{0xc3, 0x28}}, &flowv1.Header{Key: "txt", Value: []byte("é")})},
		check: func(t *testing.T, a *answer) {
			if !a.ack || len(a.emits) != 1 {
				t.Fatalf("answer = %v; want Ack after 1 emit", a)
			}
			if k := a.emits[0].GetRecord().GetKey(); !bytes.Equal(k, []byte("\xff\x00k")) {
				t.Errorf("emit key = %q; want the binary key back", k)
			}
			item := emitted(t, a.emits[0])["item"].(map[string]any)
			if item["keyBase64"] != "/wBr" || item["key"] != nil {
				t.Errorf("item key = %v, keyBase64 = %v; want keyBase64 /wBr only", item["key"], item["keyBase64"])
			}
			want := []any{map[string]any{"key": "bin", "valueBase64": "wyg="}, map[string]any{"key": "txt", "value": "é"}}
			if !reflect.DeepEqual(item["headers"], want) {
				t.Errorf("item headers = %v; want %v", item["headers"], want)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startBridge(t, tt.line)
			s := dial(t, r.addr)
			s.start(r, "c", tt.max)
			s.batch(1, 0, tt.recs...)
			tt.check(t, s.wait(1))
			expectEOF(t, s.stop())
			s.check()
		})
	}
}

// TestPartitionsAndKeyOrder sends batches of several partitions at once to four processes:
// records with the same key are handled one after another in offset order, every batch is
// answered with its emits in record order.
func TestPartitionsAndKeyOrder(t *testing.T) {
	order := filepath.Join(t.TempDir(), "order")
	r := startBridge(t, oneOutlet+" --concurrency 4", func(o *bridge.Options) {
		o.Env = append(o.Env, "BRIDGE_TEST_ORDER="+order)
	})
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	const partitions, perBatch, rounds = 4, 6, 2
	id := uint64(0)
	for round := range rounds {
		first := id + 1
		for p := range partitions {
			var recs []*flowv1.InputRecord
			for i := range perBatch {
				key := fmt.Sprintf("k%d", (p+i)%3) // keys shared across partitions
				offset := int64(round*perBatch + i)
				var k []byte
				if i%4 != 3 {
					k = []byte(key)
				} else {
					key = fmt.Sprintf("none-%d-%d", p, offset) // keyless
				}
				recs = append(recs, rec(offset, k, fmt.Sprintf(`{"op":"order","key":"%s@%d","seq":%d,"ms":3}`, key, p, offset)))
			}
			id++
			s.batch(id, int32(p), recs...)
		}
		for b := first; b <= id; b++ {
			a := s.wait(b)
			if !a.ack || len(a.emits) != perBatch {
				t.Fatalf("batch %d: answer = %v; want Ack after %d emits", b, a, perBatch)
			}
		}
	}
	expectEOF(t, s.stop())
	s.check()
	data, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	// Per key: never two records at once, whatever their partition; per key and partition:
	// in offset order.
	running := map[string]string{}
	last := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var keyAt, ev string
		var offset int
		if _, err := fmt.Sscanf(line, "%s %d %s", &keyAt, &offset, &ev); err != nil {
			t.Fatalf("order line %q: %v", line, err)
		}
		if strings.HasPrefix(keyAt, "none-") {
			continue
		}
		key, _, _ := strings.Cut(keyAt, "@")
		switch ev {
		case "start":
			if running[key] != "" {
				t.Errorf("key %s: record %s/%d started while %s ran", key, keyAt, offset, running[key])
			}
			if n, ok := last[keyAt]; ok && offset <= n {
				t.Errorf("key %s: offset %d started after offset %d", keyAt, offset, n)
			}
			running[key], last[keyAt] = fmt.Sprintf("%s/%d", keyAt, offset), offset
		case "end":
			running[key] = ""
		}
	}
}

// TestStopWithBatchesInFlight: Stop lets the batches in flight finish and be answered, then
// the stream completes.
