package bridge

import (
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// BenchmarkRecordPath measures the bridge's own work per record, without the pool or the
// wire: the record made an item, the attempt's span drawn as the engine does, and the Emit
// of its one output built. With a traceparent header the item is a child span, without one a
// new root: the two cases every record takes.
//
//	go test -run '^$' -bench BenchmarkRecordPath -benchmem ./bridge/
func BenchmarkRecordPath(b *testing.B) {
	a, err := actionconf.ParseLine(strings.Fields("bench --in in=x.v1 --out out=y.v1 -- prog"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewServer(Options{Action: a})
	if err != nil {
		b.Fatal(err)
	}
	c := &conversation{s: s, id: "c", start: &flowv1.Start{Pipeline: "p"}, outlets: map[string]string{"out": "out-topic"}, maxBytes: 4 << 20}
	value := []byte(`{"id":12345,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon"}`)
	for _, tc := range []struct {
		name    string
		headers []*flowv1.Header
	}{
		{"root", nil},
		{"traceparent", []*flowv1.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := &flowv1.InputRecord{Offset: 42, Record: &flowv1.Record{Value: value, Headers: tc.headers}}
			batch := &flowv1.Batch{BatchId: 1, Inlet: "in", Partition: 3, Records: []*flowv1.InputRecord{in}}
			b.ReportAllocs()
			for b.Loop() {
				it := c.item(batch, "in-topic", in, string(c.appendNames(nil, batch, "in-topic", in)))
				it.Trace.SpanID = stdio.NewSpanID() // what the engine does per attempt
				res := engine.Result{Outcome: engine.Done, Attempts: 1, Trace: it.Trace, Emits: []stdio.Emit{{Payload: it.Payload}}}
				// The emits built and checked (settle sends nothing).
				if st, _ := c.settle(batch, "in-topic", in, res, nil, nil, nil); st.kind != "done" {
					b.Fatalf("settled %+v", st)
				}
			}
		})
	}
}
