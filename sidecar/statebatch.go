package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// entryOverhead is what one entry adds to a batch's states besides its key and value, for the
// batch's bytes (records and states together under batch.max-bytes).
const entryOverhead = 8

// stateRead is what a batch's states are read from, taken with its records under mu and read
// by sendStates without it: the overlay's entries are copied here, the store is read then.
type stateRead struct {
	link  *stateLink
	store *state.Partition
	b     *batch
	recs  []record       // the batch's records, copied out of the queue
	order [][]byte       // the distinct keys, in record order
	names []string       // order as strings, cut from one string of the batch's keys
	count map[string]int // records per key
	// overlay holds the keys the overlay answers (nil: deleted, no state); missing are read
	// from the store.
	overlay   map[string][]byte
	missing   [][]byte
	missingAt []string // missing as strings
	notBefore int64    // ms; a state written before it has expired
}

// readFor takes what batch b's states are read from: its keys, the overlay's answers, the
// store. Called with mu held.
func (s *Sidecar) readFor(c *conversation, b *batch, recs []record) *stateRead {
	p := b.p
	b.stateful = true
	r := &stateRead{link: c.state, store: p.store, b: b, recs: append([]record(nil), recs...),
		count: map[string]int{}, overlay: map[string][]byte{}, notBefore: math.MinInt64}
	if ttl := s.stateTTL(c, p.inlet.Port); ttl > 0 {
		r.notBefore = s.now().Add(-ttl).UnixMilli()
	}
	// One string of every record's key, whose slices key the maps: one allocation a batch,
	// not one a key.
	var all strings.Builder
	for _, rec := range r.recs {
		all.Write(rec.in.GetRecord().Key)
	}
	keys, at := all.String(), 0
	for _, rec := range r.recs {
		key := rec.in.GetRecord().Key
		if key == nil {
			continue // a keyless record has no state
		}
		k := keys[at : at+len(key)]
		at += len(key)
		r.count[k]++
		if r.count[k] > 1 {
			continue
		}
		r.order = append(r.order, key)
		r.names = append(r.names, k)
		if o, ok := p.overlay[k]; ok {
			// The same TTL as the store's: an expired entry answers "no state", as the
			// store's older one under it would too.
			if o.at >= r.notBefore {
				r.overlay[k] = o.value
			} else {
				r.overlay[k] = nil
			}
		} else {
			r.missing = append(r.missing, key)
			r.missingAt = append(r.missingAt, k)
		}
	}
	return r
}

// sendStates reads a batch's states (the store in one read transaction), trims the batch from
// its end while its records and states together pass the inlet's batch.max-bytes (never below
// one record), and sends its BatchState, before its Batch. Called with sendMu held, not mu.
func (s *Sidecar) sendStates(c *conversation, msg *flowv1.Batch, r *stateRead) error {
	b := r.b
	values := make(map[string][]byte, len(r.order))
	for k, v := range r.overlay {
		if v != nil {
			values[k] = v
		}
	}
	if len(r.missing) > 0 {
		got, err := r.store.Get(r.missing, r.notBefore, nil)
		if err != nil && errors.Is(err, state.ErrClosed) {
			s.mu.Lock()
			revoked := b.revoked || b.p.epoch != b.epoch
			s.mu.Unlock()
			if revoked {
				err = nil // a rebalance took the partition: the batch's answers are dropped
			}
		}
		if err != nil {
			return fmt.Errorf("%w: reading the states of batch %d (topic %s partition %d) from the state file: %w", errStreamFailed, b.id, b.p.topic, b.p.partition, err)
		}
		// got is in the order of missing, less the keys without a state: e.Key is missing's.
		j := 0
		for _, e := range got {
			for !bytes.Equal(r.missing[j], e.Key) {
				j++
			}
			values[r.missingAt[j]] = e.Value
			j++
		}
	}
	total := 0
	for _, rec := range r.recs {
		total += rec.size
	}
	for _, v := range values {
		total += len(v)
	}
	for k := range values {
		total += len(k) + entryOverhead
	}
	n := len(r.recs)
	for n > 1 && total > b.p.inlet.MaxBytes {
		n--
		total -= r.recs[n].size
		key := r.recs[n].in.GetRecord().Key
		if key == nil {
			continue
		}
		k := string(key)
		if r.count[k]--; r.count[k] == 0 {
			if v, ok := values[k]; ok {
				total -= len(k) + len(v) + entryOverhead
				delete(values, k)
			}
		}
	}
	entries := make([]*statev1.Entry, 0, len(values))
	slab := make([]statev1.Entry, len(values)) // the entries in one allocation
	keys := make(map[string]string, len(r.order))
	for i, key := range r.order {
		k := r.names[i]
		if r.count[k] == 0 {
			continue
		}
		keys[k] = k
		if v, ok := values[k]; ok {
			e := &slab[len(entries)]
			e.Key, e.Value = key, v
			entries = append(entries, e)
		}
	}
	s.mu.Lock()
	b.keys = keys
	if n < b.n {
		if b.p.inflight == b && b.p.epoch == b.epoch {
			b.p.sent -= b.n - n
		}
		b.n, b.last = n, r.recs[n-1]
		msg.Records = msg.Records[:n]
	}
	s.metrics.inlet(b.p.topic).sent.Add(float64(n))
	s.mu.Unlock()
	return r.link.sendBatchState(b.id, entries)
}
