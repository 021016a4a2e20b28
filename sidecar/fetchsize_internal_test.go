package sidecar

import "testing"

// TestFetchTopicSize: two batches at the estimated wire size, never under the floor of
// minFetchPartitionBytes nor over the inlet's batch.max-bytes (which wins over the floor).
func TestFetchTopicSize(t *testing.T) {
	for _, c := range []struct {
		maxRecords, maxBytes int
		perRecord            int64
		want                 int32
	}{
		{100, 1 << 20, 0, minFetchPartitionBytes},   // no estimate yet: the floor
		{100, 1 << 20, 200, minFetchPartitionBytes}, // 2 × 100 × 200 B = 40,000 B: the floor
		{100, 1 << 20, 1000, 200_000},               // 2 batches of 100 KB
		{100, 1 << 20, 10 << 10, 1 << 20},           // a batch is 1 MiB by bytes: no more than that
		{100, 16 << 10, 200, 16 << 10},              // batch.max-bytes under the floor wins
		{1000, 4 << 20, 1 << 20, 4 << 20},           // large records: batch.max-bytes
		{1, 1 << 20, 5, minFetchPartitionBytes},     // one record a batch
	} {
		ft := &fetchTopic{maxRecords: c.maxRecords, maxBytes: c.maxBytes}
		if got := ft.size(c.perRecord); got != c.want {
			t.Errorf("size(%d) with %d records, %d bytes a batch = %d; want %d", c.perRecord, c.maxRecords, c.maxBytes, got, c.want)
		}
	}
}
