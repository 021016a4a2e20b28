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

// feed is what the page reads of the run's topics: each changelog consumed from its start
// (every key's state, whenever the state view opens), and the other topics' tails, read once a
// second while a page is open (tail).
type feed struct {
	tail   *tail
	cl     *kgo.Client // the changelogs' consumer; nil for a run of no --state
	logs   []string    // the changelogs
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	pos map[string]map[int32]int64 // next changelog offset read, markers included
}

func startFeed(v *local.View, m *model, log *slog.Logger) (*feed, error) {
	fallbackOf := map[string]string{} // a --fallback outlet's topic → its streamlet
	topics, changelogs := map[string]bool{}, map[string]bool{}
	for _, s := range v.Streamlets() {
		for _, p := range s.Inlets {
			topics[p.Topic] = true
			if p.Changelog != "" {
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
	for t := range changelogs {
		delete(topics, t) // a changelog is consumed, never tailed
	}
	t, err := newTail(v.Brokers(), slices.Sorted(maps.Keys(topics)), v.Decode, m, fallbackOf, log)
	if err != nil {
		return nil, err
	}
	f := &feed{tail: t, logs: slices.Sorted(maps.Keys(changelogs)), done: make(chan struct{}), pos: map[string]map[int32]int64{}}
	if len(f.logs) == 0 {
		close(f.done)
		return f, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(v.Brokers()...), kgo.ConsumeTopics(f.logs...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kafkalog.Option(log.With("component", "ui"), slog.LevelWarn))
	if err != nil {
		t.close()
		return nil, fmt.Errorf("the page's consumer of the changelogs: %w", err)
	}
	f.cl = cl
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
					m.record(keep(rec), "")
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

// catchUp reads the other topics' tails once more and waits until the changelogs' consumer
// has read each changelog to its end offsets now, or ctx ends.
func (f *feed) catchUp(ctx context.Context) {
	f.tail.round(ctx)
	if f.cl == nil {
		return
	}
	ends, err := kadm.NewClient(f.cl).ListCommittedOffsets(ctx, f.logs...)
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
	if f.cl != nil {
		f.cancel()
		<-f.done
		f.cl.Close()
	}
	f.tail.close()
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
