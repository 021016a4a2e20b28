// Package sidecar is the standard Ankka Flow sidecar: it reads a streamlet's inlet topics from
// Kafka as one consumer group, hands the records to the streamlet's process as Batches over the
// gRPC Streamlet.Run conversation (the process is the server on 127.0.0.1), produces the
// process's Emits to the outlet topics once a batch is acknowledged, and only then commits the
// batch's offsets (with FLOW_DELIVERY=exactly-once, both in one Kafka transaction). It keeps
// every rule of the streamlet protocol from the sidecar's side: discovery and its refusals, one
// batch in flight per partition in offset order, commit after the write, failing the stream
// and redelivering from the last commit indefinitely, discarding on rebalance, and stall
// warnings as Kubernetes Events.
//
// [ConfigFromEnv] reads the deploy configuration (FLOW_* variables, TLS and SASL), [New] and
// [Sidecar.Run] run it. Its API is what cmd/millrace, cmd/millrace/internal/local and the benchmarks use.
// Errors keep their cause: the logged error of an emit the broker refused matches
// kerr.MessageTooLarge.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

var (
	// errConfig is matched by the *configError ConfigFromEnv returns.
	errConfig = errors.New("sidecar: bad deploy configuration")
	// ErrRefused is wrapped by Run when discovery finds the process unfit (protocol version,
	// descriptor, config): the problems were reported to the process and logged; the sidecar
	// must exit non-zero.
	ErrRefused = errors.New("sidecar: the streamlet process was refused at discovery")
	// errStreamFailed is wrapped by every cause of a failed stream (logged, then retried).
	errStreamFailed = errors.New("sidecar: stream failed")
	// errRecordTooLarge is wrapped when an input record cannot fit in a Batch under the
	// message limit; it names the record's topic, partition and offset.
	errRecordTooLarge = errors.New("sidecar: input record larger than the message limit")
	// errEmitTooLarge is wrapped when an emit is larger than its outlet topic accepts for one
	// record (max.message.bytes, less a record batch's framing); it names the topic and the
	// limit, and kerr.MessageTooLarge is in the chain too.
	errEmitTooLarge = errors.New("sidecar: an emit is larger than its outlet topic accepts")
	// errNoLimit is logged when an outlet topic's described configs hold no usable
	// max.message.bytes (Kafka's default is assumed).
	errNoLimit = errors.New("sidecar: the topic's configs hold no max.message.bytes")
	// errProduce is wrapped when an emit cannot be written to its outlet's topic.
	errProduce = errors.New("sidecar: produce failed")
	// errCommit is wrapped when the broker refuses an offset commit.
	errCommit = errors.New("sidecar: offset commit failed")
	// errBatchEmitBudget is wrapped when a batch of several records emits more than
	// FLOW_MAX_BATCH_EMIT_BYTES: its partition is delivered again in halves.
	errBatchEmitBudget = errors.New("sidecar: a batch's emits exceed the per-batch emit budget")
	// errRecordEmitBudget is wrapped when one record alone emits more than
	// FLOW_MAX_BATCH_EMIT_BYTES: its partition stalls there until the budget is raised.
	errRecordEmitBudget = errors.New("sidecar: one record's emits exceed the per-batch emit budget")
	// ErrFenced is wrapped by Run in exactly-once mode when the broker fenced the sidecar's
	// transactional producer: another sidecar now writes with its transactional id. Nothing
	// of the open transaction was committed; the sidecar must exit non-zero.
	ErrFenced = errors.New("sidecar: fenced by a newer sidecar with the same transactional id")
	// ErrPermission is wrapped by Run when the broker does not allow the sidecar's principal
	// an operation it needs (a missing ACL); the error is a *PermissionError naming it.
	ErrPermission = errors.New("sidecar: Kafka does not allow an operation the sidecar needs")
	// errTxnDenied is wrapped, with a *PermissionError, when the broker stops allowing the
	// transactional id while running: the sidecar stops, as when fenced.
	errTxnDenied = errors.New("sidecar: Kafka refused the transactional id while running")
	// ErrChangelog is wrapped by Run when a stateful inlet's changelog topic cannot keep
	// state (missing, not compacted, partitioned unlike its inlet, out of the principal's
	// reach; or, while running, lacking a partition its inlet topic grew) or cannot be
	// checked: a *ChangelogError lists every problem; the sidecar must exit non-zero.
	ErrChangelog = errors.New("sidecar: the changelog topics cannot keep state")
)

