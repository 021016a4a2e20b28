package sidecar_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// emitting is the process that emits, for each record, one record of size bytes to "out"
// (keyed as the input), then acks.
func emitting(size int) func(*call) error {
	return func(c *call) error {
		for _, r := range c.Batch.Records {
			if err := c.Emit("out", &flowv1.Record{Key: r.Record.Key, Value: bytes.Repeat([]byte{'e'}, size)}); err != nil {
				return err
			}
		}
		return c.Ack()
	}
}

// TestEmitBackpressure holds every write to the outlet while the process answers every batch
// at once: the sidecar stops sending batches once the held emits fill FLOW_MAX_HELD_EMIT_BYTES,
// so what it holds stays under the budget plus one batch per partition; a batch larger than
// the whole budget still goes, alone; once writes go through, everything is committed.
func TestEmitBackpressure(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding writes needs kfake
	const parts, perPart, emit = 4, 50, 16 << 10
	for _, tc := range []struct {
		name string
		held int64
	}{
		{name: "budget of four batches", held: 4 * emit},
		{name: "one batch over the budget", held: emit / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
			b.Produce(t, records(in, parts, parts*perPart)...)
			release := make(chan struct{})
			holdWrites(t, b, out, release)
			f := newProcess(t, emitting(emit))
			e := baseEnv(t, b, f, in, out)
			e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "1"
			e["FLOW_MAX_BATCH_EMIT_BYTES"] = fmt.Sprint(2 * emit)
			e["FLOW_MAX_HELD_EMIT_BYTES"] = fmt.Sprint(tc.held)
			r := start(t, e.config(t))
			waitFor(t, "the sender held back by the budget, or every batch sent", func() bool {
				return r.sc.Stats().EmitBudgetWaits > 0 || len(f.Batches()) == parts*perPart
			})
			sent := len(f.Batches())
			if n := b.Count(t, out); n != 0 {
				t.Errorf("%d outputs written while writes were held; want 0 (the hold let them through)", n)
			}
			close(release)
			waitFor(t, "every record committed", func() bool {
				return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(parts, parts*perPart))
			})
			st := r.sc.Stats()
			bound := tc.held + parts*emit
			t.Logf("%d of %d batches sent while writes were held; peak held %d bytes (bound %d)", sent, parts*perPart, st.PeakHeldEmitBytes, bound)
			if st.PeakHeldEmitBytes > bound {
				t.Errorf("peak held emits = %d bytes; want at most %d (FLOW_MAX_HELD_EMIT_BYTES %d + one batch per partition)", st.PeakHeldEmitBytes, bound, tc.held)
			}
			if st.EmitBudgetWaits == 0 {
				t.Errorf("Stats().EmitBudgetWaits = 0; want the sender held back while writes were held")
			}
			if got := len(b.ReadN(t, out, parts*perPart, waitTimeout)); got != parts*perPart {
				t.Errorf("outputs = %d; want %d", got, parts*perPart)
			}
		})
	}
}

// TestEmitBudgetBisect: a batch whose emits exceed FLOW_MAX_BATCH_EMIT_BYTES fails the stream
// naming its partition, offsets and the budget, and its partition is delivered again in
// halves down to one record; once those records are committed, batches are whole again.
func TestEmitBudgetBisect(t *testing.T) {
	const emit = 4 << 10
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	b.Produce(t, records(in, 1, 16)...)
	f := newProcess(t, emitting(emit))
	e := baseEnv(t, b, f, in, out)
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "16"
	e["FLOW_MAX_BATCH_EMIT_BYTES"] = fmt.Sprint(emit * 3 / 2) // one record's emits fit, two do not
	r := start(t, e.config(t))
	group := e["FLOW_CONSUMER_GROUP"]
	// The sidecar's own count moves with the cap's end, after the broker took the commit.
	waitFor(t, "16 records committed", func() bool {
		return allCommitted(t, b, group, in, map[int32]int64{0: 16}) && r.sc.RecordsCommitted() == 16
	})
	more := records(in, 1, 20)[16:]
	b.Produce(t, more...)
	waitFor(t, "20 records committed", func() bool { return allCommitted(t, b, group, in, map[int32]int64{0: 20}) })

	var sizes []int
	for _, bt := range f.Batches() {
		sizes = append(sizes, len(bt.Records))
	}
	want := []int{16, 8, 4, 2}
	for range 16 {
		want = append(want, 1)
	}
	if len(sizes) < len(want) || fmt.Sprint(sizes[:len(want)]) != fmt.Sprint(want) {
		t.Errorf("batch sizes = %v; want them to begin %v (halved down to one record)", sizes, want)
	} else if tail := sizes[len(want):]; slices.Max(append([]int{0}, tail...)) < 2 {
		// The four more records are one batch, then halved, unless a fetch brought fewer of
		// them at once: the cap may not hold them to one record each.
		t.Errorf("batch sizes after the first 16 records committed = %v; want a batch of more than one record (whole again once committed)", tail)
	}
	failed := wrapping(r.failures(sidecar.CauseEmitBudget), sidecar.ErrBatchEmitBudget)
	if len(failed) == 0 {
		t.Fatalf("stream failures = %v; want one of cause %s, wrapping ErrBatchEmitBudget", r.failures(""), sidecar.CauseEmitBudget)
	}
	// The error is for a person: it names the batch, the setting and what happens next.
	for _, msg := range []string{
		fmt.Sprintf("topic %s partition 0 (offsets 0-15, 16 records)", in),
		fmt.Sprintf("over the per-batch emit budget of %d bytes (FLOW_MAX_BATCH_EMIT_BYTES)", emit*3/2),
		"delivered again in batches of at most 8 records until offset 15 is committed",
	} {
		if !strings.Contains(failed[0].Error(), msg) {
			t.Errorf("the failure %v; want it to say %q", failed[0], msg)
		}
	}
	// A failed batch writes nothing: every record came out once.
	got := b.ReadAll(t, out)
	seen := map[string]int{}
	for _, o := range got {
		seen[string(o.Key)+"@"+fmt.Sprint(len(o.Value))]++
	}
	if len(got) != 20 {
		t.Errorf("outputs = %d; want 20, one per record (%v)", len(got), seen)
	}
}

