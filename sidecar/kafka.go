package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// Fetch buffering per partition: fetching pauses when a partition holds this many batches'
// worth of uncommitted records (by bytes or by count) and resumes when it is back under the
// low water mark, early enough that the next fetch arrives before the queue runs dry.
const (
	highWaterBatches = 4
	lowWaterBatches  = 2
)

// fetchMaxWait bounds a fetch's long poll. A resumed partition waits for the fetch in flight
// to its broker, so this is also the worst delay of a resume (Kafka's default is 500 ms).
const fetchMaxWait = 200 * time.Millisecond

// produceTimeout bounds how long an emit may wait to be written (delivery.timeout.ms).
const produceTimeout = 60 * time.Second

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
	inflight   *batch // the batch with the process, nil if none
	paused     bool

	// stall tracking: since when the partition's head batch has been failing, and how often.
	stallSince time.Time
	attempts   int
	warned     bool

	commits int // offset commits made for this partition, for tests
}

// kafka is the Kafka client and the goroutine that polls it.
type kafka struct {
	cl     *kgo.Client        // the group consumer; commits offsets
	prod   *kgo.Client        // writes emits; replaced after a produce failure
	abort  context.CancelFunc // cancels the client's own context: every request in flight fails
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// openKafka creates the client (joining the consumer group over every inlet topic) and starts
// the poller.
func (s *Sidecar) openKafka() (*kafka, error) {
	var topics []string
	// A fetch brings at most about one batch per partition (Kafka still returns a record
	// batch larger than this whole), so buffering stays near the high water mark.
	maxPart := int32(0)
	for _, in := range s.cfg.Inlets {
		topics = append(topics, in.Topic)
		maxPart = max(maxPart, int32(in.MaxBytes))
	}
	maxPart = max(maxPart, 1)
	clientCtx, abort := context.WithCancel(context.Background())
	opts := []kgo.Opt{
		kgo.WithContext(clientCtx),
		kgo.FetchMaxPartitionBytes(maxPart),
		kgo.FetchMaxBytes(max(4<<20, maxPart)),
		kgo.FetchMaxWait(fetchMaxWait),
	}
	if len(topics) > 0 {
		opts = append(opts,
			kgo.ConsumerGroup(s.cfg.ConsumerGroup),
			kgo.ConsumeTopics(topics...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
			// Polls and rebalance callbacks gate each other, so records polled before a
			// revocation are queued before the revocation clears them.
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(s.assigned),
			kgo.OnPartitionsRevoked(s.revoked),
			kgo.OnPartitionsLost(s.revoked),
		)
	}
	opts = append(opts, s.connOpts()...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		abort()
		return nil, fmt.Errorf("sidecar: cannot create the Kafka client for %v: %w", s.cfg.Brokers, err)
	}
	prod, err := s.newProducer()
	if err != nil {
		abort()
		cl.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kafka{cl: cl, prod: prod, abort: abort, cancel: cancel, done: make(chan struct{})}
	if len(topics) == 0 {
		close(k.done)
		return k, nil
	}
	go func() {
		defer close(k.done)
		s.poll(ctx, cl)
	}()
	return k, nil
}

// leaveTimeout bounds leaving the group at shutdown. A leave waits for a join in progress,
// which may wait out a dead member's session; a pod's grace period cannot.
const leaveTimeout = 3 * time.Second

// connOpts are the options every client of the sidecar shares: brokers, TLS, SASL, logs.
func (s *Sidecar) connOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID("millrace-sidecar"),
		kgo.WithLogger(kgoLogger{s.log.With("component", "kafka")}),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(s.cfg.TLS))
	}
	if s.cfg.SASL != nil {
		opts = append(opts, kgo.SASL(s.cfg.SASL))
	}
	return opts
}

// newProducer returns the client that writes emits. It is separate from the consumer so that
// it can be replaced after a produce failure without leaving the group: a fresh client learns
// the outlet topics anew (a topic deleted and created again has a new topic ID).
func (s *Sidecar) newProducer() (*kgo.Client, error) {
	opts := append(s.connOpts(),
		// Commit after the write: acks from every in-sync replica, idempotent, and no linger,
		// since an acknowledged batch is waiting on these records.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(produceTimeout),
		// An emit may be as large as the protocol allows (Start.max_message_bytes), more than
		// franz-go's default batch cap of about 1 MB; the outlet topic's max.message.bytes
		// decides, and a refusal is a produce failure that names the topic.
		kgo.ProducerBatchMaxBytes(int32(s.cfg.MaxMessageBytes+batchOverhead)),
		// Learn soon that an outlet topic is gone or back (refreshes happen on errors only).
		kgo.MetadataMinAge(time.Second),
	)
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("sidecar: cannot create the Kafka producer for %v: %w", s.cfg.Brokers, err)
	}
	return prod, nil
}

// renewProducer replaces the producer after a produce failure. Called between
// conversations, when nothing is producing.
func (s *Sidecar) renewProducer() {
	prod, err := s.newProducer()
	if err != nil {
		s.log.Error("cannot renew the Kafka producer; keeping the old one", "error", err)
		return
	}
	s.kafka.prod.Close()
	s.kafka.prod = prod
}

// close stops the poller, leaves the group (waiting at most leaveTimeout) and closes the
// client. It may be called twice.
func (k *kafka) close(log *slog.Logger) {
	k.once.Do(func() {
		k.cancel()
		<-k.done
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		if err := k.cl.LeaveGroupContext(ctx); err != nil {
			log.Warn("could not leave the consumer group in time; the broker will expire this member's session", "timeout", leaveTimeout, "error", err)
			// Abort the requests still in flight (a held JoinGroup), so Close cannot wait on them.
			k.abort()
		}
		k.cl.Close()
		k.abort()
		k.prod.Close()
	})
}

