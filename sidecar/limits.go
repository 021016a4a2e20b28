package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The outlets' limits. A broker refuses a record batch larger than its topic's
// max.message.bytes (the broker's message.max.bytes when the topic sets none) with
// MESSAGE_TOO_LARGE, and refuses it again on every retry: a producer whose batches may be
// larger never moves. So the sidecar reads each outlet topic's limit at every conversation
// start (DescribeConfigs, through kadm: it is off the hot path), gives it to franz-go as that
// topic's batch cap (ProducerBatchMaxBytesFn) and tells the process, in
// Start.max_message_bytes, what one record may be, so that an emit too large for its outlet is
// the process's per-record refusal (a dead letter, or the action's error), never a stream that
// fails forever.
//
// franz-go reads a topic's cap once, when it first meets a partition, and keeps it for the
// client's life. A limit lowered while running is learned on the next MESSAGE_TOO_LARGE: the
// limits of the refused emits' topics are read again, and from then on the sidecar itself
// bounds the bytes in flight to such a topic by its new limit (admit), so no batch franz-go
// builds for it can be larger; the refused emits are written again (at least once:
// rewriteRefused; exactly once: the round's transaction is aborted and the round written
// again). The next
// conversation's at-least-once producer is a new client with the new caps; the exactly-once
// client is the group member and stays, splitting, until the sidecar restarts.

// kafkaDefaultMaxMessageBytes is Kafka's default message.max.bytes (1 MiB and 12 bytes),
// assumed for an outlet topic whose limit cannot be read.
const kafkaDefaultMaxMessageBytes = 1048588

// batchFraming is a record batch's size without its records as franz-go counts it against the
// batch cap: Kafka's 61-byte batch header and a 4-byte array length.
const batchFraming = 65

// recordFraming bounds how many bytes more a record's Kafka framing (length, attributes,
// timestamp and offset deltas, key and value lengths, header count: at most 28 bytes) takes
// than the protobuf framing of the Emit that carries it, whose key, value and headers are
// framed at least as large. Start.max_message_bytes keeps it, and a batch's framing, under the
// smallest outlet limit, so an Emit the process sends under it fits its topic alone.
const recordFraming = 64

// limitsTimeout bounds one read of the outlets' limits.
const limitsTimeout = 15 * time.Second

// maxRewrites bounds how often one emit refused as too large is written again in one round.
const maxRewrites = 3

// Where a limit came from, for the log.
const (
	limitRead    = "read"    // the topic's effective max.message.bytes
	limitDefault = "assumed" // Kafka's default: the limit could not be read
)

// limits holds the effective max.message.bytes of every outlet topic and what franz-go was
// given as each topic's batch cap. It is safe for concurrent use.
type limits struct {
	// view is the current limits by topic, replaced whole on a change: the emits' check
	// (fits) reads it without a lock.
	view atomic.Pointer[map[string]int]
	// splitting counts the topics whose limit is below the cap franz-go holds for them;
	// counted is how many records are counted in flight. At zero, admit and done do nothing.
	splitting atomic.Int32
	counted   atomic.Int32

	mu       sync.Mutex
	topics   map[string]int      // the effective limit by topic
	given    map[string]int      // the largest cap franz-go took for the topic (batchMax)
	inflight map[string]int      // bytes admitted and not yet done, of topics splitting
	sizes    map[*kgo.Record]int // the admitted records and their sizes
	changed  chan struct{}       // closed and replaced when bytes in flight are done
	said     map[string]bool     // topic and reason of a limit that could not be read, logged once
}

func newLimits() *limits {
	l := &limits{topics: map[string]int{}, given: map[string]int{}, inflight: map[string]int{},
		sizes: map[*kgo.Record]int{}, changed: make(chan struct{}), said: map[string]bool{}}
	l.view.Store(&map[string]int{})
	return l
}

// of returns topic's limit: the one read, else Kafka's default.
func (l *limits) of(topic string) int {
	if n, ok := (*l.view.Load())[topic]; ok {
		return n
	}
	return kafkaDefaultMaxMessageBytes
}

// set records topic's limit n and reports whether it changed.
func (l *limits) set(topic string, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.topics[topic]
	if ok && old == n {
		return false
	}
	l.topics[topic] = n
	view := make(map[string]int, len(l.topics))
	for t, v := range l.topics {
		view[t] = v
	}
	l.view.Store(&view)
	l.recount()
	return true
}

