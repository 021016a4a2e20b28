package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// stateTTL is the TTL of TestStateTTL's line: the least the line allows, so the sweep (every
// max(ttl/10, 1s)) runs each second and the case is short.
const stateTTL = 2 * time.Second

// TestStateTTL runs the count with `--state in,ttl=2s`: one record of a key, then the key left
// idle until the sidecar's sweep writes its tombstone after its state in the changelog, then
// the key's next record, which must see no state (its count restarts at 1); the sweep's
// tombstones are counted as state_writes_total{kind="expire"}. Both modes; exactly once the
// changelog and the outlet are read read_committed, so the tombstone is seen once its
// transaction commits.
func TestStateTTL(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		sr := newStateRunAs(t, b, d, "in,ttl="+stateTTL.String())
		r := sr.start(0)
		const key = "k-ttl"
		record := func() *kgo.Record {
			return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q}`, key)}
		}

		sr.produce(record())
		sr.waitDone(stateIdle)
		written := time.Now()

		// Bounded well above the TTL and a sweep interval, for a busy machine and a
		// transaction's commit.
		const limit = 30 * time.Second
		var es []changelogEntry
		if !testkit.Eventually(limit, func() bool {
			es = sr.changelogValues(t)[key]
			return len(es) >= 2 && es[len(es)-1].n < 0
		}) {
			t.Fatalf("the changelog holds %v for key %s %s after its record was done; want its count 1, then a tombstone (ttl %s)\n%s", es, key, limit, stateTTL, sr.logTails(20))
		}
		expired := time.Since(written)
		if len(es) != 2 || es[0].n != 1 {
			t.Errorf("the changelog holds %v for key %s; want its count 1, then one tombstone", es, key)
		}
		// The records' timestamps are the sidecar's producer's: the sweep's tombstone is at
		// least the TTL younger than the state it deletes.
		var stamps []time.Time
		for _, rec := range b.ReadAll(t, sr.changelog) {
			if string(rec.Key) == key {
				stamps = append(stamps, rec.Timestamp)
			}
		}
		swept := time.Duration(0)
		if len(stamps) == 2 {
			if swept = stamps[1].Sub(stamps[0]); swept < stateTTL {
				t.Errorf("key %s's tombstone is stamped %s after its state; want at least the TTL, %s", key, swept, stateTTL)
			}
		}

		sr.produce(record())
		sr.waitDone(stateIdle)
		tr := sr.truth(t)
		outs := sr.countOutputs(t)
		var ps problems
		for place, i := range tr.index {
			got := outs[place]
			switch {
			case len(got) != 1:
				ps.add("input %d@%d (record %d of key %s): %d outputs, want 1", place.p, place.o, i, key, len(got))
			case got[0].Saw != 0 || got[0].N != 1:
				// The second record comes after the key's tombstone: it sees no state.
				ps.add("input %d@%d (record %d of key %s): saw %d and made %d, want 0 and 1", place.p, place.o, i, key, got[0].Saw, got[0].N)
			}
		}
		if len(tr.index) != 2 {
			ps.add("%d records produced, want 2", len(tr.index))
		}
		ps.report(t, "outputs around the expiry")
		// The new count follows the tombstone; the sweep may have expired it again since.
		after := sr.changelogValues(t)[key]
		if len(after) < 3 || len(after) > 4 || after[2].n != 1 || (len(after) == 4 && after[3].n >= 0) {
			t.Errorf("the changelog holds %v for key %s after its second record; want 1, a tombstone, 1 (and perhaps a second tombstone)", after, key)
		}

		expire := 0.0
		if !testkit.Eventually(10*time.Second, func() bool {
			e, err := testkit.Metrics(r.metrics)
			expire, _ = e.Value("millrace_sidecar_state_writes_total", "kind", "expire")
			return err == nil && expire > 0
		}) {
			t.Errorf(`millrace_sidecar_state_writes_total{kind="expire"} is %v after the changelog held the tombstone; want above 0`, expire)
		}
		// A tombstone is counted once written (at least once) or committed (exactly once), so
		// a read after the count holds every tombstone it counts; the key's second state may
		// have expired meanwhile.
		tombstones := 0
		for _, e := range sr.changelogValues(t)[key] {
			if e.n < 0 {
				tombstones++
			}
		}
		if expire > float64(tombstones) {
			t.Errorf(`millrace_sidecar_state_writes_total{kind="expire"} is %v, but the changelog read after it holds %d tombstones`, expire, tombstones)
		}
		t.Logf("%s [%s]: the tombstone of key %s stamped %s after its state, read %s after its record was committed (ttl %s); expire writes %v; changelog at the end %v",
			t.Name(), b.Name(), key, swept, expired.Round(10*time.Millisecond), stateTTL, expire, after)
	})
}
