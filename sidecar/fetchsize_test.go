package sidecar_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchSizedByRecords holds every batch while far more small records wait than a
// partition may buffer, with batches bounded by count (50 records of 1 KiB) far below their
// byte limit (the default 1 MiB): each partition's fetch is sized from the records' size to
// about two batches, not to 1 MiB, so what the sidecar buffers stays near the high water
// mark of 4 batches instead of a whole 1 MiB fetch per partition.
func TestFetchSizedByRecords(t *testing.T) {
	b := newBroker(t)
	const parts, perPart, size, maxRecords = 4, 1500, 1024, 50
	const producerBatch = 16 << 10
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(producerBatch), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	var rs []*kgo.Record
	for i := range parts * perPart {
		rs = append(rs, &kgo.Record{Topic: in, Partition: int32(i % parts), Value: randomBytes(size)})
	}
	if err := producer.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	f := newProcess(t, nil)
	f.async = true
	f.onBatch = func(c *call) error { <-release; return echo(c) }
	e := baseEnv(t, b, f, in, out)
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "50"
	r := start(t, e.config(t))
	waitFor(t, "every partition paused", func() bool { return r.sc.Stats().Pauses >= parts })
	close(release)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = perPart
	}
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, want) })
	st := r.sc.Stats()
	// Per partition: the high water mark (4 batches), one fetch of two batches (its first
	// fetches are 64 KiB, less), and one producer batch Kafka returns whole; with 10% for
	// the records' framing. Fetches of 1 MiB would buffer the whole 1.5 MiB a partition holds.
	batch := int64(maxRecords * size)
	bound := int64(parts) * (4*batch + 2*batch + producerBatch) * 11 / 10
	t.Logf("peak buffered %d bytes (bound %d) of %d written; %d pauses", st.PeakBufferedBytes, bound, parts*perPart*size, st.Pauses)
	if st.PeakBufferedBytes > bound {
		t.Errorf("peak buffered = %d bytes; want at most %d", st.PeakBufferedBytes, bound)
	}
}
