package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"
)

// The TTL index (bucket t) is kept only once asked for: the sweep of an inlet with a TTL
// reads it, and most stateful inlets have none (docs/state.md, "TTL expiry").

// Expired returns up to max keys written before before (ms), oldest first, leaving out those
// skip reports (keys with a state staged and not yet in the store). skip may be nil. It reads
// the TTL index: on a file without one it returns ErrNoTTLIndex, and builds none (a read
// that writes would surprise; IndexTTL is the caller's explicit step).
func (p *Partition) Expired(before int64, max int, skip func(key []byte) bool) ([][]byte, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return nil, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	var out [][]byte
	err := p.db.View(func(tx *bbolt.Tx) error {
		if !hasTTLIndex(tx.Bucket(bucketMeta)) {
			return fmt.Errorf("%w (IndexTTL builds it from the values)", ErrNoTTLIndex)
		}
		c := tx.Bucket(bucketTTL).Cursor()
		for k, _ := c.First(); k != nil && len(out) < max; k, _ = c.Next() {
			if int64(binary.BigEndian.Uint64(k)) >= before {
				break
			}
			if key := k[8:]; skip == nil || !skip(key) {
				out = append(out, bytes.Clone(key))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state: read the TTL index of %s: %w", p.path, err)
	}
	return out, nil
}

// IndexTTL builds the TTL index of a file that has none, in one write transaction: a scan of
// the values (each starts with its write time) puts every key's entry, and the meta entry
// ttl-index says the index is complete. From then on Apply keeps it; it is never dropped
// (an inlet that once had a TTL may have one again, and a file that keeps it costs only the
// index's upkeep). A new file, or one a full restore made again, starts without one, so a
// store nobody sweeps pays nothing for it. built is false, and nothing is written, when the
// file had its index already; keys is the number of keys indexed.
func (p *Partition) IndexTTL() (built bool, keys int, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return false, 0, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	var indexed bool
	if err := p.db.View(func(tx *bbolt.Tx) error { indexed = hasTTLIndex(tx.Bucket(bucketMeta)); return nil }); err != nil {
		return false, 0, fmt.Errorf("state: read %s: %w", p.path, err)
	}
	if indexed {
		return false, 0, nil // the usual case, without a write transaction
	}
	err = p.db.Update(func(tx *bbolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if hasTTLIndex(m) {
			return nil // built between the two transactions
		}
		// The bucket of a file without an index is empty; made again all the same, so the
		// index holds the live keys and nothing else.
		if err := tx.DeleteBucket(bucketTTL); err != nil {
			return err
		}
		t, err := tx.CreateBucket(bucketTTL)
		if err != nil {
			return err
		}
		// The entries are put in the index's order: bbolt splits a node only at commit, so a
		// put into the one node of an empty bucket in the values' order moves half of it (9 s
		// for 100,000 keys of scattered write times, and quadratic). Held only while the
		// transaction is, as bbolt holds its own copy of each put's key until the commit.
		c := tx.Bucket(bucketValues).Cursor()
		var buf []byte
		var ends []int
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 1 || len(v) < 8 {
				return fmt.Errorf("an entry of %d bytes for key %q is not a state (a write time, then the state): the file is damaged; delete it and the state is restored from the changelog", len(v), clip(k))
			}
			buf = append(append(buf, v[:8]...), k[1:]...)
			ends = append(ends, len(buf))
		}
		entry := func(i int) []byte {
			if i == 0 {
				return buf[:ends[0]]
			}
			return buf[ends[i-1]:ends[i]]
		}
		order := make([]int, len(ends))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return bytes.Compare(entry(i), entry(j)) })
		for _, i := range order {
			if err := t.Put(entry(i), nil); err != nil {
				return err
			}
		}
		keys, built = len(order), true
		return m.Put(metaTTLIndex, []byte("1"))
	})
	if err != nil {
		return false, 0, fmt.Errorf("state: build the TTL index of %s: %w", p.path, err)
	}
	return built, keys, nil
}

// TTLIndexed reports whether the file has a complete TTL index (IndexTTL built it, or the
// file predates the index being optional).
func (p *Partition) TTLIndexed() (bool, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return false, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	var indexed bool
	err := p.db.View(func(tx *bbolt.Tx) error { indexed = hasTTLIndex(tx.Bucket(bucketMeta)); return nil })
	if err != nil {
		return false, fmt.Errorf("state: read %s: %w", p.path, err)
	}
	return indexed, nil
}

// hasTTLIndex reports whether the file's TTL index is complete: ttl-index 1, or no entry (a
// file written before the index became optional).
func hasTTLIndex(m *bbolt.Bucket) bool { return string(m.Get(metaTTLIndex)) != "0" }

// ttlKey is the key of the TTL index: the write time, big-endian, then the record key.
func ttlKey(dst []byte, written int64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(dst, uint64(written)), key...)
}
