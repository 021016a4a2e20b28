package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Why a restore reads the whole changelog partition rather than catching up from the file.
const (
	ReasonEmpty          = "empty"           // the file was new
	ReasonUnclean        = "unclean"         // a file left unclean under another boot was deleted
	ReasonTopicRecreated = "topic-recreated" // the file was restored from another topic of that name
	ReasonGap            = "gap"             // the file's position is outside the log's [start, end]
	ReasonDataLoss       = "data-loss"       // the log start moved past the restore while it read
)

// RestoreOptions tune Restore; the zero value restores at least once.
type RestoreOptions struct {
	// ReadCommitted reads to the last stable offset and skips aborted records: the changelog
	// of an exactly-once sidecar, whose open transaction must never be applied.
	ReadCommitted bool
	// MaxBatchRecords and MaxBatchBytes bound one write transaction; 0: 10,000 and 16 MiB.
	MaxBatchRecords int
	MaxBatchBytes   int
	Log             *slog.Logger // nil: the partition's
	// Progress, when set, is told the records left to the end measured when the restore
	// began (offsets, transaction markers and records compacted away included): once the
	// end is known, after each fetch, and 0 when it is reached.
	Progress func(remaining int64)
}

// Restored says what a restore did.
type Restored struct {
	Full     bool   // the file was emptied and the partition read from the log start
	Reason   string // why it was full (Reason…); empty for a catch-up
	From, To int64  // the changelog offsets read, [From, To); To is the file's position now
	Records  int64  // records applied, tombstones included
}

// Restore brings the store up to the end of its changelog partition, measured when it begins
// (the high watermark; the last stable offset with ReadCommitted): from the file's position
// when the file can be trusted (its topic id, its position within the log), else from the log
// start into an emptied file. A record's value is the key's state, a tombstone (a null or
// empty value) deletes it, its timestamp is the write time the TTL counts from. At most one
// fetch and one write transaction are held in memory, whatever the number of keys.
//
// kopts are the client's seed brokers and connection; Restore opens one client of its own,
// closed before it returns.
func Restore(ctx context.Context, p *Partition, kopts []kgo.Opt, o RestoreOptions) (Restored, error) {
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = 10_000
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 16 << 20
	}
	if o.Log == nil {
		o.Log = p.opts.Log
	}
	iso := kgo.ReadUncommitted()
	if o.ReadCommitted {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), kopts...),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(), // the last offsets may be markers: the end is reached through them
		kgo.FetchMaxBytes(16<<20),
		kgo.FetchMaxPartitionBytes(16<<20),
	)...)
	if err != nil {
		return Restored{}, fmt.Errorf("state: a client to restore %s/%d: %w", p.topic, p.partition, err)
	}
	defer cl.Close()
	r, err := restore(ctx, cl, p, o, "")
	if errors.Is(err, errDataLoss) {
		o.Log.Warn("state: the changelog's start moved during the restore: restoring in full", "topic", p.topic, "partition", p.partition)
		cl.PurgeTopicsFromConsuming(p.topic)
		r, err = restore(ctx, cl, p, o, ReasonDataLoss)
	}
	return r, err
}

