package actionconf

import "testing"

func TestIdempotencyKey(t *testing.T) {
	// The derivation is documented (README); a change would re-key every record in flight.
	if got, want := IdempotencyKey("pipe", "score-listing", "listings", 3, 1042), "25ec15e1e9cdf74d5a74c078f578c602"; got != want {
		t.Errorf("IdempotencyKey(pipe, score-listing, listings, 3, 1042) = %s; want %s", got, want)
	}
	k := IdempotencyKey("p", "s", "t", 1, 2)
	if len(k) != 32 || k != IdempotencyKey("p", "s", "t", 1, 2) {
		t.Errorf("IdempotencyKey = %q; want 32 hex digits, stable", k)
	}
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	if IdempotencyKey("ab", "c", "t", 1, 2) == IdempotencyKey("a", "bc", "t", 1, 2) || k == IdempotencyKey("p", "s", "t", 1, 3) {
		t.Errorf("IdempotencyKey collides on different records")
	}
}

// TestIdempotencyKeyReplayGeneration: generation 0 keeps today's keys exactly; every other
// generation gives every record new keys, stable within the generation.
func TestIdempotencyKeyReplayGeneration(t *testing.T) {
	if got, want := idempotencyKeyAt(0, "pipe", "score-listing", "listings", 3, 1042), "25ec15e1e9cdf74d5a74c078f578c602"; got != want {
		t.Errorf("idempotencyKeyAt(0, …) = %s; want the generation-less key %s", got, want)
	}
	seen := map[string]uint64{}
	for _, gen := range []uint64{0, 1, 2, 1 << 40} {
		k := idempotencyKeyAt(gen, "pipe", "score-listing", "listings", 3, 1042)
		if other, dup := seen[k]; dup {
			t.Errorf("generations %d and %d give the same key %s", other, gen, k)
		}
		seen[k] = gen
		if k != idempotencyKeyAt(gen, "pipe", "score-listing", "listings", 3, 1042) || len(k) != 32 {
			t.Errorf("idempotencyKeyAt(%d) = %q; want 32 hex digits, stable", gen, k)
		}
	}
}