// Sidecar runs one streamlet instance's side of the protocol. Build it with New and call Run
// once.
type Sidecar struct {
	cfg    Config
	log    *slog.Logger
	conn   *grpc.ClientConn
	inlets map[string]*Inlet // by topic

	// commitMu is held by the commit path from the ownership check until the commit is done,
	// and by rebalance callbacks while they change ownership: never a commit for a partition
	// no longer owned. Lock order: commitMu, then mu.
	commitMu sync.Mutex
	mu       sync.Mutex
	parts    map[tp]*partition
	order    []*partition // every partition ever assigned, in order of first assignment
	next     int          // round-robin cursor into order, so no partition starves
	conv     *conversation
	stats    stats
	// lastCommit is when offsets were last committed (a transaction last ended): the next
	// commit is due FLOW_COMMIT_INTERVAL later.
	lastCommit time.Time
	// handed is signalled (with mu) whenever a revoked partition's batches may have finished:
	// a commit round ended, a conversation's committer stopped (handOver waits on it).
	handed *sync.Cond

	// pauseMu serializes applyPauses: the client's paused partitions follow the flags.
	// Lock order: commitMu, pauseMu, mu.
	pauseMu sync.Mutex

	kafka *kafka // nil until the first discovery succeeds
	// limits are the outlet topics' max.message.bytes, read at each conversation start.
	limits *limits

	metrics *metrics
	// ready is the readiness condition: a conversation is live. The readiness file and
	// /readyz show it.
	ready atomic.Bool
	// denial is the permission the broker last refused while running, until a commit
	// succeeds again; the sidecar is not ready meanwhile (readiness.go).
	denial atomic.Pointer[PermissionError]
	// lagRefresh is how often the owned partitions' high watermarks are asked for.
	lagRefresh time.Duration

	// dropBatch, set by tests only, strands a partition on purpose: a batch it names counts as
	// sent but never goes (the watchdog's test).
	dropBatch func(topic string, partition int32) bool
	// pauseBehind, set by tests only, pauses a partition it names in the Kafka client behind
	// the sidecar's back after a fetch, as a revocation of a paused partition once left them.
	pauseBehind func(topic string, partition int32) bool

	// version is the protocol version the sidecar speaks: protocol.Version; tests make it
	// speak an earlier one.
	version string

	now func() time.Time
	// after is time.After on the clock of now: the commit interval's and the hand-over's
	// timers. Tests replace it with now.
	after func(time.Duration) <-chan time.Time
	// sleep waits d, or until ctx ends (then it returns false): the backoffs between
	// attempts. Tests replace it, with now, so as not to wait.
	sleep func(ctx context.Context, d time.Duration) bool

	// changelogs are the stateful inlets' changelog topics. stateCtx is the restores'
	// context, ended by stopState when Run ends; restores counts them and the waits of the
	// revoked partitions' kept files (keepRevoked).
	changelogs map[string]bool
	// cancelRun ends Run's context; stopped is the error Run then returns (stopWith). Both
	// guarded by mu.
	cancelRun context.CancelFunc
	stopped   error
	// changelogParts are the changelogs' partition counts, as last read (guarded by mu).
	changelogParts map[string]int32
	stateCtx       context.Context
	stopState      context.CancelFunc
	restores       sync.WaitGroup
}

// stats are counters of a Sidecar's work. RecordsCommitted and StallWarnings read two of
// them; the tests read them all.
type stats struct {
	Conversations     int   // Starts sent
	BatchesSent       int   // Batches sent
	BatchesCommitted  int   // batches whose offsets were committed
	RecordsCommitted  int64 // input records committed
	EmitsProduced     int64 // emits confirmed by the broker
	BufferedRecords   int   // fetched, not yet committed
	BufferedBytes     int64
	PeakBufferedBytes int64
	Pauses            int // times a partition's fetching was paused at high water
	StallWarnings     int // PartitionStalled warnings raised
	HandOverTimeouts  int // revocations whose batches did not finish in time and were discarded
	LimitRefusals     int // writes the broker refused as too large, written again under limits read again

	// The emit budgets (budget.go): the conversation's emits not yet written, their peak,
	// and how often a batch waited for some to be written.
	HeldEmitBytes     int64
	PeakHeldEmitBytes int64
	EmitBudgetWaits   int
}