// TestEmitBudgetSingleRecordStalls: one record whose emits alone exceed
// FLOW_MAX_BATCH_EMIT_BYTES stalls its partition with a message naming topic, partition,
// offset and the setting to raise; the stall warning follows; nothing is written or committed.
func TestEmitBudgetSingleRecordStalls(t *testing.T) {
	const emit = 4 << 10
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	b.Produce(t, records(in, 1, 3)...)
	f := newProcess(t, emitting(emit))
	e := baseEnv(t, b, f, in, out)
	e["FLOW_MAX_BATCH_EMIT_BYTES"] = "2Ki"
	e["FLOW_STALL_WARNING_AFTER"] = "30ms"
	addr := freeAddr(t)
	e["FLOW_METRICS_ADDR"] = addr
	r := start(t, e.config(t))
	waitFor(t, "the stall warning", func() bool { return r.sc.StallWarnings() >= 1 })
	waitMetrics(t, addr, "stream failures by emit_budget", func(m exposition) bool {
		return m.v("millrace_sidecar_stream_failures_total", "cause", "emit_budget") >= 2
	})
	failed := wrapping(r.failures(sidecar.CauseEmitBudget), sidecar.ErrRecordEmitBudget)
	if len(failed) == 0 {
		t.Fatalf("stream failures = %v; want one of cause %s, wrapping ErrRecordEmitBudget", r.failures(""), sidecar.CauseEmitBudget)
	}
	// The error is for a person: it names the record, the setting and the fix.
	for _, msg := range []string{
		fmt.Sprintf("topic %s partition 0 offset 0: the record's emits reached %d bytes, over the per-batch emit budget of 2048 bytes (FLOW_MAX_BATCH_EMIT_BYTES) on their own", in, emit),
		"raise FLOW_MAX_BATCH_EMIT_BYTES",
	} {
		if !strings.Contains(failed[0].Error(), msg) {
			t.Errorf("the failure %v; want it to say %q", failed[0], msg)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); got[0] != 0 {
		t.Errorf("committed = %v; want nothing past the stalled record", got)
	}
	if n := b.Count(t, out); n != 0 {
		t.Errorf("outputs = %d; want 0: an over-budget batch writes nothing", n)
	}
}

// TestEmitBudgetHalvesTheOthers: when one partition's batch goes over the per-batch budget,
// another partition's batch in flight that has emitted more than half the budget is halved
// too, rather than sent whole again to fail the next conversation.
func TestEmitBudgetHalvesTheOthers(t *testing.T) {
	const emit = 4 << 10
	b := newBroker(t)
	in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
	b.Produce(t, records(in, 2, 16)...) // 8 records on each partition
	f := newProcess(t, nil)
	f.Async = true
	halfway := make(chan struct{}) // partition 1 has emitted one record, over half the budget
	var once sync.Once
	f.OnBatch = func(c *call) error {
		if c.Conv > 1 {
			return emitting(emit)(c)
		}
		one := &flowv1.Record{Value: bytes.Repeat([]byte{'e'}, emit)}
		if c.Batch.Partition == 1 {
			err := c.Emit("out", one)
			once.Do(func() { close(halfway) })
			<-c.Done()
			return err
		}
		<-halfway
		for range c.Batch.Records {
			if err := c.Emit("out", one); err != nil {
				return nil // the stream failed: over the budget
			}
		}
		<-c.Done()
		return nil
	}
	e := baseEnv(t, b, f, in, out)
	e["FLOW_MAX_BATCH_EMIT_BYTES"] = fmt.Sprint(emit * 3 / 2)
	start(t, e.config(t))
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(2, 16))
	})
	first := map[int32]int{} // the size of each partition's first batch of the second conversation
	n := 0
	for _, bt := range f.Batches() {
		if n++; n <= 2 {
			if len(bt.Records) != 8 {
				t.Fatalf("a first conversation's batch has %d records; want 8 (the test needs whole partitions)", len(bt.Records))
			}
			continue
		}
		if _, ok := first[bt.Partition]; !ok {
			first[bt.Partition] = len(bt.Records)
		}
	}
	if first[0] != 4 || first[1] != 4 {
		t.Errorf("first batches after the failure: %v records by partition; want 4 each (both halved)", first)
	}
}
