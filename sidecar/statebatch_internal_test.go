package sidecar

import (
	"testing"
	"time"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// TestOverlayKeepsTTL: a state answered from the overlay (acknowledged, not yet in the store)
// is held to its key's TTL as the store's would be: staged longer ago than the TTL, it reads
// as no state; within it, as itself.
func TestOverlayKeepsTTL(t *testing.T) {
	now := time.UnixMilli(1_000_000_000)
	const ttl = time.Minute
	for _, tc := range []struct {
		name  string
		at    time.Time
		value []byte
	}{
		{"within the ttl", now.Add(-ttl + time.Millisecond), []byte("1")},
		{"at the ttl", now.Add(-ttl), []byte("1")},
		{"past the ttl", now.Add(-ttl - time.Millisecond), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sidecar{now: func() time.Time { return now }}
			p := &partition{inlet: &Inlet{Port: "in", StateTopic: "state"}}
			p.overlay = map[string]staged{"k": {value: []byte("1"), at: tc.at.UnixMilli()}}
			c := &conversation{state: &stateLink{ttl: map[string]time.Duration{"in": ttl}}}
			rec := record{in: &flowv1.InputRecord{Record: &flowv1.Record{Key: []byte("k")}}}
			r := s.readFor(c, &batch{p: p}, []record{rec})
			got, ok := r.overlay["k"]
			if !ok || string(got) != string(tc.value) || len(r.missing) != 0 {
				t.Errorf("readFor(staged %v before now) = overlay %q (%v), missing %q; want overlay %q, nothing missing", now.Sub(tc.at), got, ok, r.missing, tc.value)
			}
		})
	}
}