// New returns a Sidecar for cfg that logs to logger. It dials nothing yet. Zero values in a
// hand-built cfg take the defaults of the one table (settings.go: batch limits, message limit,
// timeouts, emit budgets, backoffs, group), and cfg is checked as ConfigFromEnv checks it; cfg
// is copied and not kept.
func New(cfg *Config, logger *slog.Logger) (*Sidecar, error) {
	c := *cfg
	c.withDefaults()
	if ps := c.validate(); len(ps) > 0 {
		return nil, fmt.Errorf("%w: %s", errConfig, strings.Join(ps, "; "))
	}
	if c.Deployed == nil || c.Deployed.GetStreamlet() == nil {
		return nil, fmt.Errorf("%w: no deployed descriptor", errConfig)
	}
	s := &Sidecar{cfg: c, log: logger, inlets: map[string]*Inlet{}, parts: map[tp]*partition{}, limits: newLimits(), lagRefresh: defaultLagRefresh, version: protocol.Version, now: time.Now, after: time.After, sleep: sleep}
	s.handed = sync.NewCond(&s.mu)
	s.changelogs, s.changelogParts = map[string]bool{}, map[string]int32{}
	for i := range s.cfg.Inlets {
		s.inlets[s.cfg.Inlets[i].Topic] = &s.cfg.Inlets[i]
		if t := s.cfg.Inlets[i].StateTopic; t != "" {
			s.changelogs[t] = true
		}
	}
	s.stateCtx, s.stopState = context.WithCancel(context.Background())
	s.metrics = newMetrics(s)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ProcessPort))
	// No keepalive pings: the spec promises a process's default ping policy is never provoked.
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Static flow-control windows turn gRPC's BDP estimator off: it sends a PING for
		// nearly every burst of the process's emits (pings the rule above would rather not
		// send) and each is a write on both sides. See streamWindow.
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(streamWindow),
		grpc.WithConnectParams(processReconnect),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(c.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(c.MaxMessageBytes),
		))
	if err != nil {
		return nil, fmt.Errorf("sidecar: cannot set up the connection to the process at %s: %w", addr, err)
	}
	s.conn = conn
	return s, nil
}

// processReconnect is how the connection to the process is made again after it restarts:
// quickly (from 100 ms, at most 2 s apart), since the sidecar's own backoffs (Config's
// DiscoveryBackoff and FailureBackoff) pace the retries that matter.
var processReconnect = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// streamWindow is the HTTP/2 flow-control window of the Run stream and of its connection:
// how much the process may send before the sidecar has read it. 1 MiB lets the emits of
// several batches stream without a window update (one per 256 KiB read) and is below the
// 16 MiB the BDP estimator may grow a window to; a message larger than it still goes
// through (gRPC widens the window for a message it is reading).
const streamWindow = 1 << 20

// snapshot returns a copy of the counters. It is safe to call concurrently with Run.
func (s *Sidecar) snapshot() stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// RecordsCommitted returns how many input records the sidecar has committed so far. It is
// safe to call concurrently with Run.
func (s *Sidecar) RecordsCommitted() int64 { return s.snapshot().RecordsCommitted }

// StallWarnings returns how many PartitionStalled warnings the sidecar has raised so far. It
// is safe to call concurrently with Run.
func (s *Sidecar) StallWarnings() int { return s.snapshot().StallWarnings }

// Conversations returns how many conversations the sidecar has started (Starts sent): none
// until discovery accepted the process. It is safe to call concurrently with Run.
func (s *Sidecar) Conversations() int { return s.snapshot().Conversations }

// Run removes a stale readiness file, serves the metrics and health endpoints when
// FLOW_METRICS_ADDR is set, then discovers the process and converses with it, failing and
// recovering from every stream failure indefinitely, until ctx is done. When ctx is done it
// shuts down gracefully (Stop, bounded wait, produce and commit what was acked), closes the
// metrics listener and returns nil. It returns an error wrapping ErrRefused when discovery
// refuses the process, and other errors only when the metrics address cannot be listened on
// or Kafka cannot be set up at all, and one wrapping ErrChangelog when a changelog cannot keep
// state, at start or at the assignment of a partition it has not (stopWith). Run must be
// called once.
func (s *Sidecar) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.cancelRun = cancel
	s.mu.Unlock()
	err := s.run(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.stopped != nil {
		return s.stopped
	}
	return err
}

