package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// defaultStartLimit is Start.max_message_bytes against outlets at Kafka's default
// message.max.bytes (1048588): that limit less a record batch's framing (65 bytes) and the
// room a record's Kafka framing may take over its Emit's (64 bytes).
const defaultStartLimit = 1048588 - 65 - 64

// padEcho is echo with every output's value padded to size bytes.
func padEcho(size int) func(*call) error {
	return func(c *call) error {
		for _, r := range c.Batch.Records {
			v := append(bytes.Clone(r.Record.Value), '!')
			v = append(v, bytes.Repeat([]byte("p"), max(size-len(v), 0))...)
			if err := c.Emit("out", &flowv1.Record{Key: r.Record.Key, Value: v}); err != nil {
				return err
			}
		}
		return c.Ack()
	}
}

// alterLimit sets topic's max.message.bytes with kadm, as an operator would while the
// sidecar runs.
func alterLimit(t *testing.T, b *testkit.Broker, topic string, n int) {
	t.Helper()
	resp, err := kadm.NewClient(b.Admin).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kmsg.StringPtr(fmt.Sprint(n))}}, topic)
	if err == nil {
		_, err = resp.On(topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("alter max.message.bytes of %s to %d: %v", topic, n, err)
	}
}

// TestRecordsAtDefaults: 400 records whose outputs are 12 KB, on one partition, against a
// broker and topics at their defaults (message.max.bytes 1048588), are all delivered. A batch
// of 100 such records emits 1.2 MB: the produce batches must stay under the outlet's limit,
// and Start tells the process what one record may be.
func TestRecordsAtDefaults(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	const n, size = 400, 12014
	f := newProcess(t, padEcho(size))
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 1, n)...)
	r := start(t, e.config(t))
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(1, n)) })
	if got := len(b.ReadAll(t, out)); got < n {
		t.Errorf("the outlet holds %d records; want all %d", got, n)
	}
	got := f.Starts()[0].GetMaxMessageBytes()
	if got != defaultStartLimit {
		t.Errorf("Start.max_message_bytes = %d; want %d (Kafka's default max.message.bytes less the framing)", got, defaultStartLimit)
	}
	if errs := r.records.Errors(streamFailedMsg); len(errs) > 0 {
		t.Errorf("the stream failed %d times, first with %v; want no failure", len(errs), errs[0])
	}
}

// TestFanOutAtDefaults: records that each fan out into several outputs of 512 KiB, over four
// partitions, more than a produce batch may hold at the outlet's default limit: every output
// is delivered.
func TestFanOutAtDefaults(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 4), b.Topic(t, "out", 4)
	const n, fan, size = 8, 6, 512 << 10
	value := bytes.Repeat([]byte("f"), size)
	f := newProcess(t, func(c *call) error {
		for _, r := range c.Batch.Records {
			for i := range fan {
				if err := c.Emit("out", &flowv1.Record{Key: r.Record.Key, Value: value, Headers: []*flowv1.Header{{Key: "n", Value: fmt.Append(nil, i)}}}); err != nil {
					return err
				}
			}
		}
		return c.Ack()
	})
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 4, n)...)
	r := start(t, e.config(t))
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(4, n)) })
	if got := len(b.ReadAll(t, out)); got < n*fan {
		t.Errorf("the outlet holds %d records; want all %d outputs", got, n*fan)
	}
	if errs := r.records.Errors(streamFailedMsg); len(errs) > 0 {
		t.Errorf("the stream failed %d times, first with %v; want no failure", len(errs), errs[0])
	}
}

// TestLimitLoweredMidRun: an outlet topic's max.message.bytes lowered while the sidecar runs
// (below the batches it was writing, above every record) is learned from the broker's
// MESSAGE_TOO_LARGE: the sidecar reads the limit again and writes the refused emits in smaller
// batches, in the same conversation, in both delivery modes.
func TestLimitLoweredMidRun(t *testing.T) {
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			const first, then, size = 5, 60, 8 << 10
			f := newProcess(t, padEcho(size))
			e := baseEnv(t, b, f, in, out)
			if delivery == "exactly-once" {
				e = eosEnv(t, b, f, in, out, "pod-0")
			}
			group := e["FLOW_CONSUMER_GROUP"]
			r := start(t, e.config(t))
			b.Produce(t, records(in, 1, first)...)
			waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, ends(1, first)) })

			// 64 KiB: each output fits, a batch of sixty does not.
			alterLimit(t, b, out, 64<<10)
			more := records(in, 1, then)
			for i, rec := range more {
				rec.Value = fmt.Appendf(nil, "after-%d", i)
			}
			b.Produce(t, more...)
			waitFor(t, "every record committed", func() bool { return allCommitted(t, b, group, in, ends(1, first+then)) })
			seen := map[string]bool{}
			for _, rec := range b.ReadAll(t, out) {
				seen[string(rec.Value)] = true
			}
			if len(seen) != first+then {
				t.Errorf("the outlet holds %d distinct outputs; want %d", len(seen), first+then)
			}
			if r.sc.Stats().LimitRefusals == 0 {
				t.Errorf("Stats().LimitRefusals = 0: the lowered limit was never met, so the test proves nothing")
			}
			if errs := r.records.Errors(streamFailedMsg); len(errs) > 0 {
				t.Errorf("the stream failed with %v; want the refused batch split in the same conversation", errs[0])
			}
			if got := r.sc.Conversations(); got != 1 {
				t.Errorf("conversations = %d; want 1", got)
			}
		})
	}
}

