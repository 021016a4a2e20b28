package sidecar_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// incompressible returns n random bytes: no compression shrinks them under a size limit.
func incompressible(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestLargeEmit: an emit under Start.max_message_bytes but over franz-go's default producer
// batch size (about 1 MB) is produced and committed, when the outlet topic accepts records
// that large (max.message.bytes): the client must not refuse what the protocol allows.
func TestLargeEmit(t *testing.T) {
	b := newBroker(t)
	in := b.Topic(t, "in", 1)
	out := b.Topic(t, "out", 1)
	setTopicConfig(t, b, out, "max.message.bytes", "8388608")
	big := incompressible(2 << 20)
	f := newProcess(t, func(c *call) error {
		for range c.Batch.Records {
			if err := c.Emit("out", &flowv1.Record{Value: big}); err != nil {
				return err
			}
		}
		return c.Ack()
	})
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 1, 1)...)
	r := start(t, e.config(t))
	waitFor(t, "the record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(1, 1)) })
	got := b.ReadN(t, out, 1, waitTimeout)
	if len(got[0].Value) != len(big) {
		t.Errorf("outlet record of %d bytes; want %d", len(got[0].Value), len(big))
	}
	limit := f.Starts()[0].GetMaxMessageBytes()
	if limit != 4<<20 {
		t.Errorf("Start.max_message_bytes = %d; want 4 MiB, FLOW_MAX_MESSAGE_BYTES (the outlet accepts more)", limit)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil after shutdown", err)
	}
}

// TestOversizedEmitKeepsTheCause: an emit larger than its outlet topic accepts (here a topic at
// Kafka's default limit), which a process that ignores Start.max_message_bytes sends anyway,
// fails the stream before anything is written, with an error that names the topic and its
// limit and whose chain holds ErrEmitTooLarge and the broker's MESSAGE_TOO_LARGE; nothing of
// the batch is committed.
func TestOversizedEmitKeepsTheCause(t *testing.T) {
	b := newBroker(t)
	in := b.Topic(t, "in", 1)
	out := b.Topic(t, "out", 1)
	big := incompressible(2 << 20)
	f := newProcess(t, func(c *call) error {
		if err := c.Emit("out", &flowv1.Record{Value: big}); err != nil {
			return err
		}
		return c.Ack()
	})
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 1, 1)...)
	r := start(t, e.config(t))
	var failure error
	waitFor(t, "a failed stream", func() bool {
		errs := r.records.Errors(streamFailedMsg)
		if len(errs) > 0 {
			failure = errs[0]
		}
		return failure != nil
	})
	if !errors.Is(failure, sidecar.ErrEmitTooLarge) || !errors.Is(failure, kerr.MessageTooLarge) {
		t.Errorf("the stream failed with %v; want an error matching sidecar.ErrEmitTooLarge and kerr.MessageTooLarge", failure)
	}
	if msg := failure.Error(); !strings.Contains(msg, "topic "+out) || !strings.Contains(msg, "max.message.bytes is 1048588") {
		t.Errorf("the failure %q does not name topic %s and its limit 1048588", msg, out)
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); len(got) != 0 {
		t.Errorf("committed %v; want nothing after the emit was refused", got)
	}
}

// streamFailedMsg is the message the sidecar logs a failed stream with.
const streamFailedMsg = "stream failed; redelivering from the last commit after a backoff"

func setTopicConfig(t *testing.T, b *testkit.Broker, topic, name, value string) {
	t.Helper()
	alterTopicConfig(t, b, topic, kadm.AlterConfig{Op: kadm.SetConfig, Name: name, Value: kadm.StringPtr(value)})
}

// deleteTopicConfig removes topic's own value of name, so the broker's default holds again.
func deleteTopicConfig(t *testing.T, b *testkit.Broker, topic, name string) {
	t.Helper()
	alterTopicConfig(t, b, topic, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: name})
}

func alterTopicConfig(t *testing.T, b *testkit.Broker, topic string, c kadm.AlterConfig) {
	t.Helper()
	resp, err := kadm.NewClient(b.Admin).AlterTopicConfigs(context.Background(), []kadm.AlterConfig{c}, topic)
	if err == nil {
		_, err = resp.On(topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("alter %s of %s: %v", c.Name, topic, err)
	}
}