// batchMax is franz-go's batch cap of topic (ProducerBatchMaxBytesFn): the topic's limit,
// within the range franz-go accepts. franz-go calls it when it meets a partition of the topic
// and keeps the answer; the largest answer is remembered, for admit to split below it.
func (l *limits) batchMax(topic string) int32 {
	n := min(max(l.of(topic), 512), 1<<30)
	if topic == "" {
		return int32(n) // franz-go's check of the option at client creation
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.given[topic] {
		l.given[topic] = n
		l.recount()
	}
	return int32(n)
}

// forget starts over the caps franz-go was given: a new producer client asks again.
func (l *limits) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.given)
	l.recount()
}

// stale reports whether franz-go holds a cap above a topic's limit.
func (l *limits) stale() bool { return l.splitting.Load() > 0 }

// recount counts the topics splitting. Called with mu held.
func (l *limits) recount() {
	n := int32(0)
	for t, g := range l.given {
		if lim, ok := l.topics[t]; ok && lim < g {
			n++
		}
	}
	l.splitting.Store(n)
}

// admit waits, when franz-go holds a cap above r's topic's limit, until the records in flight
// to the topic leave room for r under the limit, and counts r in flight until done(r): no
// batch franz-go builds for the topic can then be over its limit. A record alone over it goes
// when nothing else is in flight, for the broker to refuse. It returns at once otherwise, or
// when ctx ends.
func (l *limits) admit(ctx context.Context, r *kgo.Record) {
	if l.splitting.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.topics[r.Topic]
	if !ok || lim >= l.given[r.Topic] {
		return // franz-go caps this topic's batches itself
	}
	size := recordSize(r)
	for l.inflight[r.Topic] > 0 && batchFraming+l.inflight[r.Topic]+size > lim {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return
		}
		l.mu.Lock()
	}
	l.inflight[r.Topic] += size
	l.sizes[r] = size
	l.counted.Add(1)
}

// done uncounts r once its write has an outcome, if admit counted it. Call it once for every
// record produced.
func (l *limits) done(r *kgo.Record) {
	if l.counted.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	size, ok := l.sizes[r]
	if !ok {
		return
	}
	delete(l.sizes, r)
	l.counted.Add(-1)
	l.inflight[r.Topic] -= size
	close(l.changed)
	l.changed = make(chan struct{})
}

// fits returns the error of an emit r too large for its topic on its own: a record batch
// holding only r would be over the topic's max.message.bytes. The error matches
// errEmitTooLarge and kerr.MessageTooLarge and names the topic and its limit.
func (l *limits) fits(r *kgo.Record) error {
	lim := l.of(r.Topic)
	if size := recordSize(r); batchFraming+size > lim {
		return fmt.Errorf("%w: the emit is %d bytes as a Kafka record and topic %s accepts records of at most %d bytes (its max.message.bytes is %d, less %d bytes of record batch framing): %w",
			errEmitTooLarge, size, r.Topic, lim-batchFraming, lim, batchFraming, kerr.MessageTooLarge)
	}
	return nil
}

// recordSize is at least the size of r as a record of a Kafka record batch (v2): its fields,
// with the timestamp and offset deltas at their largest.
func recordSize(r *kgo.Record) int {
	keyLen := -1
	if r.Key != nil {
		keyLen = len(r.Key)
	}
	n := 1 + 10 + 5 + // attributes, timestamp delta, offset delta
		varintLen(keyLen) + len(r.Key) + varintLen(len(r.Value)) + len(r.Value) + varintLen(len(r.Headers))
	for _, h := range r.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return varintLen(n) + n
}

// varintLen is the length of n as a zigzag varint, Kafka's encoding of a record's lengths.
func varintLen(n int) int {
	zz := uint64(n<<1) ^ uint64(n>>63)
	return (bits.Len64(zz|1) + 6) / 7
}

