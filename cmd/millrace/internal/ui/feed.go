package ui

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/kafkalog"
)

// feed reads every topic of the run (inputs, outlets, dead letters, changelogs) from its
// start, read_committed as the printer reads, into the model.
type feed struct {
	cl     *kgo.Client
	topics []string
	shown  []string // the topics read only while a page is open: all but the changelogs
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	pos    map[string]map[int32]int64 // next offset read, markers included
	paused bool
	closed bool
}

func startFeed(v *local.View, m *model, log *slog.Logger) (*feed, error) {
	fallbackOf := map[string]string{} // a --fallback outlet's topic → its streamlet
	topics, changelogs := map[string]bool{}, map[string]bool{}
	for _, s := range v.Streamlets() {
		for _, p := range s.Inlets {
			topics[p.Topic] = true
			if p.Changelog != "" {
				topics[p.Changelog] = true
				changelogs[p.Changelog] = true
			}
		}
		for _, p := range s.Outlets {
			topics[p.Topic] = true
			if p.Name == s.Fallback {
				fallbackOf[p.Topic] = s.Name
			}
		}
	}
	f := &feed{topics: slices.Sorted(maps.Keys(topics)), done: make(chan struct{}), pos: map[string]map[int32]int64{}}
	from, err := startOffsets(v, f.topics, changelogs, log)
	if err != nil {
		return nil, err
	}
	for _, t := range f.topics {
		if !changelogs[t] {
			f.shown = append(f.shown, t)
		}
	}
	// FetchMaxWait short: a topic resumed joins the next fetch, after the one in flight
	cl, err := kgo.NewClient(kgo.SeedBrokers(v.Brokers()...), kgo.ConsumePartitions(from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(250*time.Millisecond),
		kafkalog.Option(log.With("component", "ui"), slog.LevelWarn))
	if err != nil {
		return nil, fmt.Errorf("the page's consumer: %w", err)
	}
	f.cl = cl
	f.pause() // until a page is open
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		for {
			fetches := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fetches.EachRecord(func(rec *kgo.Record) {
				if !rec.Attrs.IsControl() {
					v.Decode(ctx, rec) // nothing for a topic of no encoded port
					m.record(keep(rec), fallbackOf[rec.Topic])
				}
				f.mu.Lock()
				if f.pos[rec.Topic] == nil {
					f.pos[rec.Topic] = map[int32]int64{}
				}
				f.pos[rec.Topic][rec.Partition] = rec.Offset + 1
				f.mu.Unlock()
			})
		}
	}()
	return f, nil
}

// startOffsets is where the page reads each partition from: a changelog from its start (every
// key's state), another topic from its last recordsPerTopic records (a topic of --data or
// --brokers may hold much more than the page shows).
func startOffsets(v *local.View, topics []string, changelogs map[string]bool, log *slog.Logger) (map[string]map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(v.Brokers()...), kafkalog.Option(log.With("component", "ui"), slog.LevelWarn))
	if err != nil {
		return nil, fmt.Errorf("the page's Kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("the start offsets of the run's topics: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("the end offsets of the run's topics: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	starts.Each(func(o kadm.ListedOffset) {
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		at := o.Offset
		if end, ok := ends.Lookup(o.Topic, o.Partition); ok && !changelogs[o.Topic] {
			at = max(at, end.Offset-recordsPerTopic)
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(at)
	})
	return from, nil
}

// pause stops reading the topics a page shows (not the changelogs: the state of every key
// is needed whenever the state view opens), while no page is open: the run pays for the page's
// reads only while someone looks.
func (f *feed) pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.paused && !f.closed {
		f.cl.PauseFetchTopics(f.shown...)
		f.paused = true
	}
}

// resume reads them again, each partition from its last recordsPerTopic records when more
// came meanwhile (what the page keeps of a topic; the records before are skipped, unread).
func (f *feed) resume(ctx context.Context) {
	f.mu.Lock()
	paused := f.paused && !f.closed
	f.mu.Unlock()
	if !paused {
		return
	}
	ends, err := kadm.NewClient(f.cl).ListEndOffsets(ctx, f.shown...)
	set := map[string]map[int32]kgo.EpochOffset{}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset-recordsPerTopic > f.pos[o.Topic][o.Partition] {
				if set[o.Topic] == nil {
					set[o.Topic] = map[int32]kgo.EpochOffset{}
				}
				set[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset - recordsPerTopic}
			}
		})
	}
	if f.closed {
		return
	}
	if len(set) > 0 {
		f.cl.SetOffsets(set)
	}
	f.cl.ResumeFetchTopics(f.shown...)
	f.paused = false
}

// catchUp waits until the feed has read every topic to its end offsets now, or ctx ends.
func (f *feed) catchUp(ctx context.Context) {
	ends, err := kadm.NewClient(f.cl).ListEndOffsets(ctx, f.topics...)
	if err != nil {
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		behind := false
		f.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 && f.pos[o.Topic][o.Partition] < o.Offset {
				behind = true
			}
		})
		f.mu.Unlock()
		if !behind {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (f *feed) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	<-f.done
	f.cl.Close()
}

// keep copies what the page shows of a record: a fetched record's slices hold its whole batch
// in memory, and a value longer than the page shows is kept to one byte more (toRecord cuts it).
func keep(rec *kgo.Record) *kgo.Record {
	k := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp, Key: bytes.Clone(rec.Key)}
	if rec.Value != nil {
		k.Value = bytes.Clone(rec.Value[:min(len(rec.Value), valueBytes+1)])
	}
	for _, h := range rec.Headers {
		k.Headers = append(k.Headers, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	return k
}

// toRecord is a record as the page shows it: key and headers as text (Base64 when not UTF-8),
// the value as JSON (text or Base64 when it is not), cut at valueBytes; a dead letter's or a
// fallback record's reason and source from the bridge's millrace-* headers.
func toRecord(rec *kgo.Record) Record {
	r := Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Time: rec.Timestamp}
	if rec.Key != nil {
		if utf8.Valid(rec.Key) {
			k := string(rec.Key)
			r.Key = &k
		} else {
			r.KeyBase64 = base64.StdEncoding.EncodeToString(rec.Key)
		}
	}
	val := rec.Value
	if len(val) > valueBytes {
		val, r.Cut = val[:valueBytes], true
	}
	switch {
	case rec.Value == nil:
	case !r.Cut && json.Valid(val):
		var buf bytes.Buffer
		_ = json.Compact(&buf, val)
		r.Value = buf.Bytes()
	case utf8.Valid(val):
		r.Text = string(val)
	default:
		r.Base64 = base64.StdEncoding.EncodeToString(val)
	}
	var src [3]string
	for _, h := range rec.Headers {
		hv := Header{Key: h.Key, Value: string(h.Value)}
		if !utf8.Valid(h.Value) {
			hv.Value, hv.Base64 = base64.StdEncoding.EncodeToString(h.Value), true
		}
		r.Headers = append(r.Headers, hv)
		switch h.Key {
		case "millrace-error", "millrace-abstain-reason":
			r.Error = string(h.Value)
		case "millrace-source-topic":
			src[0] = string(h.Value)
		case "millrace-source-partition":
			src[1] = string(h.Value)
		case "millrace-source-offset":
			src[2] = string(h.Value)
		}
	}
	if src[0] != "" {
		if _, err := strconv.Atoi(src[1]); err == nil {
			r.Source = src[0] + "/" + src[1] + "/" + src[2]
		}
	}
	return r
}
