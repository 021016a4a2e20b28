package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

func TestHappyPath(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 4), b.Topic(t, "out", 4)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	const n = 200
	b.Produce(t, records(in, 4, n)...)
	cfg := e.config(t)
	r := start(t, cfg)

	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(4, n)) })
	if _, err := os.Stat(e["FLOW_READINESS_FILE"]); err != nil {
		t.Errorf("readiness file while conversing: %v; want it present", err)
	}

	got := b.ReadN(t, out, n, waitTimeout)
	byValue := map[string]*kgo.Record{}
	for _, rec := range got {
		byValue[string(rec.Value)] = rec
	}
	for i, want := range records(in, 4, n) {
		rec, ok := byValue[string(want.Value)+"!"]
		if !ok {
			t.Errorf("output for input %d (%q) missing", i, want.Value)
			continue
		}
		if (want.Key == nil) != (rec.Key == nil) || string(want.Key) != string(rec.Key) {
			t.Errorf("output %d key = %q (nil %v); want %q (nil %v)", i, rec.Key, rec.Key == nil, want.Key, want.Key == nil)
		}
		if len(rec.Headers) != 2 || rec.Headers[0].Key != "h" || string(rec.Headers[0].Value) != fmt.Sprint(i) {
			t.Errorf("output %d headers = %v; want h=%d then conv", i, rec.Headers, i)
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil after shutdown", err)
	}
	if _, err := os.Stat(e["FLOW_READINESS_FILE"]); !os.IsNotExist(err) {
		t.Errorf("readiness file after shutdown: %v; want it removed", err)
	}

	st := f.Starts()[0]
	var config map[string]any
	if err := json.Unmarshal([]byte(st.ConfigJson), &config); err != nil {
		t.Fatalf("Start.config_json %q: %v", st.ConfigJson, err)
	}
	if config["suffix"] != "!" || config["min-rooms"] != float64(2) {
		t.Errorf("Start.config_json = %s; want suffix \"!\" and min-rooms 2", st.ConfigJson)
	}
	if st.Pipeline != "shop" || st.Streamlet != "upper" || st.ConversationId == "" || st.MaxMessageBytes != defaultStartLimit {
		t.Errorf("Start = %v; want pipeline shop, streamlet upper, a conversation id, max_message_bytes %d (what a topic at Kafka's default limit accepts for one record)", st, defaultStartLimit)
	}
	if len(st.Inlets) != 1 || st.Inlets[0].Port != "in" || st.Inlets[0].Topic != in || len(st.Outlets) != 1 || st.Outlets[0].Topic != out {
		t.Errorf("Start bindings = %v %v; want in=%s out=%s", st.Inlets, st.Outlets, in, out)
	}
}

// TestOneBatchInFlightPerPartition answers batches concurrently and at random speeds, and
// measures the batches in flight per partition (at most one) and across partitions.
func TestOneBatchInFlightPerPartition(t *testing.T) {
	b := newBroker(t)
	const parts, n = 4, 2000
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	var (
		inflight   = map[int32]int{}
		maxPerPart int
		total      int
		maxTotal   int
		nextOffset = map[int32]int64{}
		problems   []string
		mu         sync.Mutex // guards the above
	)
	f := newProcess(t, nil)
	f.Async = true
	f.OnBatch = func(c *call) error {
		p := c.Batch.Partition
		mu.Lock()
		inflight[p]++
		total++
		maxPerPart = max(maxPerPart, inflight[p])
		maxTotal = max(maxTotal, total)
		for _, r := range c.Batch.Records {
			if r.Offset != nextOffset[p] {
				problems = append(problems, fmt.Sprintf("partition %d: offset %d; want %d", p, r.Offset, nextOffset[p]))
			}
			nextOffset[p] = r.Offset + 1
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inflight[p]--
			total--
			mu.Unlock()
		}()
		return echo(c)
	}
	e := baseEnv(t, b, f, in, out)
	r := start(t, e.config(t))
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		if err := b.Admin.ProduceSync(context.Background(), records(in, parts, n)...).FirstErr(); err != nil {
			t.Errorf("produce: %v", err)
		}
	}()
	<-produced
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(parts, n)) })
	r.stop(t)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("measured: at most %d batch(es) in flight per partition, %d across %d partitions; %d batches for %d records", maxPerPart, maxTotal, parts, len(f.Batches()), n)
	if maxPerPart != 1 {
		t.Errorf("batches in flight on one partition = %d; want 1", maxPerPart)
	}
	for _, p := range problems {
		t.Errorf("offset order: %s", p)
	}
	if got := f.Conversations(); got != 1 {
		t.Errorf("conversations = %d; want 1", got)
	}
}

func TestBatchCaps(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxRecords string
		maxBytes   string
		value      int
	}{
		{name: "records", maxRecords: "7", value: 10},
		{name: "bytes", maxBytes: "2000", value: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			if tc.maxRecords != "" {
				e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = tc.maxRecords
			}
			if tc.maxBytes != "" {
				e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = tc.maxBytes
			}
			const n = 60
			var rs []*kgo.Record
			for i := range n {
				rs = append(rs, &kgo.Record{Topic: in, Value: []byte(strings.Repeat("x", tc.value-len(fmt.Sprint(i))) + fmt.Sprint(i))})
			}
			b.Produce(t, rs...) // all there before the sidecar starts: the first batches are full
			start(t, e.config(t))
			waitFor(t, "every record committed", func() bool {
				return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: n})
			})
			var sizes []int
			full := 0
			for _, bt := range f.Batches() {
				sizes = append(sizes, len(bt.Records))
				bytes := 0
				for _, r := range bt.Records {
					bytes += len(r.Record.Value) + 20
				}
				if tc.maxRecords != "" && len(bt.Records) > 7 {
					t.Errorf("batch %d has %d records; want at most 7", bt.BatchId, len(bt.Records))
				}
				if tc.maxRecords != "" && len(bt.Records) == 7 {
					full++
				}
				if tc.maxBytes != "" && len(bt.Records) > 1 && len(bt.Records)*tc.value > 2000 {
					t.Errorf("batch %d holds %d records of %d bytes; want at most 2000 bytes", bt.BatchId, len(bt.Records), tc.value)
				}
				if tc.maxBytes != "" && len(bt.Records) >= 5 {
					full++
				}
			}
			t.Logf("batch sizes: %v", sizes)
			if full == 0 {
				t.Errorf("no batch reached the cap (sizes %v); want the first batches full", sizes)
			}
		})
	}
}

func TestQuietStreamSendsAtOnce(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	batches := make(chan *flowv1.Batch, 10)
	f := newProcess(t, func(c *call) error { batches <- c.Batch; return echo(c) })
	e := baseEnv(t, b, f, in, out)
	start(t, e.config(t))
	<-f.Started
	for i := range 3 {
		b.Produce(t, &kgo.Record{Topic: in, Value: []byte(fmt.Sprint(i))})
		bt := <-batches
		if len(bt.Records) != 1 || bt.Records[0].Offset != int64(i) {
			t.Fatalf("batch for a lone record %d = %v; want that record alone", i, bt)
		}
	}
}

// sortedOffsets is for readable failure messages.
func sortedOffsets(m map[int32]int64) string {
	var ps []int
	for p := range m {
		ps = append(ps, int(p))
	}
	sort.Ints(ps)
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%d:%d", p, m[int32(p)]))
	}
	return strings.Join(s, " ")
}

var _ = context.Background
