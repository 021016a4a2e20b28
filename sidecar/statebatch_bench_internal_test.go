package sidecar

import (
	"fmt"
	"testing"
	"time"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// BenchmarkStateBatch is the sidecar's own work on state for one batch of 100 records of 100
// keys, in a store of 1,000 keys, without the wire: what its states are read from taken
// (readFor), the states read and the BatchState built (sendStates, up to the send, which a
// closed link refuses), its Staged joined with its Ack (the changelog records made, the
// overlay written), and its states promoted into the store as Kafka confirms them (promote):
// "quiet", each batch at once, its partition having nothing more to send; "busy", with
// records left to send, so that promote writes the store once promoteEntries states are
// pending. An op is
// a batch: allocs/op ÷ 100 is the allocations a record.
//
//	go test -run '^$' -bench BenchmarkStateBatch -benchmem ./sidecar/
func BenchmarkStateBatch(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "quiet"
		if busy {
			name = "busy"
		}
		b.Run(name, func(b *testing.B) { benchStateBatch(b, busy) })
	}
}

func benchStateBatch(b *testing.B, busy bool) {
	const n, keys = 100, 1000
	store, _, err := state.Open(b.TempDir(), "state", 0, state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var es []state.Entry
	for i := range keys {
		es = append(es, state.Entry{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(`{"n":0}`), Written: 1})
	}
	if err := store.Apply(es, keys); err != nil {
		b.Fatal(err)
	}
	now := time.UnixMilli(1_000_000_000)
	s := &Sidecar{now: func() time.Time { return now }, cfg: Config{MaxBatchEmitBytes: 64 << 20, MaxHeldEmitBytes: 64 << 20}}
	s.metrics = newMetrics(s)
	p := &partition{tp: tp{"in-topic", 0}, inlet: &Inlet{Port: "in", StateTopic: "state", MaxBytes: 4 << 20}, owned: true}
	p.store = store
	s.order = []*partition{p}
	c := &conversation{state: &stateLink{done: true, ttl: map[string]time.Duration{}}, batches: map[uint64]*batch{}}
	if busy {
		p.queue = make([]record, 1) // a record left to send
	}
	value := []byte(`{"id":12345,"name":"listing-42","tags":["a","b"],"price":1234.5,"city":"Lyon"}`)
	next, offset := 0, int64(0)
	b.ReportAllocs()
	for b.Loop() {
		recs := make([]record, n)
		staged := make([]*statev1.Entry, n)
		for i := range recs {
			key := fmt.Appendf(nil, "k%d", next)
			next = (next + 1) % keys
			recs[i] = record{in: &flowv1.InputRecord{Offset: offset, Record: &flowv1.Record{Key: key, Value: value}}, size: len(key) + len(value)}
			staged[i] = &statev1.Entry{Key: key, Value: fmt.Appendf(nil, `{"n":%d}`, offset)}
			offset++
		}
		c.lastID++
		bt := &batch{id: c.lastID, p: p, epoch: p.epoch, n: n, last: recs[n-1], sentAt: now, acked: true}
		msg := &flowv1.Batch{BatchId: bt.id, Records: make([]*flowv1.InputRecord, n)}
		for i := range recs {
			msg.Records[i] = recs[i].in
		}
		s.mu.Lock()
		c.batches[bt.id] = bt
		r := s.readFor(c, bt, recs)
		s.mu.Unlock()
		if err := s.sendStates(c, msg, r); err == nil {
			b.Fatal("sendStates sent on a closed State link")
		}
		s.mu.Lock()
		answered, err := s.joinStaged(c, bt.id, staged)
		s.mu.Unlock()
		if err != nil || !answered {
			b.Fatalf("joinStaged = %v, %v; want the batch answered", answered, err)
		}
		for i, rec := range bt.state { // as the producer leaves them
			rec.Offset, rec.Timestamp = int64(i)+offset, now
		}
		s.promote([]*batch{bt})
		s.mu.Lock()
		c.acked = nil
		s.drop(bt)
		s.mu.Unlock()
	}
	p.queue = nil
	s.promote(nil) // quiet now: what is pending goes
	if len(p.overlay) != 0 {
		b.Fatalf("%d states left in the overlay after their promotion", len(p.overlay))
	}
}
