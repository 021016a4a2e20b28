// Package state is the sidecar's store of per-key state: one bbolt file per changelog
// partition the sidecar owns, restored from the changelog and written as commits land. It is
// the sidecar's own, no API: what a peer sees of state is the callback service, not the file.
//
// The file is a cache of a compacted log: Kafka holds the durable copy, so the file is written
// without fsync and trusted only when it was closed cleanly or last written in this boot.
// Nothing per key is held in the heap: a read copies the states it returns, a write is one
// bbolt transaction.
package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

var (
	// ErrForeign is returned by Open for a file at a store's path that is not a store file of
	// this format (another program's file, a corrupt one): it is refused, never overwritten.
	ErrForeign = errors.New("state: not a millrace state file")
	// ErrLocked is returned by Open when another process holds the file within the lock
	// timeout: two sidecars share one FLOW_STATE_DIR.
	ErrLocked = errors.New("state: the file is held by another process")
	// ErrTooLarge is returned by Apply (and so by Restore) for an entry whose key or state is
	// over the store's limits; nothing of the transaction is applied.
	ErrTooLarge = errors.New("state: an entry over the store's limits")
	// ErrClosed is returned by a method of a Partition that was closed or removed.
	ErrClosed = errors.New("state: the store is closed")
	// ErrNoTTLIndex is returned by Expired for a file whose TTL index was never built:
	// IndexTTL builds it.
	ErrNoTTLIndex = errors.New("state: the file has no TTL index")
	// errDataLoss is the restore's own: the log start passed what it was reading. Restore
	// retries it once as a full restore.
	errDataLoss = errors.New("state: the changelog's start moved past the restore")
)

// MaxKeyBytes is the longest record key the store keeps: bbolt's key limit (32 KiB) less the
// 8 bytes of the TTL index's write time.
const MaxKeyBytes = bbolt.MaxKeySize - 8

// DefaultMaxValueBytes is the largest state a store accepts unless told otherwise: the line's
// own ceiling for max-bytes.
const DefaultMaxValueBytes = 1 << 20

// format is the layout the file holds; a file of another format is foreign.
const format = "1"

var (
	bucketValues = []byte("v")
	bucketTTL    = []byte("t")
	bucketMeta   = []byte("m")

	metaPosition = []byte("position")
	metaTopicID  = []byte("topic-id")
	metaBootID   = []byte("boot-id")
	metaClean    = []byte("clean")
	metaKeys     = []byte("keys")
	metaBytes    = []byte("bytes")
	metaFormat   = []byte("format")
	metaTTLIndex = []byte("ttl-index")
)

// Options tune Open; the zero value is the production setting.
type Options struct {
	Log *slog.Logger // nil: discard
	// BootID identifies this boot of the machine; empty: /proc/sys/kernel/random/boot_id. A
	// file left unclean under another boot may have lost pages with the machine.
	BootID string
	// LockTimeout bounds the wait for a file another process holds; 0: 1 s.
	LockTimeout time.Duration
	// MaxValueBytes is the largest state Apply accepts; 0: DefaultMaxValueBytes.
	MaxValueBytes int
}

// Checkpoint is what a file says of itself when it is opened.
type Checkpoint struct {
	Position    int64    // the next changelog offset not applied
	TopicID     [16]byte // of the changelog topic it was restored from; zero: never restored
	Keys, Bytes int64    // keys held, and the bytes of their keys and states
	// Discarded is set when Open found a file left unclean under another boot and deleted it:
	// the partition is restored in full.
	Discarded bool
}

// Entry is one key's state. Value nil is a deletion.
type Entry struct {
	Key     []byte
	Value   []byte
	Written int64 // ms since the epoch: the changelog record's timestamp
}

// Partition is the store of one changelog partition. Its methods are safe for concurrent use
// (bbolt's one writer, many readers); Close and Remove may be called more than once.
type Partition struct {
	path      string
	topic     string
	partition int32
	opts      Options

	mu        sync.RWMutex // held for writing only while the file is swapped (Reset) or closed
	db        *bbolt.DB    // nil once closed
	discarded bool         // Open deleted an unclean file: the first Restore says why it is full
}

// Path is where the store of a changelog partition lives under dir:
// dir/<changelog topic>/<partition>.db.
func Path(dir, topic string, partition int32) string {
	return filepath.Join(dir, topic, strconv.Itoa(int(partition))+".db")
}