// restore is one pass of Restore; force, when set, is the reason to restore in full.
func restore(ctx context.Context, cl *kgo.Client, p *Partition, o RestoreOptions, force string) (Restored, error) {
	adm := kadm.NewClient(cl)
	id, start, end, high, err := p.bounds(ctx, adm, o.ReadCommitted)
	if err != nil {
		return Restored{}, err
	}
	cp, err := p.Checkpoint()
	if err != nil {
		return Restored{}, err
	}
	reason := force
	switch {
	case reason != "":
	case p.takeDiscarded():
		reason = ReasonUnclean
	case cp.TopicID == [16]byte{}:
		reason = ReasonEmpty
	case cp.TopicID != id:
		reason = ReasonTopicRecreated
	case cp.Position < start || cp.Position > high:
		reason = ReasonGap
	}
	r := Restored{From: cp.Position}
	if reason != "" {
		if reason != ReasonEmpty {
			o.Log.Warn("state: restoring the changelog partition in full", "topic", p.topic, "partition", p.partition,
				"reason", reason, "position", cp.Position, "log_start", start, "log_end", high, "keys", cp.Keys)
		}
		if err := p.Reset(id); err != nil {
			return Restored{}, err
		}
		r = Restored{Full: true, Reason: reason, From: start}
	}
	r.To = r.From
	progress := func() {
		if o.Progress != nil {
			o.Progress(max(end-r.To, 0))
		}
	}
	progress()
	if r.From >= end {
		if r.Full {
			return r, p.Apply(nil, r.From)
		}
		return r, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{p.topic: {p.partition: kgo.NewOffset().At(r.From)}})
	defer cl.PurgeTopicsFromConsuming(p.topic)

	batch := make([]Entry, 0, min(o.MaxBatchRecords, 1024))
	size := 0
	for r.To < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return r, fmt.Errorf("state: restore %s/%d stopped at offset %d of %d: %w", p.topic, p.partition, r.To, end, err)
		}
		for _, fe := range fs.Errors() {
			var loss *kgo.ErrDataLoss
			if errors.As(fe.Err, &loss) {
				return r, errDataLoss
			}
			return r, fmt.Errorf("state: restore %s/%d at offset %d: %w", p.topic, p.partition, r.To, fe.Err)
		}
		iter := fs.RecordIter()
		for !iter.Done() && r.To < end {
			rec := iter.Next()
			if rec.Offset < r.To {
				continue
			}
			r.To = rec.Offset + 1
			if rec.Attrs.IsControl() {
				continue
			}
			e := Entry{Key: rec.Key, Value: rec.Value, Written: rec.Timestamp.UnixMilli()}
			if len(e.Value) == 0 {
				e.Value = nil
			}
			if err := p.check(e); err != nil {
				return r, fmt.Errorf("state: restore %s/%d at offset %d: %w", p.topic, p.partition, rec.Offset, err)
			}
			batch = append(batch, e)
			r.Records++
			size += len(e.Key) + len(e.Value)
			if len(batch) >= o.MaxBatchRecords || size >= o.MaxBatchBytes {
				if err := p.Apply(batch, r.To); err != nil {
					return r, fmt.Errorf("state: restore %s/%d at offset %d: %w", p.topic, p.partition, rec.Offset, err)
				}
				clear(batch)
				batch, size = batch[:0], 0
			}
		}
		if r.To < end {
			progress()
		}
	}
	if err := p.Apply(batch, r.To); err != nil {
		return r, fmt.Errorf("state: restore %s/%d before offset %d: %w", p.topic, p.partition, r.To, err)
	}
	progress()
	return r, nil
}

// bounds asks the brokers for the changelog topic's id and the partition's log start, its end
// for this isolation level, and its high watermark.
func (p *Partition) bounds(ctx context.Context, adm *kadm.Client, readCommitted bool) (id [16]byte, start, end, high int64, err error) {
	md, err := adm.Metadata(ctx, p.topic)
	if err != nil {
		return id, 0, 0, 0, fmt.Errorf("state: the metadata of changelog topic %s: %w", p.topic, err)
	}
	td, ok := md.Topics[p.topic]
	if !ok || td.Err != nil {
		return id, 0, 0, 0, fmt.Errorf("state: changelog topic %s: %w (create it compacted, with the inlet's partitions)", p.topic, errors.Join(td.Err, errors.New("not in the brokers' metadata")))
	}
	if _, ok := td.Partitions[p.partition]; !ok {
		return id, 0, 0, 0, fmt.Errorf("state: changelog topic %s has no partition %d (it has %d): give it the inlet topic's partitions", p.topic, p.partition, len(td.Partitions))
	}
	id = td.ID
	offset := func(what string) func(kadm.ListedOffsets, error) (int64, error) {
		return func(l kadm.ListedOffsets, err error) (int64, error) {
			if err == nil {
				err = l.Error()
			}
			o, ok := l.Lookup(p.topic, p.partition)
			if err == nil && !ok {
				err = errors.New("no answer for the partition")
			}
			if err != nil {
				return 0, fmt.Errorf("state: the %s of changelog %s/%d: %w", what, p.topic, p.partition, err)
			}
			return o.Offset, nil
		}
	}
	if start, err = offset("log start")(adm.ListStartOffsets(ctx, p.topic)); err != nil {
		return
	}
	if high, err = offset("high watermark")(adm.ListEndOffsets(ctx, p.topic)); err != nil {
		return
	}
	end = high
	if readCommitted {
		end, err = offset("last stable offset")(adm.ListCommittedOffsets(ctx, p.topic))
	}
	return
}
