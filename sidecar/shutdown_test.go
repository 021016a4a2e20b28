package sidecar_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestShutdown stops the sidecar while a batch is with the process: Stop is sent, the stream
// half-closed, the process finishes the batch, and its emits are produced and its offsets
// committed before Run returns nil.
func TestShutdown(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	held := make(chan *call, 1)
	answered := make(chan struct{})
	f := newProcess(t, nil)
	f.Async = true
	f.OnBatch = func(c *call) error { held <- c; <-answered; return nil }
	e := baseEnv(t, b, f, in, out)
	r := start(t, e.config(t))
	b.Produce(t, records(in, 1, 5)...)
	c := <-held
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop(t) }()
	waitFor(t, "Stop at the process", func() bool { return f.Stops() == 1 })
	if err := echo(c); err != nil {
		t.Fatalf("answering after Stop: %v", err)
	}
	close(answered)
	if err := <-stopped; err != nil {
		t.Errorf("Run() = %v; want nil after a graceful shutdown", err)
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); got[0] != int64(len(c.Batch.Records)) {
		t.Errorf("committed after shutdown = %v; want %d (the batch finished after Stop)", got, len(c.Batch.Records))
	}
	if got := b.ReadN(t, out, len(c.Batch.Records), waitTimeout); len(got) != len(c.Batch.Records) {
		t.Errorf("outputs = %d; want %d", len(got), len(c.Batch.Records))
	}
}

// TestShutdownBounded stops the sidecar while the process never answers: Run still returns
// within FLOW_SHUTDOWN_TIMEOUT, and nothing is committed.
func TestShutdownBounded(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, func(c *call) error { <-c.Done(); return nil })
	e := baseEnv(t, b, f, in, out)
	e["FLOW_SHUTDOWN_TIMEOUT"] = "100ms"
	r := start(t, e.config(t))
	b.Produce(t, records(in, 1, 5)...)
	waitFor(t, "a batch at the process", func() bool { return len(f.Batches()) == 1 })
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	if got := r.failures(sidecar.CauseStopTimeout); len(got) == 0 {
		t.Errorf("stream failures = %v; want one of cause %s (the shutdown wait ran out)", r.failures(""), sidecar.CauseStopTimeout)
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); len(got) != 0 {
		t.Errorf("committed = %v; want nothing for an unanswered batch", got)
	}
}

// TestRecordTooLarge puts a record larger than the message limit at offset 2: the records
// before it are processed and committed, then the stream fails naming its topic, partition
// and offset, and the record is never sent to the process.
func TestRecordTooLarge(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_MAX_MESSAGE_BYTES"] = "64Ki"
	e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = "32Ki"
	e["FLOW_STALL_WARNING_AFTER"] = "1ms"
	b.Produce(t,
		&kgo.Record{Topic: in, Value: []byte("a")},
		&kgo.Record{Topic: in, Value: []byte("b")},
		&kgo.Record{Topic: in, Value: bytes.Repeat([]byte("c"), 100<<10)},
		&kgo.Record{Topic: in, Value: []byte("d")},
	)
	r := start(t, e.config(t))
	tooLarge := func() []error { return wrapping(r.failures(""), sidecar.ErrRecordTooLarge) }
	waitFor(t, "two failed conversations", func() bool { return len(tooLarge()) >= 2 })
	waitFor(t, "the stall warned", r.stallWarned)
	r.stop(t)
	// The error is for a person: it must name the record.
	if want := "topic " + in + " partition 0 offset 2"; !strings.Contains(tooLarge()[0].Error(), want) {
		t.Errorf("the failure %v; want it to name %q", tooLarge()[0], want)
	}
	for _, bt := range f.Batches() {
		for _, rec := range bt.Records {
			if rec.Offset >= 2 {
				t.Errorf("the process got offset %d; want nothing from the oversized record on", rec.Offset)
			}
		}
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); got[0] != 2 {
		t.Errorf("committed = %v; want 2 (the records before the oversized one)", got)
	}
	_ = out
	_ = flowv1.Record{}
}
