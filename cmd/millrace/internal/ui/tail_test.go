package ui

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// TestTailReadsOnlyTheLastRecords: a page opened on a topic of many records reads only the
// last recordsPerTopic records of each partition, keeps the topic's last recordsPerTopic across
// its partitions (by time), counts the topic's records by its offsets, and a round after reads
// only what came since.
func TestTailReadsOnlyTheLastRecords(t *testing.T) {
	const parts, n = 3, 3000
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(i % parts), Timestamp: base.Add(time.Duration(i) * time.Millisecond), Value: fmt.Appendf(nil, "%d", i)})
		}
		if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, n) // before the page opens

	m, tl := newTestTail(t, brokers, "in")
	if got := tl.fetched.Load(); got != 0 {
		t.Errorf("before any round: %d records fetched; want none (no page open, nothing read)", got)
	}
	check := func(round string, total int, maxFetched int64) {
		t.Helper()
		if got := tl.fetched.Load(); got > maxFetched {
			t.Errorf("%s: %d records fetched; want at most %d (the tails only)", round, got, maxFetched)
		}
		v, _ := m.records("in", "")
		if len(v.Records) != recordsPerTopic {
			t.Fatalf("%s: %d records shown; want %d", round, len(v.Records), recordsPerTopic)
		}
		for i, r := range v.Records { // oldest first: the topic's last records, across partitions
			if want := fmt.Sprint(total - recordsPerTopic + i); string(r.Value) != want {
				t.Fatalf("%s: record %d shown is %s (partition %d offset %d); want %s", round, i, r.Value, r.Partition, r.Offset, want)
			}
		}
		if v.Topics[0].Total != int64(total) {
			t.Errorf("%s: topic total %d; want %d (its offsets)", round, v.Topics[0].Total, total)
		}
	}
	tl.round(ctx)
	check("first round", n, parts*recordsPerTopic)
	fetched := tl.fetched.Load()
	tl.round(ctx)
	if got := tl.fetched.Load(); got != fetched {
		t.Errorf("a round with nothing new fetched %d records; want none", got-fetched)
	}
	produce(n, n+10)
	tl.round(ctx)
	check("after 10 more", n+10, fetched+10)

	// a dead letter's source record, long out of the ring: missing, fetched on its own, shown
	if _, missing := m.records("in", "in/1/0"); !missing {
		t.Fatal("in/1/0 (the topic's second record) not missing from the last records")
	}
	s := &Server{m: m, feed: &feed{tail: tl}}
	v := s.records(httptest.NewRequest("GET", "/api/records?topic=in&record=in/1/0", nil))
	if v.Asked == nil || v.Asked.ID() != "in/1/0" || string(v.Asked.Value) != "1" {
		t.Fatalf("records view asking for in/1/0: asked %+v; want in/1/0, the second record produced (1)", v.Asked)
	}
	fetched = tl.fetched.Load()
	if v := s.records(httptest.NewRequest("GET", "/api/records?topic=in&record=in/1/0", nil)); v.Asked == nil || tl.fetched.Load() != fetched {
		t.Errorf("asked again: asked %+v, %d more records fetched; want it kept, none fetched", v.Asked, tl.fetched.Load()-fetched)
	}
	for _, bad := range []string{"in/x/0", "in/1", "in/1/-3", "in/7/0"} { // no such record: nothing fetched, nothing shown
		if v := s.records(httptest.NewRequest("GET", "/api/records?topic=in&record="+bad, nil)); v.Asked != nil {
			t.Errorf("asking for %s: asked %+v; want none", bad, v.Asked)
		}
	}
	if v, missing := m.records("in", "in/0/999"); missing || v.Asked != nil {
		t.Errorf("in/0/999, among the last records: missing %v, asked %+v; want neither", missing, v.Asked)
	}
}

// TestTailReadCommitted: a topic written in transactions is read to its last stable offset,
// past the transaction markers, and an aborted transaction's records are never shown.
func TestTailReadCommitted(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("ui-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a round that never ends fails, not hangs
	defer cancel()
	write := func(commit kgo.TransactionEndTry, from, to int) {
		t.Helper()
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if err := pr.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := pr.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	write(kgo.TryCommit, 0, 5)
	write(kgo.TryAbort, 100, 103)
	m, tl := newTestTail(t, brokers, "tx")
	tl.round(ctx)
	write(kgo.TryCommit, 5, 7)
	tl.round(ctx)
	if ctx.Err() != nil {
		t.Fatal("a round did not reach the last stable offset")
	}
	var got []string
	v, _ := m.records("tx", "")
	for _, r := range v.Records {
		got = append(got, string(r.Value))
	}
	if want := []string{"0", "1", "2", "3", "4", "5", "6"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("records shown %v; want the committed ones, %v", got, want)
	}
}

// newTestTail returns a run's model with one streamlet reading topic, and the page's tail
// reader of that topic, closed when the test ends.
func newTestTail(t *testing.T, brokers []string, topic string) (*model, *tail) {
	t.Helper()
	m := newModel(time.Now)
	m.setRun("p", []local.StreamletInfo{{Name: "s", Inlets: []local.Port{{Name: "in", Topic: topic}}}}, []string{topic})
	tl, err := newTail(brokers, []string{topic}, func(context.Context, *kgo.Record) {}, m, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.close)
	return m, tl
}
