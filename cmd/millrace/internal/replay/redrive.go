package replay

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers the bridge adds to a dead letter (bridge/records.go): where the record was read,
// and why it failed. Every header starting with headerPrefix is the bridge's and is stripped
// from a re-driven record.
const (
	headerPrefix          = "millrace-"
	headerError           = "millrace-error"
	headerSourceTopic     = "millrace-source-topic"
	headerSourcePartition = "millrace-source-partition"
	headerSourceOffset    = "millrace-source-offset"
)

// progressEvery is how many dead letters are read between two progress lines.
const progressEvery = 1000

// idleEnd is how long a fetch may bring nothing before the partitions still short of their
// end are taken as read: what is left there is transaction markers, not records.
var idleEnd = 5 * time.Second

// RedriveOptions say which dead letters to send back. The filters combine: a record is
// re-driven when it passes every one given.
type RedriveOptions struct {
	Kafka
	From          string    // the dead-letter topic (required)
	SourceTopic   string    // only dead letters read from this topic ("": any)
	MinOffset     int64     // only source offsets ≥ MinOffset (-1: no bound)
	MaxOffset     int64     // only source offsets ≤ MaxOffset (-1: no bound)
	ErrorContains string    // only dead letters whose millrace-error contains this text ("": any)
	DryRun        bool      // print what would be sent, send nothing
	Out           io.Writer // progress and summary (nil: discarded)
}

// Summary is what a re-drive did.
type Summary struct {
	Read           int            // dead letters read (up to the topic's end when Redrive began)
	Redriven       int            // sent back (with DryRun: that would be)
	Filtered       int            // left out by a filter
	NotDeadLetters int            // records without the millrace-source-* headers, left alone
	ByTopic        map[string]int // re-driven, by source topic
}

func (s Summary) String() string {
	var to []string
	for _, t := range slices.Sorted(maps.Keys(s.ByTopic)) {
		to = append(to, fmt.Sprintf("%d to %s", s.ByTopic[t], t))
	}
	dest := ""
	if len(to) > 0 {
		dest = " (" + strings.Join(to, ", ") + ")"
	}
	return fmt.Sprintf("%d read, %d re-driven%s, %d left out by the filters, %d without millrace-source-* headers", s.Read, s.Redriven, dest, s.Filtered, s.NotDeadLetters)
}