// outletLimits reads every outlet topic's limit at a conversation start and returns
// Start.max_message_bytes: FLOW_MAX_MESSAGE_BYTES, or less where an outlet accepts less for
// one record (the smallest outlet decides for all: Start has one limit). An at-least-once
// producer that holds a cap above a limit is replaced by one that takes the new caps.
func (s *Sidecar) outletLimits(ctx context.Context) uint32 {
	var topics []string
	for _, o := range s.cfg.Outlets {
		if !slices.Contains(topics, o.Topic) {
			topics = append(topics, o.Topic)
		}
	}
	if len(topics) == 0 {
		return uint32(s.cfg.MaxMessageBytes)
	}
	s.readLimits(ctx, topics)
	if s.kafka.txn == nil && s.limits.stale() {
		s.renewProducer()
	}
	most := s.cfg.MaxMessageBytes
	for _, t := range topics {
		most = min(most, s.limits.of(t)-batchFraming-recordFraming)
	}
	if most < 1 {
		// Every emit is refused: the process says which outlet, and the stream stalls.
		s.log.Warn("an outlet topic's max.message.bytes leaves no room for a record: every emit is refused", "max_message_bytes", most)
		most = 1
	}
	return uint32(most)
}

// readLimits reads the effective max.message.bytes of topics into s.limits, logging a change.
// Where a topic's limit cannot be read it keeps the one read before, else assumes Kafka's
// default, and says so once for the topic and the reason.
func (s *Sidecar) readLimits(ctx context.Context, topics []string) {
	ctx, cancel := context.WithTimeout(ctx, limitsTimeout)
	defer cancel()
	// Not closed: the admin client is the Kafka client's, whose owner closes it.
	rcs, reqErr := kadm.NewClient(s.kafka.cl).DescribeTopicConfigs(ctx, topics...)
	for _, t := range topics {
		rc, err := rcs.On(t, nil)
		if err != nil && reqErr != nil {
			err = reqErr
		} else if err == nil {
			err = rc.Err
		}
		if err == nil {
			n, ok := effectiveMaxMessageBytes(rc.Configs)
			if ok {
				if s.limits.set(t, n) {
					s.log.Info("topic limit", "topic", t, "max_message_bytes", n, "source", limitRead)
				}
				continue
			}
			err = errNoLimit
		}
		s.limitUnread(t, err)
	}
}

// limitUnread records that topic's limit could not be read (err says why): Kafka's default is
// assumed unless a limit was read before, and that is said once per topic and reason.
func (s *Sidecar) limitUnread(topic string, err error) {
	reason := "error"
	var hint string
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.SecurityDisabled):
		reason, hint = "denied", "grant the sidecar's principal DescribeConfigs on the topic to use its own limit"
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		reason, hint = "unknown", "the topic does not exist (yet); its limit is read again at the next conversation"
	}
	l := s.limits
	l.mu.Lock()
	_, known := l.topics[topic]
	first := !l.said[topic+"/"+reason]
	l.said[topic+"/"+reason] = true
	l.mu.Unlock()
	if known && reason == "error" {
		if first {
			s.log.Warn("cannot read an outlet topic's max.message.bytes; keeping the one read before", "topic", topic, "max_message_bytes", l.of(topic), "error", err)
		}
		return
	}
	l.set(topic, kafkaDefaultMaxMessageBytes)
	if first {
		s.log.Warn("cannot read an outlet topic's max.message.bytes; assuming Kafka's default", "topic", topic, "max_message_bytes", kafkaDefaultMaxMessageBytes, "source", limitDefault, "hint", hint, "error", err)
	}
}

