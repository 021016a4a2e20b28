package bridge_test

import (
	"fmt"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestHeldOutputBudget: an action with a large fan-out (16 outputs of 64 KiB per record, 8
// records a batch, 4 partitions at once) delivers every output while the bridge holds at most
// its budget plus what the deliveries in flight stage, not whole batches (32 MiB here).
func TestHeldOutputBudget(t *testing.T) {
	const (
		limit      = 4 << 20
		partitions = 4
		records    = 8
		outputs    = 16
		kib        = 64
		processes  = 2
	)
	budget := engine.NewBudget(limit)
	r := startBridge(t, fmt.Sprintf("%s --concurrency %d", oneOutlet, processes), func(o *bridge.Options) { o.Budget = budget })
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	for p := range partitions {
		recs := make([]*flowv1.InputRecord, records)
		for i := range recs {
			recs[i] = rec(int64(i), nil, fmt.Sprintf(`{"op":"fanout","n":%d,"ms":%d}`, outputs, kib))
		}
		s.batch(uint64(p+1), int32(p), recs...)
	}
	for p := range partitions {
		a := s.wait(uint64(p + 1))
		if !a.ack || len(a.emits) != records*outputs {
			t.Fatalf("batch %d: %v; want Ack after %d emits", p+1, a, records*outputs)
		}
		for i, e := range a.emits { // in record order, each record's in its order
			if want := fmt.Sprintf(`"%d-x`, i%outputs); string(e.GetRecord().GetValue()[:len(want)]) != want {
				t.Fatalf("batch %d emit %d starts %q; want %s", p+1, i, e.GetRecord().GetValue()[:8], want)
			}
		}
	}
	perRecord := int64(outputs * (kib<<10 + 100))
	if peak, bound := budget.Peak(), int64(limit)+2*processes*perRecord; peak > bound || peak == 0 {
		t.Errorf("the bridge held at most %d bytes; want some, and under the %d-byte budget plus the deliveries in flight (%d)", peak, limit, bound)
	}
	if held := budget.Held(); held != 0 {
		t.Errorf("held after every batch was answered = %d; want 0", held)
	}
	t.Logf("peak held %.1f MiB for a %d MiB budget (%d MiB of output in all)", float64(budget.Peak())/(1<<20), limit>>20, partitions*records*outputs*kib>>10)
	expectEOF(t, s.stop())
	s.check()
}

// TestReplayGenerationKeys: the bridge's replay generation is part of each item's
// idempotencyKey; the same record gets a new key under a bumped generation.
func TestReplayGenerationKeys(t *testing.T) {
	for _, gen := range []uint64{0, 4} {
		r := startBridge(t, oneOutlet, func(o *bridge.Options) { o.ReplayGeneration = gen })
		s := dial(t, r.addr)
		s.start(r, "c", 0)
		s.batch(1, 0, rec(3, nil, `{"op":"flaky","n":0}`))
		a := s.wait(1)
		if !a.ack || len(a.emits) != 1 {
			t.Fatalf("generation %d: answer = %v; want Ack after 1 emit", gen, a)
		}
		want := string(actionconf.AppendIdempotencyKey(nil, gen, "pipe", "t", "in-topic", 0, 3))
		if got := emitted(t, a.emits[0])["idempotencyKey"]; got != want || (gen != 0) == (want == actionconf.IdempotencyKey("pipe", "t", "in-topic", 0, 3)) {
			t.Errorf("generation %d: idempotencyKey = %v; want %s (new keys only for a bumped generation)", gen, got, want)
		}
		expectEOF(t, s.stop())
		s.check()
	}
}