// Redrive reads the dead-letter topic from its start up to the end it has when Redrive begins,
// and produces each dead letter that passes the filters to the topic and partition its
// millrace-source-* headers name, with its key, value and own headers, the bridge's
// millrace-* headers stripped. The dead-letter topic is left as it is. A record that cannot be
// sent ends the re-drive with an error; the summary says how far it got.
func Redrive(ctx context.Context, o RedriveOptions) (Summary, error) {
	sum := Summary{ByTopic: map[string]int{}}
	if o.From == "" {
		return sum, fmt.Errorf("%w: name the dead-letter topic with --from", ErrUsage)
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	admin, err := o.client(ctx, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return sum, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	ps, err := partitions(ctx, adm, o.From)
	if err != nil {
		return sum, err
	}
	starts, err := listOffsets(ctx, adm, o.From, ps, -2)
	if err != nil {
		return sum, err
	}
	ends, err := listOffsets(ctx, adm, o.From, ps, -1)
	if err != nil {
		return sum, err
	}
	want := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → end offset still to reach
	total := int64(0)
	for _, p := range ps {
		if ends[p] > starts[p] {
			want[p] = kgo.NewOffset().At(starts[p])
			left[p] = ends[p]
			total += ends[p] - starts[p]
		}
	}
	verb := "re-driving"
	if o.DryRun {
		verb = "would re-drive (dry run)"
	}
	fmt.Fprintf(out, "%s the dead letters of %s: %d record(s) to read\n", verb, o.From, total)
	if len(want) == 0 {
		fmt.Fprintf(out, "done: %s\n", sum)
		return sum, nil
	}
	reader, err := o.client(ctx, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.From: want}),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	if err != nil {
		return sum, err
	}
	defer reader.Close()

	var (
		mu      sync.Mutex
		sendErr error
	)
	srcParts := map[string][]int32{}
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, idleEnd)
		fs := reader.PollFetches(pctx)
		idle := pctx.Err() != nil
		cancel()
		if err := ctx.Err(); err != nil {
			return sum, fmt.Errorf("re-driving %s interrupted after %s: %w", o.From, sum, err)
		}
		if idle && fs.NumRecords() == 0 {
			// The offsets left are no records (transaction markers): nothing more to read.
			fmt.Fprintf(out, "  partitions %v hold nothing more to read below their end (transaction markers)\n", slices.Sorted(maps.Keys(left)))
			break
		}
		if errs := fs.Errors(); len(errs) > 0 && !idle {
			return sum, fmt.Errorf("reading %s/%d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if ok && r.Offset >= end-1 {
				delete(left, r.Partition) // the last offset, or past it (a marker was the last)
			}
			if !ok || r.Offset >= end || stop != nil {
				return
			}
			sum.Read++
			rec, keep, err := o.redriven(r)
			switch {
			case err != nil:
				sum.NotDeadLetters++
				return
			case !keep:
				sum.Filtered++
				return
			}
			if _, ok := srcParts[rec.Topic]; !ok {
				sp, err := partitions(ctx, adm, rec.Topic)
				if err != nil {
					stop = fmt.Errorf("dead letter %s/%d@%d names source topic %s: %w", r.Topic, r.Partition, r.Offset, rec.Topic, err)
					return
				}
				srcParts[rec.Topic] = sp
			}
			if !slices.Contains(srcParts[rec.Topic], rec.Partition) {
				stop = fmt.Errorf("dead letter %s/%d@%d names partition %d of %s, which has partitions %v", r.Topic, r.Partition, r.Offset, rec.Partition, rec.Topic, srcParts[rec.Topic])
				return
			}
			sum.Redriven++
			sum.ByTopic[rec.Topic]++
			if o.DryRun {
				fmt.Fprintf(out, "  %s/%d@%d → %s/%d (was offset %s)\n", r.Topic, r.Partition, r.Offset, rec.Topic, rec.Partition, header(r, headerSourceOffset))
				return
			}
			admin.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if sendErr == nil {
						sendErr = fmt.Errorf("producing dead letter %s/%d@%d back to %s/%d: %w", r.Topic, r.Partition, r.Offset, rec.Topic, rec.Partition, err)
					}
					mu.Unlock()
				}
			})
			if sum.Read%progressEvery == 0 {
				fmt.Fprintf(out, "  %d of %d read, %d re-driven\n", sum.Read, total, sum.Redriven)
			}
		})
		if stop != nil {
			admin.Flush(ctx)
			return sum, stop
		}
	}
	if err := admin.Flush(ctx); err != nil {
		return sum, fmt.Errorf("re-driving %s: %w", o.From, err)
	}
	mu.Lock()
	err = sendErr
	mu.Unlock()
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "done: %s\n", sum)
	return sum, nil
}

// redriven returns the record to send back for dead letter r, and whether it passes the
// filters; an error when r has no usable millrace-source-* headers.
func (o RedriveOptions) redriven(r *kgo.Record) (*kgo.Record, bool, error) {
	topic := header(r, headerSourceTopic)
	partition, perr := strconv.ParseInt(header(r, headerSourcePartition), 10, 32)
	offset, oerr := strconv.ParseInt(header(r, headerSourceOffset), 10, 64)
	if topic == "" || perr != nil || oerr != nil {
		return nil, false, fmt.Errorf("no millrace-source-* headers")
	}
	keep := (o.SourceTopic == "" || topic == o.SourceTopic) &&
		(o.MinOffset < 0 || offset >= o.MinOffset) &&
		(o.MaxOffset < 0 || offset <= o.MaxOffset) &&
		(o.ErrorContains == "" || strings.Contains(header(r, headerError), o.ErrorContains))
	rec := &kgo.Record{Topic: topic, Partition: int32(partition), Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, headerPrefix) {
			rec.Headers = append(rec.Headers, h)
		}
	}
	return rec, keep, nil
}

// header returns the value of r's last header named key, or "".
func header(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}
