package sidecar_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMemoryBounded writes far more than the sidecar may buffer while the process holds
// every batch: each partition's fetching pauses at high water, the sidecar's buffer stays
// bounded, and once the process answers everything is processed.
func TestMemoryBounded(t *testing.T) {
	const parts, perPart, size = 4, 1000, 1024
	const maxBytes = 16 << 10
	r := heldBacklog(t, parts, perPart, size, maxBytes, func(e env) { e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = "16Ki" })
	st := r.sc.Stats()
	// Per partition: the high water mark (4 batches), one fetch of about one batch, and one
	// producer batch Kafka returns whole.
	bound := int64(parts * (4 + 1 + 1) * maxBytes)
	t.Logf("peak buffered %d bytes (bound %d) of %d written; %d pauses", st.PeakBufferedBytes, bound, parts*perPart*size, st.Pauses)
	if st.PeakBufferedBytes > bound {
		t.Errorf("peak buffered = %d bytes; want at most %d", st.PeakBufferedBytes, bound)
	}
	if st.BufferedRecords != 0 {
		t.Errorf("buffered after everything was committed = %d records; want 0", st.BufferedRecords)
	}
}

// heldBacklog writes parts × perPart records of size incompressible bytes to a new topic (in
// producer batches of at most producerBatch bytes), starts a sidecar whose process holds every
// batch until each partition's fetching has paused at high water, then lets it answer and
// waits until every record is committed and counted. set adjusts the sidecar's environment.
func heldBacklog(t *testing.T, parts, perPart, size, producerBatch int, set func(env)) *running {
	t.Helper()
	b := newBroker(t)
	in, out := b.Topic(t, "in", int32(parts)), b.Topic(t, "out", int32(parts))
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(int32(producerBatch)), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
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
	f.Async = true
	f.OnBatch = func(c *call) error { <-release; return echo(c) }
	e := baseEnv(t, b, f, in, out)
	set(e)
	r := start(t, e.config(t))
	waitFor(t, "every partition paused", func() bool { return r.sc.Stats().Pauses >= parts })
	close(release)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = int64(perPart)
	}
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, want) })
	// The broker has the commits before the sidecar counts them and drops the records from its
	// buffer (one critical section, after the commit's response): wait for its count too.
	waitFor(t, "the sidecar to count every record committed", func() bool { return r.sc.Stats().RecordsCommitted >= int64(parts*perPart) })
	return r
}

// randomBytes returns n incompressible bytes, so the fetch limits count what is buffered.
func randomBytes(n int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	b := make([]byte, n)
	rand.NewChaCha8(seed).Read(b)
	return b
}
