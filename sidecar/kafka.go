package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/internal/kafkalog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchMaxWait bounds a fetch's long poll. A resumed partition waits for the fetch in flight
// to its broker, so this is also the worst delay of a resume (Kafka's default is 500 ms).
const fetchMaxWait = 200 * time.Millisecond

// produceTimeout bounds how long an emit may wait to be written (delivery.timeout.ms).
const produceTimeout = 60 * time.Second

// kafka is the Kafka client and the goroutine that polls it.
type kafka struct {
	cl   *kgo.Client // the group consumer; commits offsets
	prod *kgo.Client // writes emits; replaced after a produce failure (at least once)
	// txn is set in exactly-once mode: one client (cl and prod are its Client) consumes,
	// produces in transactions and commits offsets in them.
	txn    *kgo.GroupTransactSession
	abort  context.CancelFunc // cancels the client's own context: every request in flight fails
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	group string
	// instanceID is the static member's id when it must leave the group at close: kgo's own
	// leave keeps a static member in (staticLeave).
	instanceID string
}

// openKafka creates the client (joining the consumer group over every inlet topic) and starts
// the poller.
func (s *Sidecar) openKafka() (*kafka, error) {
	var topics []string
	for _, in := range s.cfg.Inlets {
		topics = append(topics, in.Topic)
	}
	// A fetch brings about two batches per partition (Kafka still returns a record batch
	// larger than that whole), so buffering stays near the high water mark (fetchsize.go).
	sizer := newFetchSizer(s.cfg.Inlets)
	clientCtx, abort := context.WithCancel(context.Background())
	opts := append([]kgo.Opt{
		kgo.WithContext(clientCtx),
		kgo.FetchMaxWait(fetchMaxWait),
		// Fetched batches are decoded into reused memory: every record is copied out and
		// recycled at once (poll).
		kgo.WithPools(new(fetchPool)),
	}, sizer.opts()...)
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
			kgo.OnPartitionsLost(s.lost),
			kgo.SessionTimeout(s.cfg.SessionTimeout),
			// Transaction markers come too, and are not queued: they move a partition's fetch
			// position (partition.next) past them, so the watchdog knows what is left to fetch.
			kgo.KeepControlRecords(),
		)
		if s.cfg.InstanceID != "" {
			// Static membership (KIP-345), keyed by the pod: a restarted sidecar, SIGKILLed or
			// not, rejoins as the same member and gets its partitions back at once, and a
			// rolling restart moves none. A static member does not leave the group at close.
			opts = append(opts, kgo.InstanceID(s.cfg.InstanceID))
		}
	}
	opts = append(opts, s.connOpts()...)
	var k *kafka
	if s.cfg.Delivery == ExactlyOnce && len(topics) > 0 {
		sess, err := kgo.NewGroupTransactSession(append(opts, s.txnOpts()...)...)
		if err != nil {
			abort()
			return nil, fmt.Errorf("sidecar: cannot create the transactional Kafka client for %v: %w", s.cfg.Brokers, err)
		}
		k = &kafka{cl: sess.Client(), prod: sess.Client(), txn: sess}
	} else {
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
		k = &kafka{cl: cl, prod: prod}
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.abort, k.cancel, k.done, k.group = abort, cancel, make(chan struct{}), s.cfg.ConsumerGroup
	if s.cfg.InstanceID != "" && !s.cfg.KeepMembershipOnShutdown {
		k.instanceID = s.cfg.InstanceID
	}
	cl := k.cl
	if len(topics) == 0 {
		close(k.done)
		return k, nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.poll(ctx, cl, sizer) })
	wg.Go(func() { s.watchWatermarks(ctx, cl) })
	wg.Go(func() { s.watchStuck(ctx, cl) })
	go func() { wg.Wait(); close(k.done) }()
	return k, nil
}

// leaveTimeout bounds leaving the group at shutdown. A leave waits for a join in progress,
// which may wait out a dead member's session; a pod's grace period cannot.
const leaveTimeout = 3 * time.Second

// metadataMinAge is the least time between two metadata refreshes of any of the sidecar's
// clients (connOpts).
const metadataMinAge = time.Second

// connOpts are the options every client of the sidecar shares: brokers, TLS, SASL, logs.
func (s *Sidecar) connOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID("millrace-sidecar"),
		kafkaLogger(s.log.With("component", "kafka")),
		// Every client, the consumer too, may refresh its metadata a second after the last
		// refresh, not franz-go's 5 s: a fetch or produce whose broker refuses connections (a
		// node hard-killed, until the controller fences it) asks for a refresh that waits out
		// this age, so a consumer learns its partitions' new leaders up to 4 s sooner. It also
		// learns soon that an outlet topic is gone or back (refreshes happen on errors only).
		kgo.MetadataMinAge(metadataMinAge),
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
	s.limits.forget() // the new client takes each topic's cap anew
	prod, err := kgo.NewClient(append(s.connOpts(), s.producerOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("sidecar: cannot create the Kafka producer for %v: %w", s.cfg.Brokers, err)
	}
	return prod, nil
}

// producerOpts are the options of whichever client writes emits.
func (s *Sidecar) producerOpts() []kgo.Opt {
	return append(s.partitionerOpts(),
		// Commit after the write: acks from every in-sync replica, idempotent, and no linger,
		// since an acknowledged batch is waiting on these records.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// Uncompressed unless FLOW_PRODUCE_COMPRESSION says otherwise (franz-go's own
		// default is snappy; Kafka's producer's is none): see Compression.
		kgo.ProducerBatchCompression(s.cfg.Compression.codec()),
		kgo.RecordDeliveryTimeout(produceTimeout),
		// Never a batch larger than its topic accepts: each outlet topic's own
		// max.message.bytes is its batch cap (limits.go), read at the conversation start.
		kgo.ProducerBatchMaxBytesFn(s.limits.batchMax),
	)
}

