package bridge_test

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
)

const (
	inTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	inSpan   = "00f067aa0ba902b7"
	inParent = "00-" + inTrace + "-" + inSpan + "-01"
	ownTP    = "00-11111111111111111111111111111111-2222222222222222-01"
)

func header(k, v string) *flowv1.Header { return &flowv1.Header{Key: k, Value: []byte(v)} }

// headersOf returns rec's headers by key (the last of each) and their keys in order.
func headersOf(rec *flowv1.Record) (map[string]string, []string) {
	h := map[string]string{}
	var order []string
	for _, x := range rec.GetHeaders() {
		h[x.GetKey()] = string(x.GetValue())
		order = append(order, x.GetKey())
	}
	return h, order
}

// seenItem is the item line the fake action's "trace" op emitted.
func seenItem(t *testing.T, e *flowv1.Emit) map[string]any {
	t.Helper()
	var v struct {
		Item map[string]any `json:"item"`
	}
	if err := json.Unmarshal(e.GetRecord().GetValue(), &v); err != nil || v.Item == nil {
		t.Fatalf("emit %q is not the item line: %v", e.GetRecord().GetValue(), err)
	}
	return v.Item
}

// parseTP splits a traceparent the test expects to be valid.
func parseTP(t *testing.T, what, v string) (trace, span string, flags byte) {
	t.Helper()
	tr, sp, fl, ok := stdio.ParseTraceparent([]byte(v))
	if !ok {
		t.Fatalf("%s traceparent %q is not valid", what, v)
	}
	return hex.EncodeToString(tr[:]), hex.EncodeToString(sp[:]), fl
}

// TestTraceContext runs records with and without trace context through a real bridge and
// action: each attempt is a span, a child of the record's traceparent (or a new root); the item
// carries it; the outputs are its children and keep the tracestate, unless the action set its
// own traceparent; dead letters and fallbacks keep the input's headers as they came.
func TestTraceContext(t *testing.T) {
	r := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dl=x.v1 --out unsure=x.v1 --dead-letter dl --fallback unsure --retries 1")
	s := dial(t, r.addr)
	s.start(r, "conv-1", 0)
	s.batch(1, 0,
		rec(0, nil, `{"op":"trace","n":1,"outlets":["out"]}`, header("traceparent", inParent), header("tracestate", "congo=t61rcWkgMzE")),
		rec(1, nil, `{"op":"trace","outlets":["out"]}`),
		rec(2, nil, `{"op":"trace","outlets":["out"],"own":"`+ownTP+`"}`, header("Traceparent", inParent)),
		rec(3, nil, `{"op":"trace","outlets":["out"]}`, header("traceparent", "00-zz-bad"), header("tracestate", "dropped=1")),
		rec(4, nil, `{"op":"fail"}`, header("traceparent", inParent), header("tracestate", "a=1")),
		rec(5, nil, `{"op":"abstain"}`),
	)
	a := s.wait(1)
	s.check()
	if !a.ack || len(a.emits) != 7 {
		t.Fatalf("answer = %v; want Ack after 7 emits", a)
	}

	t.Run("child of the record's traceparent, retried", func(t *testing.T) {
		item := seenItem(t, a.emits[0])
		trace, span, flags := parseTP(t, "item", item["traceparent"].(string))
		if trace != inTrace || span == inSpan || flags != 1 || item["attempt"] != 2.0 || item["tracestate"] != "congo=t61rcWkgMzE" {
			t.Errorf("item traceparent %v, tracestate %v, attempt %v; want trace %s, a span of its own, sampled, the tracestate, attempt 2", item["traceparent"], item["tracestate"], item["attempt"], inTrace)
		}
		h, _ := headersOf(a.emits[0].GetRecord())
		if h["traceparent"] != item["traceparent"] || h["tracestate"] != "congo=t61rcWkgMzE" {
			t.Errorf("emit headers %v; want traceparent %v (the attempt's span as parent) and the tracestate", h, item["traceparent"])
		}
	})
	t.Run("new root", func(t *testing.T) {
		item := seenItem(t, a.emits[1])
		trace, _, flags := parseTP(t, "item", item["traceparent"].(string))
		if trace == inTrace || flags != 0 || item["tracestate"] != nil {
			t.Errorf("item of a record without trace context: traceparent %v, tracestate %v; want a new trace, not sampled (no export), no tracestate", item["traceparent"], item["tracestate"])
		}
		h, order := headersOf(a.emits[1].GetRecord())
		if h["traceparent"] != item["traceparent"] || len(order) != 1 {
			t.Errorf("emit headers %v; want only traceparent %v", order, item["traceparent"])
		}
	})
	t.Run("the action's own traceparent wins", func(t *testing.T) {
		item := seenItem(t, a.emits[2])
		if trace, _, _ := parseTP(t, "item", item["traceparent"].(string)); trace != inTrace {
			t.Errorf("item traceparent %v; want trace %s (the header read in any case)", item["traceparent"], inTrace)
		}
		h, order := headersOf(a.emits[3].GetRecord())
		if h["traceparent"] != ownTP || len(order) != 1 {
			t.Errorf("emit with the action's traceparent has headers %v (%v); want its own %s alone", h, order, ownTP)
		}
	})
	t.Run("invalid traceparent: new root, tracestate ignored", func(t *testing.T) {
		item := seenItem(t, a.emits[4])
		if trace, _, _ := parseTP(t, "item", item["traceparent"].(string)); trace == inTrace || item["tracestate"] != nil {
			t.Errorf("item traceparent %v, tracestate %v; want a new trace and no tracestate", item["traceparent"], item["tracestate"])
		}
		h, _ := headersOf(a.emits[4].GetRecord())
		if _, ok := h["tracestate"]; ok || h["traceparent"] != item["traceparent"] {
			t.Errorf("emit headers %v; want the item's traceparent and no tracestate", h)
		}
	})
	t.Run("dead letter and fallback keep the input's", func(t *testing.T) {
		dl, fb := a.emits[5], a.emits[6]
		h, order := headersOf(dl.GetRecord())
		if dl.GetOutlet() != "dl" || order[0] != "traceparent" || order[1] != "tracestate" || h["traceparent"] != inParent || h["tracestate"] != "a=1" || strings.Count(strings.Join(order, ","), "trace") != 2 {
			t.Errorf("dead letter on %s headers %v (%v); want the input's traceparent and tracestate unchanged, first", dl.GetOutlet(), h, order)
		}
		h, _ = headersOf(fb.GetRecord())
		if _, ok := h["traceparent"]; fb.GetOutlet() != "unsure" || ok {
			t.Errorf("fallback on %s headers %v; want the input's (none)", fb.GetOutlet(), h)
		}
	})
	expectEOF(t, s.stop())
}
