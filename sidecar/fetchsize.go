package sidecar

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Fetch sizing. A fetch asks each partition for about fetchBatches batches of its inlet (the
// room between the queue's low and high water marks), in bytes on the wire: a batch is the
// inlet's batch.max-records records at the wire size per record the fetches so far have
// shown, or its batch.max-bytes, whichever is smaller; and a partition's fetch is never
// more than batch.max-bytes. Kafka bounds a fetch in bytes only, so sized for
// batch.max-bytes alone (1 MiB) a partition's fetch of 200-byte records is some 5,000
// records, 50 batches, all of them queued at once, far past the high water mark of 4.
const (
	fetchBatches = 2
	// minFetchPartitionBytes keeps fetches of small records from becoming many small
	// requests (at 200-byte records, about 4 batches of 100). It is also the size of the
	// first fetches, before any estimate. An inlet whose batch.max-bytes is smaller gets that.
	minFetchPartitionBytes = 64 << 10
	// minFetchBytes is the floor of a whole fetch response (franz-go's FetchMaxBytes), over
	// every partition of one broker.
	minFetchBytes = 4 << 20
	// recordBatchOverhead is the header of a Kafka record batch (format v2), which the
	// metrics of a fetched batch leave out but the broker counts.
	recordBatchOverhead = 61
)

// fetchSizer estimates each inlet topic's wire bytes per record from the batches the client
// reads (a franz-go hook, called on its fetch goroutines) and sizes the partitions' fetches
// from it after each poll (on the poller's goroutine).
type fetchSizer struct {
	mu     sync.Mutex
	topics map[string]*fetchTopic // fixed at construction
	part   int32                  // the partition fetch size the client has; poller only
}

// fetchTopic is one inlet topic's limits and what its fetched batches have shown since the
// last poll.
type fetchTopic struct {
	maxRecords, maxBytes int
	bytes, records       int64 // guarded by fetchSizer.mu
	part                 int32 // this topic's partition fetch size; poller only
}

// newFetchSizer returns the sizer of the inlets, at its initial partition fetch size.
func newFetchSizer(inlets []Inlet) *fetchSizer {
	f := &fetchSizer{topics: map[string]*fetchTopic{}}
	for _, in := range inlets {
		t := &fetchTopic{maxRecords: max(in.MaxRecords, 1), maxBytes: max(in.MaxBytes, 1)}
		t.part = t.size(0)
		if old := f.topics[in.Topic]; old != nil { // two inlets of one topic: the wider limits
			t.maxRecords, t.maxBytes, t.part = max(t.maxRecords, old.maxRecords), max(t.maxBytes, old.maxBytes), max(t.part, old.part)
		}
		f.topics[in.Topic] = t
		f.part = max(f.part, t.part)
	}
	f.part = max(f.part, 1)
	return f
}

// size is the partition fetch size for wire bytes per record perRecord (0: unknown).
func (t *fetchTopic) size(perRecord int64) int32 {
	want := int64(fetchBatches) * min(int64(t.maxRecords)*perRecord, int64(t.maxBytes))
	return int32(min(max(want, minFetchPartitionBytes), int64(t.maxBytes)))
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (f *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	t := f.topics[topic]
	if t == nil || m.NumRecords <= 0 {
		return
	}
	f.mu.Lock()
	t.bytes += int64(m.CompressedBytes + recordBatchOverhead)
	t.records += int64(m.NumRecords)
	f.mu.Unlock()
}

// opts are the client options of the initial sizes.
func (f *fetchSizer) opts() []kgo.Opt {
	return []kgo.Opt{
		kgo.WithHooks(f),
		kgo.FetchMaxPartitionBytes(f.part),
		kgo.FetchMaxBytes(max(minFetchBytes, f.part)),
	}
}

// update sizes the client's next fetches from the batches read since the last update.
// Called by the poller after each poll.
func (f *fetchSizer) update(cl *kgo.Client) {
	part := int32(1)
	f.mu.Lock()
	for _, t := range f.topics {
		if t.records > 0 {
			t.part = t.size(t.bytes / t.records)
			t.bytes, t.records = 0, 0
		}
		part = max(part, t.part)
	}
	f.mu.Unlock()
	if part != f.part {
		f.part = part
		cl.UpdateFetchMaxBytes(max(minFetchBytes, part), part)
	}
}
