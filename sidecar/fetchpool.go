package sidecar

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchPool lends franz-go (kgo.WithPools) the buffers compressed record batches are
// decompressed into and the records fetched batches are decoded into. copyRecords copies
// every fetched record out and the poller then recycles it (kgo.Record.Recycle), so the next
// fetch decodes into the same memory instead of new allocations, about a fifth of the
// sidecar's bytes allocated per record (the decompressed batch and its Records): fewer
// garbage collections. The pools hold only what the collector has not taken back
// (sync.Pool): at most the last fetches' batches, which are the memory fetching uses anyway.
type fetchPool struct {
	bytes sync.Pool // of []byte, zeroed by franz-go before it is put back
	recs  sync.Pool // of []kgo.Record, zeroed by Recycle
}

var (
	_ kgo.PoolDecompressBytes = (*fetchPool)(nil)
	_ kgo.PoolRecords         = (*fetchPool)(nil)
)

// GetDecompressBytes returns a buffer to decompress into: only its capacity counts; when it
// is short (or nil, the pool empty) franz-go decompresses into a new one, which it puts back
// instead.
func (p *fetchPool) GetDecompressBytes([]byte, kgo.CompressionCodecType) []byte {
	b, _ := p.bytes.Get().([]byte)
	return b
}

// PutDecompressBytes takes back a buffer whose records were all recycled.
func (p *fetchPool) PutDecompressBytes(b []byte) { p.bytes.Put(b[:0]) } //nolint:staticcheck // a slice, boxed once a batch

// GetRecords returns room for n records.
func (p *fetchPool) GetRecords(n int) []kgo.Record {
	if rs, ok := p.recs.Get().([]kgo.Record); ok && cap(rs) >= n {
		return rs[:0]
	}
	return make([]kgo.Record, 0, n)
}

// PutRecords takes back the records of a batch once every one of them was recycled.
func (p *fetchPool) PutRecords(rs []kgo.Record) { p.recs.Put(rs[:0]) } //nolint:staticcheck // as above
