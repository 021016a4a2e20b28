package sidecar

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// Fetch buffering per partition: fetching pauses when a partition holds this many batches'
// worth of uncommitted records (by bytes or by count) and resumes when it is back under the
// low water mark, early enough that the next fetch arrives before the queue runs dry.
const (
	highWaterBatches = 4
	lowWaterBatches  = 2
)

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

func (t tp) String() string { return fmt.Sprintf("%s/%d", t.topic, t.partition) }

// record is one fetched input record, ready to go into a Batch.
type record struct {
	in          *flowv1.InputRecord
	leaderEpoch int32
	size        int // proto size of in, with its framing inside a Batch
}

// partition is the sidecar's state of one inlet partition. It survives revocation and
// reassignment, so a batch still with the process keeps its partition busy. Guarded by
// Sidecar.mu; owned and epoch are changed only holding commitMu too.
type partition struct {
	tp
	inlet *Inlet
	owned bool
	// epoch changes at every assignment and revocation; a batch remembers the epoch it was
	// sent in, and is committed only if it still matches.
	epoch uint64
	// queue holds the fetched records not yet committed, in offset order; queue[:sent] went to
	// the process in the current conversation (acknowledged or in flight).
	queue      []record
	queueBytes int64
	sent       int
	// done counts the records at the head of the queue that are written and wait for their
	// commit (pend, or the open transaction): they stay queued (a failure redelivers from the
	// last commit) and count against the high water mark by their bytes, not by their number,
	// so a commit interval does not pause fetching; by number they are at most as many again
	// (then the commit comes early, commitEarlyLocked).
	done     int
	inflight *batch // the batch with the process, nil if none
	paused   bool
	// next is the offset after the last record queued in this assignment: a record below it
	// was queued (or committed) already and comes again after a pause, or after the
	// exactly-once client rewinds its fetch position to the last commit when a transaction
	// aborts.
	next int64

	// capRecords, when not 0, caps the partition's batches after one emitted over the
	// per-batch budget: halved at each such failure, down to 1, until capUntil is committed.
	capRecords int
	capUntil   int64

	// stall tracking: since when the partition's head batch has been failing, and how often.
	stallSince time.Time
	attempts   int
	warned     bool

	commits int // offset commits made for this partition, for tests

	// pend is what is confirmed and not yet committed (at least once): the batches whose emits
	// the broker confirmed since the last commit, their records gone from the queue.
	pend pending
	// revoking is set while a cooperative revocation lets the partition's batches finish
	// (handOver): no new batch is sent for it.
	revoking bool

	// The lag: the high watermark last seen (from a fetch or an offset query) and the
	// committed offset (the next offset the group resumes from), -1 while unknown. fetched
	// says a fetch has come since the assignment: its first record is at the committed offset.
	hwm, committed int64
	fetched        bool

	// The watchdog's (watchdog.go): since when the partition is owned; the end of what it may
	// fetch as last seen (the high watermark at least once, the last stable offset exactly
	// once; -1 while unknown); when its last batch was sent; since when it has held records
	// waiting with none sent (zero while it does not); and whether this stuck spell was
	// reported.
	ownedSince   time.Time
	end          int64
	lastSent     time.Time
	waitingSince time.Time
	stuckLogged  bool

	partState // of a stateful inlet (statestore.go)
}

// fetched is what one fetch brought for one partition, copied out of the fetch.
type fetched struct {
	topic     string
	partition int32
	hwm       int64 // the partition's high watermark, as the broker answered
	end       int64 // what may be fetched: the high watermark, or exactly once the last stable offset
	// first and next are the offset of the first record fetched and the one after the last,
	// control records (transaction markers, which are not queued) included; -1 when none.
	first, next int64
	records     []record
}

// copyRecords copies fetched records out of the fetch buffer: a record slicing into it would
// pin the whole fetch response for as long as the record waits, and the buffer bound would
// be a fiction. The records of one fetch share three allocations (their messages, and one
// buffer for their keys, values and header values), which stay as long as one of them waits.
func copyRecords(rs []*kgo.Record) []record {
	n, hs := 0, 0
	for _, r := range rs {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Value)
		}
		hs += len(r.Headers)
	}
	out := make([]record, len(rs))
	msgs := make([]struct {
		in  flowv1.InputRecord
		rec flowv1.Record
	}, len(rs))
	var headers []flowv1.Header
	if hs > 0 {
		headers = make([]flowv1.Header, 0, hs)
	}
	buf := make([]byte, 0, n)
	clone := func(b []byte) []byte { // a copy in buf; nil stays nil, empty stays empty
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	for i, r := range rs {
		m := &msgs[i]
		m.in.Offset, m.in.TimestampMs, m.in.Record = r.Offset, r.Timestamp.UnixMilli(), &m.rec
		m.rec.Key, m.rec.Value = clone(r.Key), clone(r.Value)
		if m.rec.Value == nil {
			m.rec.Value = []byte{}
		}
		for _, h := range r.Headers {
			headers = append(headers, flowv1.Header{Key: h.Key, Value: clone(h.Value)})
			m.rec.Headers = append(m.rec.Headers, &headers[len(headers)-1])
		}
		out[i] = record{in: &m.in, leaderEpoch: r.LeaderEpoch, size: m.in.SizeVT() + 8} // + field tag and length inside the Batch
	}
	return out
}

// enqueue appends a fetched record to its partition's queue and reports whether it was new.
// Called with mu held.
func (s *Sidecar) enqueue(p *partition, r record) bool {
	if r.in.Offset < p.next {
		return false // already queued or committed: a refetch
	}
	p.next = r.in.Offset + 1
	p.queue = append(p.queue, r)
	p.queueBytes += int64(r.size)
	s.stats.BufferedRecords++
	s.stats.BufferedBytes += int64(r.size)
	if s.stats.BufferedBytes > s.stats.PeakBufferedBytes {
		s.stats.PeakBufferedBytes = s.stats.BufferedBytes
	}
	return true
}

func (p *partition) aboveHighWater() bool {
	return len(p.queue)-p.done >= highWaterBatches*p.inlet.MaxRecords || p.queueBytes >= int64(highWaterBatches*p.inlet.MaxBytes)
}

func (p *partition) belowLowWater() bool {
	return len(p.queue)-p.done <= lowWaterBatches*p.inlet.MaxRecords && p.queueBytes <= int64(lowWaterBatches*p.inlet.MaxBytes)
}

// dropHead removes the first n records of the queue (committed, or discarded). Called with mu
// held; returns whether the partition should resume fetching.
func (s *Sidecar) dropHead(p *partition, n int) (resume bool) {
	var bytes int64
	for _, r := range p.queue[:n] {
		bytes += int64(r.size)
	}
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	p.queueBytes -= bytes
	p.done = max(p.done-n, 0)
	p.sent -= n
	if p.sent < 0 {
		p.sent = 0
	}
	s.stats.BufferedRecords -= n
	s.stats.BufferedBytes -= bytes
	if p.paused && p.belowLowWater() {
		p.paused = false
		return true
	}
	return false
}