// TestLimitLoweredBelowARecord: an outlet topic's limit lowered below one record's output
// cannot be met by splitting: the stream fails naming the topic and its limit, nothing of the
// batch is committed and the partition stalls there, in both delivery modes.
func TestLimitLoweredBelowARecord(t *testing.T) {
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			const first, size, limit = 3, 8 << 10, 4 << 10
			f := newProcess(t, padEcho(size))
			e := baseEnv(t, b, f, in, out)
			if delivery == "exactly-once" {
				e = eosEnv(t, b, f, in, out, "pod-0")
			}
			e["FLOW_STALL_WARNING_AFTER"] = "20ms"
			group := e["FLOW_CONSUMER_GROUP"]
			r := start(t, e.config(t))
			b.Produce(t, records(in, 1, first)...)
			waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, ends(1, first)) })

			alterLimit(t, b, out, limit)
			b.Produce(t, records(in, 1, 2)...)
			waitFor(t, "the stall warned", r.stallWarned)
			var named error
			for _, err := range r.records.Errors(streamFailedMsg) {
				if errors.Is(err, sidecar.ErrEmitTooLarge) && errors.Is(err, kerr.MessageTooLarge) {
					named = err
					break
				}
			}
			switch {
			case named == nil:
				t.Errorf("no stream failure matches ErrEmitTooLarge and kerr.MessageTooLarge:\n%v", r.records.Errors(streamFailedMsg))
			case !strings.Contains(named.Error(), "topic "+out) || !strings.Contains(named.Error(), fmt.Sprintf("max.message.bytes is %d", limit)):
				t.Errorf("the failure %q does not name topic %s and its limit %d", named, out, limit)
			}
			if c := committed(t, b, group, in); c[0] != first {
				t.Errorf("committed offset %d; want %d (nothing of the refused batch)", c[0], first)
			}
		})
	}
}

// TestLimitUnreadable: where DescribeConfigs is refused (no permission), the sidecar assumes
// Kafka's default limit, says so once however many conversations start, and flows.
func TestLimitUnreadable(t *testing.T) {
	b := testkit.NewBroker(t, testkit.BrokerOptions{KfakeOnly: true, Client: []kgo.Opt{kgo.ProducerLinger(0)}})
	in := b.Topic(t, "in", 1)
	// A raised limit the sidecar may not read: what it assumes is the default, not this.
	out := b.Topic(t, "out", 1, "max.message.bytes", "8388608")
	b.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: out, Err: kerr.TopicAuthorizationFailed, Count: -1})
	f := newProcess(t, func(c *call) error {
		if c.Conv == 1 {
			return c.Fail("a second conversation, please")
		}
		return echo(c)
	})
	e := baseEnv(t, b, f, in, out)
	b.Produce(t, records(in, 1, 3)...)
	r := start(t, e.config(t))
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(1, 3)) })
	starts := f.Starts()
	for i, s := range starts {
		if s.GetMaxMessageBytes() != defaultStartLimit {
			t.Errorf("Start %d: max_message_bytes = %d; want %d, from Kafka's default limit", i+1, s.GetMaxMessageBytes(), defaultStartLimit)
		}
	}
	said := r.records.Errors("cannot read an outlet topic's max.message.bytes; assuming Kafka's default")
	if len(starts) < 2 || len(said) != 1 || !errors.Is(said[0], kerr.TopicAuthorizationFailed) {
		t.Errorf("%d conversations, the assumption logged %d times (%v); want at least 2, and once, with TOPIC_AUTHORIZATION_FAILED", len(starts), len(said), said)
	}
}

// TestLimitFromBrokerConfig: an outlet topic that sets no max.message.bytes takes the
// broker's message.max.bytes, lowered here, and Start tells the process what one record may
// be under it; a topic's own setting wins over the broker's.
func TestLimitFromBrokerConfig(t *testing.T) {
	const broker, topic = 512 << 10, 256 << 10
	b := testkit.NewBroker(t, testkit.BrokerOptions{KfakeOnly: true, Client: []kgo.Opt{kgo.ProducerLinger(0)},
		Kfake: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(broker)})}})
	for _, c := range []struct {
		name    string
		configs []string
		want    uint32
	}{
		{"broker's", nil, broker - 65 - 64},
		{"topic's", []string{"max.message.bytes", fmt.Sprint(topic)}, topic - 65 - 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1, c.configs...)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			b.Produce(t, records(in, 1, 1)...)
			start(t, e.config(t))
			waitFor(t, "the record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(1, 1)) })
			got := f.Starts()[0].GetMaxMessageBytes()
			if got != c.want {
				t.Errorf("Start.max_message_bytes = %d; want %d", got, c.want)
			}
		})
	}
}
