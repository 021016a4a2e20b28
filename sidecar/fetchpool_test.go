package sidecar_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchPoolReuse delivers records fetched over many fetches of compressed batches, whose
// memory the sidecar lends franz-go again once it has copied the records out: every output
// still carries its own input's key, value and header, though later fetches were decoded
// into the same memory while the earlier records waited in the queue.
func TestFetchPoolReuse(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
	e := baseEnv(t, b, newProcess(t, echo), in, out)
	r := start(t, e.config(t))
	defer r.stop(t)

	const rounds, perRound = 10, 60
	var want []*kgo.Record
	for i := range rounds {
		rs := make([]*kgo.Record, perRound)
		for j := range rs {
			n := i*perRound + j
			// Values of differing lengths, so a reused buffer holds other bytes where a
			// record's were.
			rs[j] = &kgo.Record{Topic: in, Partition: int32(n % 2), Key: fmt.Appendf(nil, "k%d", n),
				Value:   append(fmt.Appendf(nil, "v%d-", n), bytes.Repeat([]byte{byte('a' + n%26)}, n%97)...),
				Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Append(nil, n)}}}
		}
		b.Produce(t, rs...) // snappy-compressed batches (franz-go's default)
		want = append(want, rs...)
		waitFor(t, fmt.Sprintf("round %d committed", i), func() bool {
			return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(2, (i+1)*perRound))
		})
	}

	got := map[string]*kgo.Record{}
	for _, rec := range b.ReadN(t, out, len(want), waitTimeout) {
		got[string(rec.Key)] = rec
	}
	for n, w := range want {
		rec, ok := got[string(w.Key)]
		switch {
		case !ok:
			t.Errorf("no output for input %d (key %s)", n, w.Key)
		case string(rec.Value) != string(w.Value)+"!":
			t.Errorf("output %d value %q; want %q", n, rec.Value, string(w.Value)+"!")
		case len(rec.Headers) == 0 || rec.Headers[0].Key != "h" || string(rec.Headers[0].Value) != fmt.Sprint(n):
			t.Errorf("output %d headers %v; want h=%d first", n, rec.Headers, n)
		}
	}
}
