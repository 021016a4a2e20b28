package bridge

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// BenchmarkStatePath measures the bridge's own work on state for one batch of 100 records of
// 100 keys, without the pool or the wire: its BatchState decoded and taken (as the receive
// loop does), each record's state read (the WithState hook), its done result with a new state
// kept and its Emit built (stateDone), the record settled, and the batch's Staged built and
// encoded. An op is a batch: allocs/op ÷ 100 is the allocations a record.
//
//	go test -run '^$' -bench BenchmarkStatePath -benchmem ./bridge/
func BenchmarkStatePath(b *testing.B) {
	const n = 100
	a, err := actionconf.ParseLine(strings.Fields("bench --in in=x.v1 --out out=y.v1 --state in -- prog"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewServer(Options{Action: a})
	if err != nil {
		b.Fatal(err)
	}
	c := &conversation{s: s, id: "c", start: &flowv1.Start{Pipeline: "p"}, outlets: map[string]string{"out": "out-topic"}, maxBytes: 4 << 20}
	value := []byte(`{"id":12345,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon"}`)
	batch := &flowv1.Batch{BatchId: 1, Inlet: "in", Partition: 3}
	bs := &statev1.BatchState{BatchId: 1}
	for i := range n {
		key := fmt.Appendf(nil, "k%d", i)
		batch.Records = append(batch.Records, &flowv1.InputRecord{Offset: int64(i), Record: &flowv1.Record{Key: key, Value: value}})
		bs.Entries = append(bs.Entries, &statev1.Entry{Key: key, Value: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	wire, err := proto.Marshal(&statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: bs}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var m statev1.SidecarMessage
		if err := proto.Unmarshal(wire, &m); err != nil {
			b.Fatal(err)
		}
		got := m.GetBatchState().GetEntries()
		pushed := &batchStates{byKey: make(map[string][]byte, len(got))}
		pushed.add(got)
		r := &batchRun{c: c, b: batch, topic: "in-topic", batchBlocks: getBlocks(n), state: newBatchOverlay(pushed, n)}
		for i, in := range batch.Records {
			r.items[i] = c.item(batch, "in-topic", in, string(c.appendNames(nil, batch, "in-topic", in)))
		}
		for i, in := range batch.Records {
			if r.state.of(in.GetRecord().GetKey()) == nil {
				b.Fatalf("record %d has no state", i)
			}
			res := engine.Result{Outcome: engine.Done, Attempts: 1, Emits: []stdio.Emit{{Payload: r.items[i].Payload}},
				State: &stdio.StagedState{Value: []byte(`{"n":1000}`)}}
			res = r.stateDone(i, res)
			var st settled
			st, r.pending = c.settle(batch, "in-topic", in, res, &r.emits, r.pending[:0], &r.state.pre[i])
			if st.kind != "done" {
				b.Fatalf("settled %+v", st)
			}
		}
		staged := &statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: 1, Entries: r.state.entries()}}}
		if _, err := proto.Marshal(staged); err != nil {
			b.Fatal(err)
		}
		r.pending = r.pending[:0]
		putBlocks(r.batchBlocks)
	}
}