// effectiveMaxMessageBytes returns the limit a topic's described configs give: its
// max.message.bytes, which a broker resolves to its own message.max.bytes when the topic sets
// none. kfake instead lists the broker's setting under the broker's name beside its
// max.message.bytes default, so that one counts when the topic sets nothing itself.
func effectiveMaxMessageBytes(cs []kadm.Config) (int, bool) {
	var topic, broker *kadm.Config
	for i := range cs {
		switch cs[i].Key {
		case "max.message.bytes":
			topic = &cs[i]
		case "message.max.bytes":
			broker = &cs[i]
		}
	}
	pick := topic
	if broker != nil && (topic == nil || topic.Source != kmsg.ConfigSourceDynamicTopicConfig) {
		pick = broker
	}
	if pick == nil || pick.Value == nil {
		return 0, false
	}
	n, err := strconv.Atoi(*pick.Value)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// refusals are the emits of one at-least-once commit round to be written again: those the
// broker refused as too large (their topic's limit was lowered since it was read), and those
// written after a refused one of their partition, which are written again after it so that the
// partition's order holds (a duplicate, as at least once allows). Its methods are safe for
// concurrent use; the zero value is ready.
type refusals struct {
	n     atomic.Int32 // len(recs): 0 lets keep answer without the lock
	mu    sync.Mutex
	recs  []refusal
	parts map[tp]bool
	tries map[*kgo.Record]int
}

type refusal struct {
	r       *kgo.Record
	promise func(*kgo.Record, error)
}

// keep reports whether the outcome err of r's write is not final: r is kept, with the promise
// to call once it is, for rewriteRefused to write again.
func (f *refusals) keep(r *kgo.Record, err error, promise func(*kgo.Record, error)) bool {
	switch {
	case err == nil && f.n.Load() == 0:
		return false
	case err != nil && (!errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, errEmitTooLarge)):
		return false // another failure, or an emit too large on its own: final
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	part := tp{r.Topic, r.Partition}
	if err == nil && !f.parts[part] || f.tries[r] >= maxRewrites {
		return false
	}
	if f.parts == nil {
		f.parts, f.tries = map[tp]bool{}, map[*kgo.Record]int{}
	}
	f.parts[part] = true
	f.recs = append(f.recs, refusal{r, promise})
	f.n.Add(1)
	return true
}

// take returns the emits kept and starts a new pass.
func (f *refusals) take() []refusal {
	f.mu.Lock()
	defer f.mu.Unlock()
	recs := f.recs
	f.recs = nil
	clear(f.parts)
	for _, x := range recs {
		f.tries[x.r]++
	}
	f.n.Store(0)
	return recs
}

// rewriteRefused writes the kept emits of f again with produce, each with its promise, after
// reading their topics' limits again: from then on admit holds the writes to those topics
// under their new limits. An emit over its topic's new limit on its own cannot be split: its promise gets
// the error naming the topic and the limit (the round fails, and the emit's partition stalls).
// It adds the emits to wg and reports whether there were any; the caller waits for wg and
// calls it again, until it reports none.
func (s *Sidecar) rewriteRefused(ctx context.Context, f *refusals, wg *sync.WaitGroup, produce func(context.Context, *kgo.Record, func(*kgo.Record, error))) bool {
	recs := f.take()
	if len(recs) == 0 {
		return false
	}
	var topics []string
	for _, x := range recs {
		if !slices.Contains(topics, x.r.Topic) {
			topics = append(topics, x.r.Topic)
		}
	}
	s.readLimits(ctx, topics)
	s.countLimitRefusal()
	s.log.Warn("the broker refused emits as too large: an outlet topic's limit was lowered; it is read again and the emits are written again in batches under it",
		"emits", len(recs), "topics", topics)
	wg.Add(len(recs))
	for _, x := range recs {
		if err := s.limits.fits(x.r); err != nil {
			x.promise(x.r, err)
			continue
		}
		s.limits.admit(ctx, x.r)
		produce(ctx, x.r, x.promise)
	}
	return true
}

// refusedTooLarge decides what an exactly-once round whose write failed with err does next.
// When the broker refused emits as too large, the limits of the round's topics are read again
// and retry is true: the round is aborted and written again, split under the new limits. An
// emit over its topic's new limit on its own fails the round instead (fail names the topic and
// the limit). Any other err: neither.
func (s *Sidecar) refusedTooLarge(ctx context.Context, round []*batch, err error) (retry bool, fail error) {
	if !errors.Is(err, kerr.MessageTooLarge) {
		return false, nil
	}
	var topics []string
	for _, b := range round {
		for _, r := range b.emits {
			if !slices.Contains(topics, r.Topic) {
				topics = append(topics, r.Topic)
			}
		}
	}
	s.readLimits(ctx, topics)
	for _, b := range round {
		for _, r := range b.emits {
			if err := s.limits.fits(r); err != nil {
				return false, streamFailed(causeProduce, "%w: an emit of batch %d (topic %s partition %d offsets %d-%d) cannot be written: %w: the transaction is aborted and the partition stalls at this batch; raise the topic's max.message.bytes, or have the action emit smaller records",
					errProduce, b.id, b.p.topic, b.p.partition, b.last.in.GetOffset()-int64(b.n-1), b.last.in.GetOffset(), err)
			}
		}
	}
	s.countLimitRefusal()
	s.log.Warn("the broker refused emits as too large: an outlet topic's limit was lowered; it is read again and the round written again in batches under it", "topics", topics)
	return true, nil
}

func (s *Sidecar) countLimitRefusal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.LimitRefusals++
}
