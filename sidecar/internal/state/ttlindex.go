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

// ttlIndexChunk is how many entries of the TTL index IndexTTL puts in one transaction: bbolt
// holds a transaction's new pages in memory until its commit, so a build in one transaction
// would take memory in proportion to the keys (about 60 MB at 100,000).
var ttlIndexChunk = 16384

// IndexTTL builds the TTL index of a file that has none: a scan of the values (each starts
// with its write time) collects every key's entry, which are put in the index's order in
// transactions of ttlIndexChunk entries, the last of which sets the meta entry ttl-index that
// says the index is complete. From then on Apply keeps it; it is never dropped (an inlet that
// once had a TTL may have one again, and a file that keeps it costs only the index's upkeep).
// A new file, or one a full restore made again, starts without one, so a store nobody sweeps
// pays nothing for it. A build holds the file for itself (no Get or Apply meanwhile: a
// write between two of its transactions would leave a stale entry); it takes about 0.1 s a
// 100,000 keys and holds their entries (8 bytes and the key each, with two ints) and one
// transaction's pages in memory. A build cut short leaves the flag unset and is begun
// again by the next call. built is false, and nothing is written, when the file had its
// index already; keys is the number of keys indexed.
func (p *Partition) IndexTTL() (built bool, keys int, err error) {
	// The usual case, under the shared lock: every sweep asks, and Get and Apply go on.
	if indexed, err := p.TTLIndexed(); err != nil || indexed {
		return false, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return false, 0, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	var indexed bool
	// The entries, one after the other in buf, each ending at its ends.
	var buf []byte
	var ends []int
	err = p.db.View(func(tx *bbolt.Tx) error {
		if indexed = hasTTLIndex(tx.Bucket(bucketMeta)); indexed {
			return nil // built by another call since the shared lock's look
		}
		c := tx.Bucket(bucketValues).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 1 || len(v) < 8 {
				return fmt.Errorf("an entry of %d bytes for key %q is not a state (a write time, then the state): the file is damaged; delete it and the state is restored from the changelog", len(v), clip(k))
			}
			buf = append(append(buf, v[:8]...), k[1:]...)
			ends = append(ends, len(buf))
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("state: build the TTL index of %s: %w", p.path, err)
	}
	if indexed {
		return false, 0, nil
	}
	entry := func(i int) []byte {
		if i == 0 {
			return buf[:ends[0]]
		}
		return buf[ends[i-1]:ends[i]]
	}
	// In the index's order: bbolt splits a node only at commit, so puts into one node in the
	// values' order would move half of it each (9 s for 100,000 keys of scattered write
	// times, and quadratic); in order, each chunk appends at the index's end.
	order := make([]int, len(ends))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return bytes.Compare(entry(i), entry(j)) })
	for from := 0; ; from += ttlIndexChunk {
		to := min(from+ttlIndexChunk, len(order))
		err := p.db.Update(func(tx *bbolt.Tx) error {
			if from == 0 {
				// Made again: a build cut short may have left entries in it.
				if err := tx.DeleteBucket(bucketTTL); err != nil {
					return err
				}
				if _, err := tx.CreateBucket(bucketTTL); err != nil {
					return err
				}
			}
			t := tx.Bucket(bucketTTL)
			for _, i := range order[from:to] {
				if err := t.Put(entry(i), nil); err != nil {
					return err
				}
			}
			if to < len(order) {
				return nil
			}
			return tx.Bucket(bucketMeta).Put(metaTTLIndex, []byte("1"))
		})
		if err != nil {
			return false, 0, fmt.Errorf("state: build the TTL index of %s: %w", p.path, err)
		}
		if to == len(order) {
			return true, len(order), nil
		}
	}
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
