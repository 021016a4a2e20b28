package sidecar_test

import "testing"

// TestFetchSizedByRecords holds every batch while far more small records wait than a
// partition may buffer, with batches bounded by count (50 records of 1 KiB) far below their
// byte limit (the default 1 MiB): each partition's fetch is sized from the records' size to
// about two batches, not to 1 MiB, so what the sidecar buffers stays near the high water
// mark of 4 batches instead of a whole 1 MiB fetch per partition.
func TestFetchSizedByRecords(t *testing.T) {
	const parts, perPart, size, maxRecords = 4, 1500, 1024, 50
	const producerBatch = 16 << 10
	r := heldBacklog(t, parts, perPart, size, producerBatch, func(e env) { e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "50" })
	st := r.sc.Stats()
	// Per partition: the high water mark (4 batches), the records written and waiting for
	// their commit (FLOW_COMMIT_INTERVAL; up to 4 batches more by count), one fetch of two
	// batches (its first fetches are 64 KiB, less), and one producer batch Kafka returns whole;
	// with 10% for the records' framing. Fetches of 1 MiB would buffer the whole 1.5 MiB a
	// partition holds.
	batch := int64(maxRecords * size)
	bound := int64(parts) * (4*batch + 4*batch + 2*batch + producerBatch) * 11 / 10
	t.Logf("peak buffered %d bytes (bound %d) of %d written; %d pauses", st.PeakBufferedBytes, bound, parts*perPart*size, st.Pauses)
	if st.PeakBufferedBytes > bound {
		t.Errorf("peak buffered = %d bytes; want at most %d", st.PeakBufferedBytes, bound)
	}
}