// stopWith shuts the sidecar down gracefully, as the end of Run's context does, and makes
// Run return err: a problem found while running that a new conversation cannot mend.
func (s *Sidecar) stopWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped = err
	}
	s.cancelRun()
}

func (s *Sidecar) run(ctx context.Context) error {
	defer s.conn.Close()
	lis, err := s.listenMetrics()
	if err != nil {
		return err
	}
	if lis != nil {
		// The endpoints outlive ctx: they answer through the graceful shutdown.
		mctx, stop := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() { defer close(served); s.serveMetrics(mctx, lis) }()
		defer func() { stop(); <-served }()
		s.log.Info("serving metrics and health", "address", lis.Addr().String(), "paths", "/metrics /healthz /readyz")
	}
	if s.cfg.Events != nil {
		defer s.cfg.Events.CloseIdleConnections()
	}
	s.removeReadiness()
	defer s.removeReadiness()
	// After the Kafka client's close (the revocations it makes), the stores close.
	defer s.closeStores()
	defer func() {
		if s.kafka != nil {
			s.kafka.close(s.log)
		}
	}()

	if err := s.checkKafka(ctx); err != nil {
		return err
	}
	if err := s.checkChangelogs(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	stateLis, err := s.listenState()
	if err != nil {
		return err
	}
	if stateLis != nil {
		defer s.serveState(stateLis)()
	}
	failures := s.newBackoff(s.cfg.FailureBackoff)
	for {
		start, err := s.discover(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if s.kafka == nil {
			k, err := s.openKafka()
			if err != nil {
				return err
			}
			s.kafka = k
			if k.txn != nil {
				if err := s.initProducer(ctx); err != nil || ctx.Err() != nil {
					return err
				}
			}
		}
		start.MaxMessageBytes = s.outletLimits(ctx)
		s.changelogLimits(ctx)
		began := s.now()
		committedBefore := s.snapshot().BatchesCommitted
		err = s.converse(ctx, start)
		if err != nil {
			s.metrics.failures.WithLabelValues(causeOf(err)).Inc()
		}
		if err == nil || ctx.Err() != nil {
			if err != nil {
				s.log.Warn("stream ended during shutdown", "error", err)
			}
			return nil
		}
		if errors.Is(err, ErrRefused) {
			return err // the State service's Open was refused: it can only repeat
		}
		if errors.Is(err, ErrFenced) {
			s.log.Error("fenced; stopping", "error", err, "transactional_id", s.cfg.TransactionalID)
			return err
		}
		if errors.Is(err, errTxnDenied) {
			s.log.Error("Kafka refused the transactional id; stopping", "error", err, "transactional_id", s.cfg.TransactionalID)
			return err
		}
		s.log.Error("stream failed; redelivering from the last commit after a backoff", "error", err, "conversation", start.GetConversationId())
		if errors.Is(err, errProduce) {
			s.renewProducer()
		}
		s.checkStalls(ctx)
		// The backoff paces a process that keeps failing; one that made progress (committed
		// something), that lived long, or whose batch the sidecar just halved is not in a
		// crash loop, and waits the shortest time.
		progressed := s.snapshot().BatchesCommitted > committedBefore
		if progressed || s.now().Sub(began) > s.cfg.FailureBackoff.Max || errors.Is(err, errBatchEmitBudget) {
			failures.Reset()
		}
		wait := failures.NextBackOff()
		s.log.Info("backing off before rediscovery", "wait", wait, "progressed", progressed)
		if !s.sleep(ctx, wait) {
			return nil
		}
	}
}

// sleep is the real Sidecar.sleep.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *Sidecar) newBackoff(b Backoff) *backoff.ExponentialBackOff {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = b.Initial
	eb.MaxInterval = b.Max
	eb.Multiplier = 2
	eb.RandomizationFactor = 0
	eb.MaxElapsedTime = 0
	eb.Reset()
	return eb
}

// bindings returns the Start's port bindings of the deployed configuration.
func (s *Sidecar) bindings() (in, out []*flowv1.PortBinding) {
	for _, i := range s.cfg.Inlets {
		in = append(in, &flowv1.PortBinding{Port: i.Port, Topic: i.Topic})
	}
	for _, o := range s.cfg.Outlets {
		out = append(out, &flowv1.PortBinding{Port: o.Port, Topic: o.Topic})
	}
	return in, out
}
