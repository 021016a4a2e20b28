package state

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"
)

// Abandon closes the file as a crash would: without marking it clean.
func (p *Partition) Abandon() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	db := p.db
	p.db = nil
	return db.Close()
}

// TTLIndex reads the TTL index as key@written entries in index order, and the meta entry
// ttl-index ("" when absent).
func (p *Partition) TTLIndex() (entries []string, flag string, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	err = p.db.View(func(tx *bbolt.Tx) error {
		flag = string(tx.Bucket(bucketMeta).Get(metaTTLIndex))
		return tx.Bucket(bucketTTL).ForEach(func(k, _ []byte) error {
			entries = append(entries, fmt.Sprintf("%s@%d", k[8:], binary.BigEndian.Uint64(k)))
			return nil
		})
	})
	return entries, flag, err
}

// ForgetTTLFlag deletes the meta entry ttl-index: the file takes the shape of one written
// before the index became optional.
func (p *Partition) ForgetTTLFlag() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Delete(metaTTLIndex) })
}

// SetTTLIndexChunk makes IndexTTL put n entries a transaction until the returned func undoes it.
func SetTTLIndexChunk(n int) (undo func()) {
	old := ttlIndexChunk
	ttlIndexChunk = n
	return func() { ttlIndexChunk = old }
}

// PutStrayTTLEntry puts an entry into the TTL index whatever its flag says: what a build cut
// short between two of its transactions leaves.
func (p *Partition) PutStrayTTLEntry(key string, written int64) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketTTL).Put(ttlKey(nil, written, []byte(key)), nil) })
}
