package engine_test

import (
	"testing"

	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestBudget: a budget of held output shared by pools stops the writing of items while it is
// full and a delivery is in flight, and lets them go again as results are released; with
// nothing in flight one goes through (a delivery larger than the whole budget, or the one the
// held results wait on); what failed attempts staged is given back by the pool itself.
func TestBudget(t *testing.T) {
	budget := engine.NewBudget(150_000) // a chatty delivery stages about 104 kB
	hanging := start(t, config("hang", func(c *engine.Config) { c.Budget = budget }))
	submit(t, hanging, item("h1", `1`)) // in flight until its pool is closed
	p := start(t, config("chatty", func(c *engine.Config) { c.Budget = budget }))
	r1, r2, r3 := submit(t, p, item("b1", `1`)), submit(t, p, item("b2", `2`)), submit(t, p, item("b3", `3`))
	res1, res2 := wait(t, r1), wait(t, r2)
	if res1.Outcome != engine.Done || res1.Held < 100_000 || len(res1.Emits) != 100 {
		t.Fatalf("first result = %v, %d emits holding %d bytes; want done, 100 emits, their bytes held", res1.Outcome, len(res1.Emits), res1.Held)
	}
	if got := budget.Held(); got != res1.Held+res2.Held || got < budget.Limit() {
		t.Fatalf("held = %d; want the two results' %d, over the limit %d", got, res1.Held+res2.Held, budget.Limit())
	}
	select {
	case r := <-r3:
		t.Fatalf("item b3 finished (%v) while the budget was full; want it not written", r.Outcome)
	default:
	}
	budget.Release(res1.Held) // under the limit again: b3 is written
	res3 := wait(t, r3)
	budget.Release(res2.Held)
	budget.Release(res3.Held)
	if res3.Outcome != engine.Done || budget.Held() != 0 {
		t.Fatalf("third result = %v, held after every release = %d; want done and 0", res3.Outcome, budget.Held())
	}

	// A budget smaller than one delivery, nothing else in flight: each goes through alone, even
	// while the results before it are held.
	small := engine.NewBudget(50_000)
	q := start(t, config("chatty", func(c *engine.Config) { c.Budget = small }))
	var held int64
	for _, id := range []string{"s1", "s2"} {
		res := run(t, q, item(id, `1`))
		if res.Outcome != engine.Done || res.Held < 100_000 {
			t.Fatalf("%s = %v holding %d; want done, over the 50 kB budget alone", id, res.Outcome, res.Held)
		}
		held += res.Held
	}
	if small.Held() != held || small.Peak() != held {
		t.Errorf("held %d, peak %d; want both %d", small.Held(), small.Peak(), held)
	}
	small.Release(held)

	// Failed attempts give back what they staged.
	failing := engine.NewBudget(1 << 20)
	f := start(t, config("errors", func(c *engine.Config) { c.Budget = failing; c.Retries = 1 }))
	if res := run(t, f, item("e1", `"retryable"`)); res.Outcome != engine.Failed || res.Held != 0 || failing.Held() != 0 {
		t.Fatalf("failed item = %v holding %d, budget holds %d; want failed, nothing held", res.Outcome, res.Held, failing.Held())
	}
}