// renewProducer replaces the producer after a produce failure. Called between
// conversations, when nothing is producing. In exactly-once mode the one client cannot be
// replaced without leaving the group; its transactional producer aborts a transaction whose
// outlet topic was deleted and learns the topic anew itself.
func (s *Sidecar) renewProducer() {
	if s.kafka.txn != nil {
		return
	}
	prod, err := s.newProducer()
	if err != nil {
		s.log.Error("cannot renew the Kafka producer; keeping the old one", "error", err)
		return
	}
	s.kafka.prod.Close()
	s.kafka.prod = prod
}

// close stops the poller and the watermark watcher, leaves the group (waiting at most
// leaveTimeout; a static member by its instance id, unless it keeps its membership) and
// closes the client. It may be called twice.
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
		} else if k.instanceID != "" {
			if err := k.staticLeave(ctx); err != nil {
				log.Warn("could not leave the consumer group as a static member; the broker will expire this member's session", "instance_id", k.instanceID, "error", err)
			}
		}
		k.cl.Close()
		k.abort()
		if k.prod != k.cl {
			k.prod.Close()
		}
	})
}

// staticLeave leaves the group as the static member instanceID (KIP-345 LeaveGroup by
// instance id), once the group's own management has stopped: kgo keeps a static member in
// the group at close, for its restart to rejoin without a rebalance.
func (k *kafka) staticLeave(ctx context.Context) error {
	leave := kadm.LeaveGroup(k.group).InstanceIDs(k.instanceID).Reason("the sidecar is shutting down")
	left, err := kadm.NewClient(k.prod).LeaveGroup(ctx, leave)
	if err != nil {
		return err
	}
	for _, m := range left {
		if m.Err != nil && !errors.Is(m.Err, kerr.UnknownMemberID) {
			return m.Err
		}
	}
	return nil
}

// poll moves fetched records into their partitions' queues until ctx ends, pausing a
// partition's fetching at high water and sizing the next fetches with sizer.
func (s *Sidecar) poll(ctx context.Context, cl *kgo.Client, sizer *fetchSizer) {
	for {
		fetches := cl.PollRecords(ctx, 10000)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if perm := (*PermissionError)(nil); errors.As(s.denied(err, topic), &perm) {
				// An ACL removed while running: the partition is fetched again from the same
				// offset once it is granted, so nothing is lost.
				s.log.Error("Kafka refused a fetch: grant the permission it names", "topic", topic, "partition", p, "error", perm)
				return
			}
			s.log.Warn("fetch error", "topic", topic, "partition", p, "error", err)
		})
		// Copy the records out of the fetch before taking the lock: the lock is the one every
		// answer of the process waits on.
		var got []fetched
		fetches.EachPartition(func(f kgo.FetchTopicPartition) {
			g := fetched{topic: f.Topic, partition: f.Partition, hwm: f.HighWatermark, end: f.HighWatermark, first: -1, next: -1}
			if s.cfg.Delivery == ExactlyOnce {
				g.end = f.LastStableOffset
			}
			data := f.Records
			if n := len(f.Records); n > 0 {
				g.first, g.next = f.Records[0].Offset, f.Records[n-1].Offset+1
				if slices.ContainsFunc(data, isControl) {
					data = slices.DeleteFunc(slices.Clone(data), isControl)
				}
			}
			g.records = copyRecords(data)
			for _, r := range f.Records {
				r.Recycle() // copied: its batch's memory goes back to the fetchPool
			}
			got = append(got, g)
		})
		paused := false
		s.mu.Lock()
		for _, g := range got {
			p := s.parts[tp{g.topic, g.partition}]
			if p == nil || !p.owned {
				continue
			}
			s.sawFetch(p, g)
			added := 0
			for _, r := range g.records {
				if s.enqueue(p, r) {
					added++
				}
			}
			p.next = max(p.next, g.next) // past the markers too
			s.metrics.inlet(p.topic).fetched.Add(float64(added))
			if !p.paused && p.aboveHighWater() {
				p.paused = true
				s.stats.Pauses++
				s.kickCommitterLocked() // what waits for the commit may be what fills the queue
				paused = true
			}
		}
		s.mu.Unlock()
		if paused {
			s.applyPauses(cl)
		}
		for _, g := range got {
			if s.pauseBehind != nil && s.pauseBehind(g.topic, g.partition) {
				cl.PauseFetchPartitions(map[string][]int32{g.topic: {g.partition}})
			}
		}
		sizer.update(cl)
		cl.AllowRebalance()
		s.kickSender()
	}
}

// isControl reports whether r is a control record (a transaction marker), not data.
func isControl(r *kgo.Record) bool { return r.Attrs.IsControl() }

// kafkaLogger is the option that routes franz-go's logs to log through kslog: at debug when
// log is at debug, else at warn and above (at info franz-go logs every connection and metadata
// refresh, which would drown the sidecar's own logs).
func kafkaLogger(log *slog.Logger) kgo.Opt {
	min := slog.LevelWarn
	if log.Enabled(context.Background(), slog.LevelDebug) {
		min = slog.LevelDebug
	}
	return kafkalog.Option(log, min)
}