// Open opens (or creates) the store of changelog partition topic/partition under dir and marks
// it in use by this boot. A file left unclean under another boot is deleted and a new one
// created (Checkpoint.Discarded); a file that is not a store is refused with ErrForeign.
func Open(dir, topic string, partition int32, o Options) (*Partition, Checkpoint, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Second
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.BootID == "" {
		o.BootID = bootID()
	}
	if topic == "" || topic == "." || topic == ".." || strings.ContainsAny(topic, `/\`) {
		return nil, Checkpoint{}, fmt.Errorf("state: changelog topic %q is not a topic name Kafka accepts", topic)
	}
	p := &Partition{path: Path(dir, topic, partition), topic: topic, partition: partition, opts: o}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
		return nil, Checkpoint{}, fmt.Errorf("state: the store directory of %s/%d: %w", topic, partition, err)
	}
	_, statErr := os.Stat(p.path)
	existed := statErr == nil
	db, err := p.openFile()
	if err != nil {
		return nil, Checkpoint{}, err
	}
	p.db = db
	cp, err := p.adopt(existed)
	if err != nil {
		if p.db != nil {
			p.db.Close()
			p.db = nil
		}
		if !existed {
			os.Remove(p.path) // a refused Open leaves no file it made
		}
		return nil, Checkpoint{}, err
	}
	p.discarded = cp.Discarded
	return p, cp, nil
}

// adopt reads the checkpoint of the file Open opened, deletes and recreates it when it cannot
// be trusted, and marks it in use by this boot.
func (p *Partition) adopt(existed bool) (Checkpoint, error) {
	var cp Checkpoint
	if existed {
		var trusted bool
		var err error
		if cp, trusted, err = readCheckpoint(p.db, p.path, p.opts.BootID); err != nil {
			return Checkpoint{}, err
		}
		if !trusted {
			p.opts.Log.Warn("state: a store file left unclean under another boot, deleted for a full restore", "file", p.path, "position", cp.Position)
			p.db.Close()
			p.db = nil
			if err := os.Remove(p.path); err != nil {
				return Checkpoint{}, fmt.Errorf("state: delete the unclean file %s: %w", p.path, err)
			}
			if p.db, err = p.openFile(); err != nil {
				return Checkpoint{}, err
			}
			cp = Checkpoint{Discarded: true}
		}
	}
	if err := p.db.Update(func(tx *bbolt.Tx) error { return initFile(tx, p.opts.BootID) }); err != nil {
		return Checkpoint{}, fmt.Errorf("state: mark %s in use: %w", p.path, err)
	}
	return cp, nil
}

// openFile opens or creates the bbolt file, translating bbolt's refusals into the package's.
func (p *Partition) openFile() (*bbolt.DB, error) {
	db, err := bbolt.Open(p.path, 0o644, &bbolt.Options{
		Timeout:        p.opts.LockTimeout,
		NoSync:         true, // Kafka is the durable copy; a crash of the process keeps the page cache
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is locked after %s: another sidecar uses the same FLOW_STATE_DIR; give each sidecar a directory of its own", ErrLocked, p.path, p.opts.LockTimeout)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrInvalidMapping):
		return nil, fmt.Errorf("%w: %s (%w): delete it, or point FLOW_STATE_DIR at a directory of the sidecar's own; the state is restored from the changelog", ErrForeign, p.path, err)
	default:
		return nil, fmt.Errorf("state: open %s: %w", p.path, err)
	}
}

// readCheckpoint reads an existing file's checkpoint and whether it can be trusted.
func readCheckpoint(db *bbolt.DB, path, boot string) (cp Checkpoint, trusted bool, err error) {
	err = db.View(func(tx *bbolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil || string(m.Get(metaFormat)) != format || tx.Bucket(bucketValues) == nil || tx.Bucket(bucketTTL) == nil {
			return fmt.Errorf("%w: %s is a bbolt file without the buckets of format %s: delete it, or point FLOW_STATE_DIR at a directory of the sidecar's own; the state is restored from the changelog", ErrForeign, path, format)
		}
		cp = checkpointOf(m)
		trusted = string(m.Get(metaClean)) == "1" || string(m.Get(metaBootID)) == boot
		return nil
	})
	return cp, trusted, err
}

func checkpointOf(m *bbolt.Bucket) Checkpoint {
	var cp Checkpoint
	cp.Position = getInt(m, metaPosition)
	copy(cp.TopicID[:], m.Get(metaTopicID))
	cp.Keys = getInt(m, metaKeys)
	cp.Bytes = getInt(m, metaBytes)
	return cp
}

// initFile creates the buckets of a new file and marks the file in use by this boot. A new
// file has no TTL index (ttl-index 0) until IndexTTL builds it; a file of format 1 without the
// entry was written before the index became optional, and has a complete one.
func initFile(tx *bbolt.Tx, boot string) error {
	for _, b := range [][]byte{bucketValues, bucketTTL, bucketMeta} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	m := tx.Bucket(bucketMeta)
	if m.Get(metaFormat) == nil { // a new file
		if err := m.Put(metaTTLIndex, []byte("0")); err != nil {
			return err
		}
	}
	if err := m.Put(metaFormat, []byte(format)); err != nil {
		return err
	}
	if err := m.Put(metaBootID, []byte(boot)); err != nil {
		return err
	}
	return m.Put(metaClean, []byte("0"))
}

// Get reads the states of keys in one read transaction and appends those it holds to dst;
// an entry written before notBefore (ms) has expired and is left out, whether or not its
// tombstone was written yet. Keys it does not hold are left out too. An entry's Key is the
// caller's slice of keys, not a copy; its Value is a copy (the states read share one buffer).
func (p *Partition) Get(keys [][]byte, notBefore int64, dst []Entry) ([]Entry, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return dst, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	err := p.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketValues).Cursor() // one cursor for every key: bbolt allocates one per Get
		var vk, values []byte
		for _, k := range keys {
			vk = valueKey(vk[:0], k)
			at, got := c.Seek(vk)
			if got == nil || !bytes.Equal(at, vk) {
				continue
			}
			written := int64(binary.BigEndian.Uint64(got))
			if written < notBefore {
				continue
			}
			if values == nil {
				values = make([]byte, 0, len(keys)*(len(got)+8))
			}
			// A new buffer when this one is full; the values already cut keep the old one.
			from := len(values)
			if cap(values)-from < len(got)-8 {
				values, from = make([]byte, 0, max(2*cap(values), len(got))), 0
			}
			values = append(values, got[8:]...)
			dst = append(dst, Entry{Key: k, Value: values[from:len(values):len(values)], Written: written})
		}
		return nil
	})
	if err != nil {
		return dst, fmt.Errorf("state: read %s: %w", p.path, err)
	}
	return dst, nil
}

// Apply writes es in order and sets the position to position, in one transaction, with the
// counts, and the TTL index once IndexTTL built it: a restore's batch, or states promoted once
// Kafka holds them.
func (p *Partition) Apply(es []Entry, position int64) error {
	for _, e := range es {
		if err := p.check(e); err != nil {
			return err
		}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	err := p.db.Update(func(tx *bbolt.Tx) error {
		v, t, m := tx.Bucket(bucketValues), tx.Bucket(bucketTTL), tx.Bucket(bucketMeta)
		keys, size := getInt(m, metaKeys), getInt(m, metaBytes)
		indexed := hasTTLIndex(m)
		// bbolt keeps the values given to Put until the transaction ends, and copies the keys:
		// the values are cut from one buffer that nothing writes again, the keys built in one
		// scratch. The old values are found, and the TTL index's entries deleted, with one
		// cursor a bucket (bbolt's Get and Delete allocate a cursor each).
		n := 0
		for _, e := range es {
			if e.Value != nil {
				n += 8 + len(e.Value)
			}
		}
		vals := make([]byte, 0, n)
		vc := v.Cursor()
		var tc *bbolt.Cursor
		if indexed {
			tc = t.Cursor()
		}
		var vk, tk []byte
		for _, e := range es {
			vk = valueKey(vk[:0], e.Key)
			if at, old := vc.Seek(vk); old != nil && bytes.Equal(at, vk) {
				keys--
				size -= int64(len(e.Key) + len(old) - 8)
				if indexed {
					// Before the value is deleted: old is the page's, valid until it changes.
					tk = ttlKey(tk[:0], int64(binary.BigEndian.Uint64(old)), e.Key)
				}
				if e.Value == nil {
					if err := vc.Delete(); err != nil {
						return err
					}
				}
				if indexed {
					if at, _ := tc.Seek(tk); bytes.Equal(at, tk) {
						if err := tc.Delete(); err != nil {
							return err
						}
					}
				}
			}
			if e.Value == nil {
				continue
			}
			from := len(vals)
			vals = append(binary.BigEndian.AppendUint64(vals, uint64(e.Written)), e.Value...)
			if err := v.Put(vk, vals[from:len(vals):len(vals)]); err != nil {
				return err
			}
			if indexed {
				if err := t.Put(ttlKey(tk[:0], e.Written, e.Key), nil); err != nil {
					return err
				}
			}
			keys++
			size += int64(len(e.Key) + len(e.Value))
		}
		if err := putInt(m, metaKeys, keys); err != nil {
			return err
		}
		if err := putInt(m, metaBytes, size); err != nil {
			return err
		}
		return putInt(m, metaPosition, position)
	})
	if err != nil {
		return fmt.Errorf("state: write %s: %w", p.path, err)
	}
	return nil
}

func (p *Partition) check(e Entry) error {
	if len(e.Key) > MaxKeyBytes {
		return fmt.Errorf("%w: a key of %d bytes in changelog %s/%d is over the store's %d bytes (bbolt's key limit): keep keys shorter", ErrTooLarge, len(e.Key), p.topic, p.partition, MaxKeyBytes)
	}
	if len(e.Value) > p.opts.MaxValueBytes {
		return fmt.Errorf("%w: the state of key %q in changelog %s/%d is %d bytes, over %d: raise max-bytes on the action line (at most 1 MiB) or keep less per key", ErrTooLarge, clip(e.Key), p.topic, p.partition, len(e.Value), p.opts.MaxValueBytes)
	}
	return nil
}

// Checkpoint reads the file's checkpoint as it is now.
func (p *Partition) Checkpoint() (Checkpoint, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.db == nil {
		return Checkpoint{}, fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	var cp Checkpoint
	err := p.db.View(func(tx *bbolt.Tx) error { cp = checkpointOf(tx.Bucket(bucketMeta)); return nil })
	return cp, err
}

// takeDiscarded reports, once, whether Open deleted an unclean file.
func (p *Partition) takeDiscarded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.discarded
	p.discarded = false
	return d
}

// Reset empties the store for a full restore of the changelog topic topicID, position 0: the
// file is deleted and created again, so the space of the old states goes back to the disk.
func (p *Partition) Reset(topicID [16]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return fmt.Errorf("%w: %s", ErrClosed, p.path)
	}
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("state: close %s: %w", p.path, err)
	}
	p.db = nil
	if err := os.Remove(p.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: delete %s: %w", p.path, err)
	}
	db, err := p.openFile()
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if err := initFile(tx, p.opts.BootID); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaTopicID, topicID[:])
	})
	if err != nil {
		db.Close()
		return fmt.Errorf("state: create %s: %w", p.path, err)
	}
	p.db = db
	return nil
}

// Close syncs the file, marks it clean and closes it; the file stays for a later catch-up.
func (p *Partition) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return nil
	}
	db := p.db
	p.db = nil
	// The flag is written after everything before it is on disk, and synced itself, so a
	// file that says clean holds every page its transactions wrote.
	err := db.Sync()
	if err == nil {
		err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaClean, []byte("1")) })
	}
	if err == nil {
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("state: close %s: %w", p.path, err)
	}
	return nil
}

// Remove closes the store and deletes its file, and the topic's directory once empty: a
// revoked partition kept long enough.
func (p *Partition) Remove() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db != nil {
		err := p.db.Close()
		p.db = nil
		if err != nil {
			return fmt.Errorf("state: close %s: %w", p.path, err)
		}
	}
	if err := os.Remove(p.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: delete %s: %w", p.path, err)
	}
	// Another partition's file may still be there: then the directory stays.
	_ = os.Remove(filepath.Dir(p.path))
	return nil
}

// valueKey is the key of bucket v: a zero byte before the record key, because bbolt refuses
// an empty key and an empty record key is a key on a compacted topic.
func valueKey(dst, key []byte) []byte { return append(append(dst, 0), key...) }

func getInt(b *bbolt.Bucket, k []byte) int64 {
	if v := b.Get(k); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func putInt(b *bbolt.Bucket, k []byte, n int64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// clip keeps an error about a long key readable.
func clip(k []byte) string {
	if len(k) > 64 {
		return string(k[:64]) + "…"
	}
	return string(k)
}

// bootID is the kernel's id of this boot; where there is none, an id of this process alone,
// so any file left unclean is distrusted.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown-boot-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	return strings.TrimSpace(string(b))
}
