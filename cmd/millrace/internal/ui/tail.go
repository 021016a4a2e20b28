package ui

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/kafkalog"
)

// tail reads the last records of the topics a page shows (all but the changelogs), a round at
// a time: once a second while a page is open, once more when the run ends. A round lists each
// partition's end offset (read_committed: the last stable offset) and, for each partition whose
// end moved since the last round, fetches from max(start, end − recordsPerTopic, what it read)
// to that end, nothing more. So the page reads at most recordsPerTopic records a partition a
// second however fast the run writes, instead of every record the run writes (which cost a
// busy run on two cores an eighth of its records/s).
type tail struct {
	cl         *kgo.Client // every partition paused but those a round reads
	adm        *kadm.Client
	topics     []string
	decode     func(context.Context, *kgo.Record)
	m          *model
	fallbackOf map[string]string // a --fallback outlet's topic → its streamlet
	parts      map[string][]int32

	fetched atomic.Int64 // records fetched, ever: what the tests see of the page's cost

	mu     sync.Mutex                 // one round at a time
	pos    map[string]map[int32]int64 // the offset each partition was read to
	closed bool
}

func newTail(brokers, topics []string, decode func(context.Context, *kgo.Record), m *model, fallbackOf map[string]string, log *slog.Logger) (*tail, error) {
	t := &tail{topics: topics, decode: decode, m: m, fallbackOf: fallbackOf, pos: map[string]map[int32]int64{}}
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kafkalog.Option(log.With("component", "ui"), slog.LevelWarn))
	if err != nil {
		return nil, fmt.Errorf("the page's Kafka client: %w", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("the partitions of the run's topics: %w", err)
	}
	// every partition consumed from its end, and paused before the first fetch
	at, parts := map[string]map[int32]kgo.Offset{}, map[string][]int32{}
	ends.Each(func(o kadm.ListedOffset) {
		if at[o.Topic] == nil {
			at[o.Topic] = map[int32]kgo.Offset{}
		}
		at[o.Topic][o.Partition] = kgo.NewOffset().AtEnd()
		parts[o.Topic] = append(parts[o.Topic], o.Partition)
	})
	// FetchMaxWait short: a round waits for nothing but the records it asked for
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(at),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond),
		kafkalog.Option(log.With("component", "ui"), slog.LevelWarn))
	if err != nil {
		return nil, fmt.Errorf("the page's consumer: %w", err)
	}
	cl.PauseFetchPartitions(parts)
	t.cl, t.adm, t.parts = cl, kadm.NewClient(cl), parts
	return t, nil
}

// round reads what each partition gained since the last round, at most its last
// recordsPerTopic records, and gives them to the model oldest first (by timestamp across
// partitions, so its ring keeps the topic's last records). It also counts each topic's records
// (end − start offsets) for the records view. It returns when every partition read reached the
// end offset listed, or ctx ends (the next round goes on from where this one stopped).
func (t *tail) round(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.topics) == 0 {
		return
	}
	starts, err := t.adm.ListStartOffsets(ctx, t.topics...)
	if err != nil {
		return
	}
	ends, err := t.adm.ListCommittedOffsets(ctx, t.topics...)
	if err != nil {
		return
	}
	counts := map[string]int64{}
	want := map[string]map[int32]int64{} // the end offset to read each moved partition to
	from := map[string]map[int32]kgo.EpochOffset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		start := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			start = s.Offset
		}
		counts[o.Topic] += max(0, o.Offset-start)
		read := t.pos[o.Topic][o.Partition]
		if o.Offset < read {
			read = 0 // the topic was made anew (a --data of an earlier run): read its tail again
		}
		if o.Offset <= read {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic], from[o.Topic] = map[int32]int64{}, map[int32]kgo.EpochOffset{}
		}
		want[o.Topic][o.Partition] = o.Offset
		from[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: -1, Offset: max(read, start, o.Offset-recordsPerTopic)}
	})
	t.m.setCounts(counts)
	if len(want) == 0 {
		return
	}
	t.cl.SetOffsets(from)
	t.cl.ResumeFetchPartitions(partitionsOf(want))
	defer func() { t.cl.PauseFetchPartitions(partitionsOf(want)) }() // those a cut-short round did not finish
	var got []*kgo.Record
	for len(want) > 0 {
		fetches := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() || (fetches.NumRecords() == 0 && len(fetches.Errors()) > 0) {
			break // the next round goes on from here
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			t.fetched.Add(1)
			end, ok := want[rec.Topic][rec.Partition]
			if !ok || rec.Offset < from[rec.Topic][rec.Partition].Offset || rec.Offset >= end {
				return // past the end listed (the next round's), or of a stale fetch
			}
			if t.pos[rec.Topic] == nil {
				t.pos[rec.Topic] = map[int32]int64{}
			}
			t.pos[rec.Topic][rec.Partition] = rec.Offset + 1
			if !rec.Attrs.IsControl() {
				t.decode(ctx, rec) // nothing for a topic of no encoded port
				got = append(got, keep(rec))
			}
			if rec.Offset+1 >= end {
				delete(want[rec.Topic], rec.Partition)
				if len(want[rec.Topic]) == 0 {
					delete(want, rec.Topic)
				}
				t.cl.PauseFetchPartitions(map[string][]int32{rec.Topic: {rec.Partition}})
			}
		})
	}
	slices.SortStableFunc(got, func(a, b *kgo.Record) int {
		return cmp.Or(a.Timestamp.Compare(b.Timestamp), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	for _, rec := range got {
		t.m.record(rec, t.fallbackOf[rec.Topic])
	}
}

func partitionsOf(m map[string]map[int32]int64) map[string][]int32 {
	out := map[string][]int32{}
	for t, ps := range m {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}

func (t *tail) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.cl.Close()
}

// one fetches the record at one offset (a dead letter's source record no longer among the last
// records kept), between two rounds; nil when there is none (deleted, or never written) or ctx
// ends first.
func (t *tail) one(ctx context.Context, topic string, partition int32, offset int64) *kgo.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || offset < 0 || !slices.Contains(t.parts[topic], partition) {
		return nil
	}
	p := map[string][]int32{topic: {partition}}
	t.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {partition: {Epoch: -1, Offset: offset}}})
	t.cl.ResumeFetchPartitions(p)
	defer t.cl.PauseFetchPartitions(p)
	for {
		fetches := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() || (fetches.NumRecords() == 0 && len(fetches.Errors()) > 0) {
			return nil
		}
		var found *kgo.Record
		done := false
		fetches.EachRecord(func(rec *kgo.Record) {
			t.fetched.Add(1)
			if done || rec.Topic != topic || rec.Partition != partition || rec.Offset < offset {
				return
			}
			done = true // the first at or past the offset: a record at it, or none is left there
			if rec.Offset == offset && !rec.Attrs.IsControl() {
				t.decode(ctx, rec)
				found = keep(rec)
			}
		})
		if done {
			return found
		}
	}
}
