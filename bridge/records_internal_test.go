package bridge

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
)

// FuzzTextOrBase64 checks that key and header bytes survive the trip to an item and back from
// an emit: UTF-8 as text, anything else as base64.
func FuzzTextOrBase64(f *testing.F) {
	for _, s := range []string{"", "listing-42", "é", "\xff\x00k", "\xc3\x28"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		text, b64 := textOrBase64(b)
		if (text != nil) != utf8.Valid(b) || (text != nil && b64 != "") {
			t.Fatalf("textOrBase64(%q) = %v, %q; want text exactly when UTF-8", b, text, b64)
		}
		got, err := bytesOf(text, b64, "key")
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("bytesOf(textOrBase64(%q)) = %q, %v; want the same bytes", b, got, err)
		}
	})
}

func TestBytesOfBadBase64(t *testing.T) {
	if _, err := bytesOf(nil, "not base64!", "key"); err == nil {
		t.Errorf("bytesOf(keyBase64 %q) = nil error; want one", "not base64!")
	}
}

// FuzzSizeBound checks that the cheap bound is never below the exact size of an Emit.
func FuzzSizeBound(f *testing.F) {
	f.Add("out", []byte("k"), []byte(`{"a":1}`), "h", []byte("v"), uint64(1))
	f.Fuzz(func(t *testing.T, outlet string, key, value []byte, hk string, hv []byte, id uint64) {
		if !utf8.ValidString(outlet) || !utf8.ValidString(hk) {
			return
		}
		rec := &flowv1.Record{Key: key, Value: value, Headers: []*flowv1.Header{{Key: hk, Value: hv}, {Key: hk}}}
		msg := &flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: id, Outlet: outlet, Record: rec}}}
		if b, n := sizeBound(outlet, rec), proto.Size(msg); b < n {
			t.Fatalf("sizeBound = %d; want at least proto.Size = %d", b, n)
		}
	})
}

// TestEmitsScratchReused checks the room Emits are built in: the messages of a record stay as
// they were while later records' are built (they wait to be sent together), and once the room
// is reset and reused, a later emit keeps nothing of an earlier one (no key, header or trace
// header), and nothing refers to a record any more after a reset.
func TestEmitsScratchReused(t *testing.T) {
	a, err := actionconf.ParseLine(strings.Fields("s --in in=x.v1 --out out=y.v1 -- prog"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{Action: a})
	if err != nil {
		t.Fatal(err)
	}
	c := &conversation{s: s, id: "c", start: &flowv1.Start{Pipeline: "p"}, outlets: map[string]string{"out": "out-topic"}, maxBytes: 4 << 20}
	k, hv := "k1", "v1"
	tc := stdio.TraceContext{TraceID: stdio.NewTraceID(), Parent: [8]byte{1}, SpanID: stdio.NewSpanID(), Flags: 1}
	var sc emitScratch
	first, err := c.emits(1, []stdio.Emit{
		{Payload: []byte(`{"a":1}`), Key: &k, Headers: []stdio.Header{{Key: "h", Value: &hv}}},
		{Payload: []byte(`{"a":2}`)},
	}, &tc, []byte("v=1"), &sc, nil)
	if err != nil || len(first) != 2 || len(first[0].GetEmit().GetRecord().GetHeaders()) != 3 {
		t.Fatalf("first record's emits = %v, %v; want 2, the first with its header, traceparent and tracestate", first, err)
	}
	kept := proto.Clone(first[0])
	both, err := c.emits(2, []stdio.Emit{{Payload: []byte(`{"b":1}`)}}, &stdio.TraceContext{}, nil, &sc, first)
	if err != nil || len(both) != 3 {
		t.Fatalf("second record's emits appended = %v, %v; want 3", both, err)
	}
	if !proto.Equal(both[0], kept) {
		t.Errorf("after the second record, the first's emit = %v; want it unchanged, %v", both[0], kept)
	}
	sc.reset()
	third, err := c.emits(3, []stdio.Emit{{Payload: []byte(`{"c":1}`)}}, &stdio.TraceContext{}, nil, &sc, nil)
	if err != nil || len(third) != 1 {
		t.Fatalf("third record's emits = %v, %v; want 1", third, err)
	}
	if third[0] != first[0] {
		t.Errorf("after a reset the third record's emit is not built in the room of the first")
	}
	want := &flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: 3, Outlet: "out", Record: &flowv1.Record{Value: []byte(`{"c":1}`)}}}}
	if !proto.Equal(third[0], want) {
		t.Errorf("third record's emit = %v; want %v (nothing of the first record's)", third[0], want)
	}
	sc.reset()
	for i := range sc.msgs {
		if m := &sc.msgs[i]; m.rec.Value != nil || m.emit.Record != nil {
			t.Errorf("scratch message %d still refers to a record after a reset", i)
		}
	}
}