// poll moves fetched records into their partitions' queues until ctx ends, pausing a
// partition's fetching at high water.
func (s *Sidecar) poll(ctx context.Context, cl *kgo.Client) {
	for {
		fetches := cl.PollRecords(ctx, 10000)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			s.log.Warn("fetch error", "topic", topic, "partition", p, "error", err)
		})
		// Copy the records out of the fetch before taking the lock: the lock is the one every
		// answer of the process waits on.
		var got []fetched
		fetches.EachPartition(func(f kgo.FetchTopicPartition) {
			g := fetched{topic: f.Topic, partition: f.Partition, records: make([]record, len(f.Records))}
			for i, r := range f.Records {
				g.records[i] = newRecord(r)
			}
			got = append(got, g)
		})
		var pause map[string][]int32
		s.mu.Lock()
		for _, g := range got {
			p := s.parts[tp{g.topic, g.partition}]
			if p == nil || !p.owned {
				continue
			}
			for _, r := range g.records {
				s.enqueue(p, r)
			}
			if !p.paused && p.aboveHighWater() {
				p.paused = true
				s.stats.Pauses++
				if pause == nil {
					pause = map[string][]int32{}
				}
				pause[p.topic] = append(pause[p.topic], p.partition)
			}
		}
		s.mu.Unlock()
		if pause != nil {
			cl.PauseFetchPartitions(pause)
		}
		cl.AllowRebalance()
		s.kickSender()
	}
}

// fetched is what one fetch brought for one partition, copied out of the fetch.
type fetched struct {
	topic     string
	partition int32
	records   []record
}

// newRecord copies a fetched record out of the fetch buffer: a record slicing into it would
// pin the whole fetch response for as long as the record waits, and the buffer bound would
// be a fiction.
func newRecord(r *kgo.Record) record {
	in := &flowv1.InputRecord{
		Offset:      r.Offset,
		TimestampMs: r.Timestamp.UnixMilli(),
		Record:      &flowv1.Record{Key: cloneKey(r.Key), Value: bytes.Clone(r.Value)},
	}
	if in.Record.Value == nil {
		in.Record.Value = []byte{}
	}
	for _, h := range r.Headers {
		in.Record.Headers = append(in.Record.Headers, &flowv1.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	return record{in: in, leaderEpoch: r.LeaderEpoch, size: proto.Size(in) + 8} // + field tag and length inside the Batch
}

// enqueue appends a fetched record to its partition's queue. Called with mu held.
func (s *Sidecar) enqueue(p *partition, r record) {
	if n := len(p.queue); n > 0 && r.in.Offset <= p.queue[n-1].in.Offset {
		return // already queued: a refetch after a pause
	}
	p.queue = append(p.queue, r)
	p.queueBytes += int64(r.size)
	s.stats.BufferedRecords++
	s.stats.BufferedBytes += int64(r.size)
	if s.stats.BufferedBytes > s.stats.PeakBufferedBytes {
		s.stats.PeakBufferedBytes = s.stats.BufferedBytes
	}
}

// cloneKey copies a key, keeping an absent key absent and an empty key empty.
func cloneKey(k []byte) []byte {
	if k == nil {
		return nil
	}
	return append([]byte{}, k...)
}

func (p *partition) aboveHighWater() bool {
	return len(p.queue) >= highWaterBatches*p.inlet.MaxRecords || p.queueBytes >= int64(highWaterBatches*p.inlet.MaxBytes)
}

func (p *partition) belowLowWater() bool {
	return len(p.queue) <= lowWaterBatches*p.inlet.MaxRecords && p.queueBytes <= int64(lowWaterBatches*p.inlet.MaxBytes)
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

// assigned takes ownership of newly assigned partitions; fetching starts at their last
// committed offsets.
func (s *Sidecar) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range m {
		for _, n := range ps {
			key := tp{topic, n}
			p := s.parts[key]
			if p == nil {
				p = &partition{tp: key, inlet: s.inlets[topic]}
				s.parts[key] = p
				s.order = append(s.order, p)
			}
			s.dropHead(p, len(p.queue))
			p.owned, p.epoch, p.sent, p.paused = true, p.epoch+1, 0, false
			p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
			s.log.Info("partition assigned", "topic", topic, "partition", n)
		}
	}
	s.kickSenderLocked()
}

// revoked gives up revoked or lost partitions: a rebalance discards. A batch still with the
// process is marked revoked (its emits and Ack dropped silently), queued records are dropped
// for the new owner to read again, and since this holds commitMu, no commit for these
// partitions is in progress or can start.
func (s *Sidecar) revoked(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	resume := map[string][]int32{}
	for topic, ps := range m {
		for _, n := range ps {
			p := s.parts[tp{topic, n}]
			if p == nil {
				continue
			}
			if p.inflight != nil {
				p.inflight.revoked = true
			}
			s.dropHead(p, len(p.queue))
			if p.paused {
				resume[topic] = append(resume[topic], n)
			}
			p.owned, p.epoch, p.sent, p.paused = false, p.epoch+1, 0, false
			p.stallSince, p.attempts, p.warned = time.Time{}, 0, false
			s.log.Info("partition revoked", "topic", topic, "partition", n)
		}
	}
	s.mu.Unlock()
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}

// kgoLogger routes franz-go's logs into slog.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelInfo:
		lv = slog.LevelInfo
	}
	l.log.Log(context.Background(), lv, msg, keyvals...)
}
