package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/sidecar"
	"github.com/ankka-flow/millrace/stdio"
)

// Errors of Run; each wrapping error says which streamlet, line or partition and why.
var (
	// ErrInput is returned for an input line that is not a record envelope (or, with Bare, not
	// JSON); it names the line.
	ErrInput = errors.New("local: bad input line")
	// ErrStalled is returned when a partition stalled: a batch kept failing for StallAfter.
	ErrStalled = errors.New("local: a partition stalled")
	// ErrRefused is returned when a sidecar refused its process at discovery.
	ErrRefused = errors.New("local: the streamlet was refused at discovery")
	// ErrInterrupted is returned when ctx ended before every output was committed.
	ErrInterrupted = errors.New("local: interrupted")
)

// Options tune Run. The zero value runs an in-memory broker, reads no input and stops when
// everything is committed.
type Options struct {
	Brokers    []string      // a real Kafka cluster; none: an in-process broker (kfake)
	DataDir    string        // the in-process broker keeps its data here (none: in memory)
	Partitions int           // of each topic Run creates (default 1: outputs in input order)
	Input      io.Reader     // input lines, produced as records (nil: none)
	Bare       bool          // each input line is a payload, not an envelope
	Follow     bool          // keep running when the input is done, until ctx ends
	Out        io.Writer     // where output records go, one JSON line each (nil: discarded)
	Logger     *slog.Logger  // logs of the sidecars, bridges and actions (nil: discarded)
	Progress   io.Writer     // where a progress line is redrawn every half second (nil: none)
	StallAfter time.Duration // a batch failing for this long stops the run (default 20s)
	Version    string        // millrace's version, for discovery
}

// Summary is what a run did.
type Summary struct {
	In        int            `json:"in"`        // input lines produced
	Committed int64          `json:"committed"` // input records processed and committed, over every streamlet
	Out       map[string]int `json:"out"`       // output records printed, by outlet
	Failed    int            `json:"failed"`    // records whose batch failed (each is redelivered)
	Retries   int            `json:"retries"`   // attempts the actions failed and retried
	Elapsed   time.Duration  `json:"elapsedNs"`
	Complete  bool           `json:"complete"` // every input line was processed and committed
}

// Total returns the number of output records.
func (s *Summary) Total() int {
	n := 0
	for _, v := range s.Out {
		n += v
	}
	return n
}

// String is the summary line Run's caller prints at the end.
func (s *Summary) String() string {
	var outs []string
	for _, k := range slices.Sorted(maps.Keys(s.Out)) {
		outs = append(outs, fmt.Sprintf("%s %d", k, s.Out[k]))
	}
	detail := ""
	if len(outs) > 0 {
		detail = " (" + strings.Join(outs, ", ") + ")"
	}
	return fmt.Sprintf("%d records in, %d committed, %d out%s, %d failed, %d retried, in %s", s.In, s.Committed, s.Total(), detail, s.Failed, s.Retries, s.Elapsed.Round(time.Millisecond))
}

// runner is one Run.
type runner struct {
	p     *Pipeline
	opts  Options
	log   *slog.Logger
	start time.Time

	admin   *kgo.Client
	outlets map[string]outletName // topic → who writes it

	mu       sync.Mutex
	in       int
	out      map[string]int
	pos      map[string]map[int32]int64 // printer: next offset per outlet partition
	inputErr error
	inputEOF bool

	streamlets []*running
}

type outletName struct{ streamlet, port string }

// running is one streamlet's bridge and sidecar.
type running struct {
	s       *Streamlet
	sc      *sidecar.Sidecar
	metrics *bridge.Metrics
	group   string
	errs    *lastError
	sidecar *task
	bridge  *task
}

// task is a goroutine running fn until its context is cancelled.
type task struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func startTask(ctx context.Context, fn func(context.Context) error) *task {
	ctx, cancel := context.WithCancel(ctx)
	t := &task{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(t.done)
		t.err = fn(ctx)
	}()
	return t
}

// stop cancels the task and waits for it. It may be called more than once.
func (t *task) stop() error {
	t.cancel()
	<-t.done
	return t.err
}

// ended reports whether the task returned, and its error.
func (t *task) ended() (bool, error) {
	select {
	case <-t.done:
		return true, t.err
	default:
		return false, nil
	}
}

// Run runs the pipeline: it starts the broker (unless opts.Brokers names one), creates the
// topics, runs each streamlet's bridge and sidecar exactly as in production (the sidecar
// talks gRPC to the bridge on a free 127.0.0.1 port), produces the input lines, and writes
// every record its streamlets produce to opts.Out. It returns when the input is done and every
// input record was processed and committed (never with Follow), when ctx ends (wrapping
// ErrInterrupted unless Follow), or on the first fault that would keep it from finishing: a
// bad input line (ErrInput), a refused discovery (ErrRefused), a stalled partition
// (ErrStalled). The summary is returned in every case but a failed start.
func Run(ctx context.Context, p *Pipeline, opts Options) (*Summary, error) {
	if opts.Partitions <= 0 {
		opts.Partitions = 1
	}
	if opts.StallAfter <= 0 {
		opts.StallAfter = 20 * time.Second
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &runner{p: p, opts: opts, log: opts.Logger, start: time.Now(), outlets: map[string]outletName{}, out: map[string]int{}, pos: map[string]map[int32]int64{}}
	for _, s := range p.Streamlets {
		for _, o := range s.Action.Outlets {
			r.outlets[s.Bindings[o.Name]] = outletName{s.Action.Name, o.Name}
		}
	}

	brokers := opts.Brokers
	if len(brokers) == 0 {
		kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(opts.Partitions)}
		if opts.DataDir != "" {
			kopts = append(kopts, kfake.DataDir(opts.DataDir))
		}
		cluster, err := kfake.NewCluster(kopts...)
		if err != nil {
			return nil, fmt.Errorf("local: starting the in-process Kafka broker: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(topicMaxMessageBytes), kgo.WithLogger(kgoLog{r.log.With("component", "local")}))
	if err != nil {
		return nil, fmt.Errorf("local: Kafka client for %s: %w", strings.Join(brokers, ","), err)
	}
	defer admin.Close()
	r.admin = admin
	if err := r.createTopics(ctx); err != nil {
		return nil, err
	}
	// print only what this run produces: from the outlets' end offsets now
	ends, err := r.endOffsets(ctx, slices.Collect(maps.Keys(r.outlets)))
	if err != nil {
		return nil, err
	}
	r.pos = ends

	runCtx, stopAll := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAll()
	var printers sync.WaitGroup
	printCtx, stopPrinting := context.WithCancel(runCtx)
	if err := r.startPrinter(printCtx, brokers, &printers); err != nil {
		stopPrinting()
		return nil, err
	}
	var started []*running
	stop := func() {
		for _, st := range started { // the sidecars first: they stop their conversations
			_ = st.sidecar.stop()
		}
		for _, st := range started {
			_ = st.bridge.stop()
		}
		stopPrinting()
		printers.Wait()
	}
	for _, s := range p.Streamlets {
		st, err := r.startStreamlet(runCtx, s, brokers)
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, st)
	}
	r.streamlets = started

	inputDone := make(chan struct{})
	go r.produceInput(runCtx, inputDone)

	err = r.watch(ctx, inputDone)
	stop()
	stopAll()
	select {
	case <-inputDone:
	case <-time.After(time.Second): // a read of an interactive stdin cannot be interrupted
	}
	return r.summary(err == nil), err
}

func (r *runner) summary(complete bool) *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Summary{In: r.in, Out: map[string]int{}, Elapsed: time.Since(r.start), Complete: complete}
	for k, v := range r.out {
		s.Out[k] = v
	}
	for _, st := range r.streamlets {
		s.Committed += st.sc.Stats().RecordsCommitted
		s.Failed += int(counter(st.metrics.Registry(), "millrace_items_total", "failed"))
		s.Retries += int(counter(st.metrics.Registry(), "millrace_retries_total", ""))
	}
	return s
}

// counter reads a counter (with the label outcome=label when label is not empty).
func counter(reg *prometheus.Registry, name, label string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == label {
					match = true
				}
			}
			if match {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// watch waits for the end of the run: done, a fault, or ctx.
func (r *runner) watch(ctx context.Context, inputDone <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastDraw, lastCommitted := time.Now(), int64(0)
	defer r.clearProgress()
	for {
		select {
		case <-ctx.Done():
			if r.opts.Follow {
				return nil
			}
			return fmt.Errorf("%w before every output was committed", ErrInterrupted)
		case <-tick.C:
		}
		for _, st := range r.streamlets {
			if ended, err := st.sidecar.ended(); ended {
				if errors.Is(err, sidecar.ErrRefused) {
					return &refusedError{streamlet: st.s.Action.Name, err: err}
				}
				return fmt.Errorf("local: the sidecar of %s stopped: %v", st.s.Action.Name, orStopped(err))
			}
			if ended, err := st.bridge.ended(); ended {
				return fmt.Errorf("local: the bridge of %s stopped: %v", st.s.Action.Name, orStopped(err))
			}
			if st.sc.Stats().StallWarnings > 0 {
				return fmt.Errorf("%w: streamlet %s: a batch kept failing for %s and no record after it is processed; the last error: %s", ErrStalled, st.s.Action.Name, r.opts.StallAfter, st.errs.get())
			}
		}
		r.mu.Lock()
		inErr, eof := r.inputErr, r.inputEOF
		r.mu.Unlock()
		if inErr != nil {
			return inErr
		}
		if since := time.Since(lastDraw); since >= 500*time.Millisecond {
			lastCommitted = r.drawProgress(since, lastCommitted)
			lastDraw = time.Now()
		}
		if !eof || r.opts.Follow {
			continue
		}
		done, err := r.caughtUp(ctx)
		if err != nil {
			r.log.Warn("checking progress", "error", err)
			continue
		}
		if done {
			return nil
		}
	}
}

// drawProgress redraws the progress line: records in, committed, out, failed, and the rate of
// commits since the last line (over since, from the count prev). It returns the count now.
func (r *runner) drawProgress(since time.Duration, prev int64) int64 {
	if r.opts.Progress == nil {
		return prev
	}
	s := r.summary(false)
	rate := float64(s.Committed-prev) / since.Seconds()
	fmt.Fprintf(r.opts.Progress, "\r\033[K  in %d  committed %d  out %d  failed %d  %.0f rec/s", s.In, s.Committed, s.Total(), s.Failed, rate)
	return s.Committed
}

func (r *runner) clearProgress() {
	if r.opts.Progress != nil {
		fmt.Fprint(r.opts.Progress, "\r\033[K")
	}
}

// refusedError is a refused discovery: the sidecar's error, which lists the problems, and a
// hint for config values. It matches ErrRefused.
type refusedError struct {
	streamlet string
	err       error
}

func (e *refusedError) Error() string {
	hint := ""
	if strings.Contains(e.err.Error(), "config.") {
		hint = "\n  (give config values with --set KEY=VALUE; in a pipeline file, on the streamlet's line)"
	}
	return fmt.Sprintf("streamlet %s: %v%s", e.streamlet, e.err, hint)
}

func (e *refusedError) Is(target error) bool { return target == ErrRefused }
func (e *refusedError) Unwrap() error        { return e.err }

func orStopped(err error) error {
	if err == nil {
		return errors.New("it returned without error")
	}
	return err
}

// startStreamlet starts a streamlet's bridge on a free loopback port and its sidecar.
func (r *runner) startStreamlet(ctx context.Context, s *Streamlet, brokers []string) (*running, error) {
	name := s.Action.Name
	st := &running{s: s, metrics: bridge.NewMetrics(0), errs: &lastError{}, group: r.p.Name + "." + name}
	blog := slog.New(&teeHandler{h: r.log.Handler(), last: st.errs}).With("part", "bridge") // the bridge names the streamlet
	srv, err := bridge.NewServer(bridge.Options{Action: s.Action.Action, Version: r.opts.Version, Logger: blog, Metrics: st.metrics})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("local: a loopback port for the bridge of %s: %w", name, err)
	}
	st.bridge = startTask(ctx, func(ctx context.Context) error { return srv.Serve(ctx, lis) })

	cfg := &sidecar.Config{
		Brokers: brokers, Pipeline: r.p.Name, Streamlet: name, Deployed: s.Action.Spec(r.opts.Version),
		ConfigValues: s.Values, ProcessPort: lis.Addr().(*net.TCPAddr).Port, SidecarVersion: r.opts.Version,
		ConsumerGroup:     st.group,
		StallWarningAfter: r.opts.StallAfter,
		DiscoveryBackoff:  sidecar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		FailureBackoff:    sidecar.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second},
	}
	for _, p := range s.Action.Inlets {
		cfg.Inlets = append(cfg.Inlets, sidecar.Inlet{Port: p.Name, Topic: s.Bindings[p.Name], MaxRecords: sidecar.DefaultBatchMaxRecords, MaxBytes: sidecar.DefaultBatchMaxBytes})
	}
	for _, p := range s.Action.Outlets {
		cfg.Outlets = append(cfg.Outlets, sidecar.Outlet{Port: p.Name, Topic: s.Bindings[p.Name]})
	}
	slogger := slog.New(&teeHandler{h: r.log.Handler(), last: st.errs}).With("streamlet", name, "part", "sidecar")
	sc, err := sidecar.New(cfg, slogger)
	if err != nil {
		_ = st.bridge.stop()
		return nil, fmt.Errorf("local: the sidecar of %s: %w", name, err)
	}
	st.sc = sc
	st.sidecar = startTask(ctx, sc.Run)
	return st, nil
}

// topicMaxMessageBytes is the max.message.bytes of the topics Run creates: room for a record
// of the protocol's largest message, 4 MiB, with its batch's framing.
const topicMaxMessageBytes = 8 << 20

// createTopics creates every bound topic; one that exists is left as it is.
func (r *runner) createTopics(ctx context.Context) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	seen := map[string]bool{r.p.Input: true}
	topics := []string{r.p.Input}
	for _, s := range r.p.Streamlets {
		for _, t := range s.Bindings {
			if !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	sort.Strings(topics)
	for _, t := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = t
		rt.NumPartitions = int32(r.opts.Partitions)
		rt.ReplicationFactor = -1
		// Records as large as the protocol allows (4 MiB emits), above Kafka's 1 MiB default.
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = "max.message.bytes", kmsg.StringPtr(strconv.Itoa(topicMaxMessageBytes))
		rt.Configs = append(rt.Configs, c)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("local: creating the topics %s: %w (is the broker reachable?)", strings.Join(topics, ", "), err)
	}
	for _, t := range resp.Topics {
		if err := kerrOf(t.ErrorCode); err != nil && t.ErrorCode != kerr.TopicAlreadyExists.Code {
			return fmt.Errorf("local: creating topic %s: %w", t.Topic, err)
		}
	}
	return nil
}

// partitions returns the partitions of each topic, from the broker's metadata.
func (r *runner) partitions(ctx context.Context, topics []string) (map[string][]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := req.RequestWith(ctx, r.admin)
	if err != nil {
		return nil, fmt.Errorf("local: topic metadata: %w", err)
	}
	out := map[string][]int32{}
	for _, t := range resp.Topics {
		if err := kerrOf(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("local: topic %s: %w", deref(t.Topic), err)
		}
		for _, p := range t.Partitions {
			out[deref(t.Topic)] = append(out[deref(t.Topic)], p.Partition)
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// endOffsets returns the end offset of every partition of topics.
func (r *runner) endOffsets(ctx context.Context, topics []string) (map[string]map[int32]int64, error) {
	parts, err := r.partitions(ctx, topics)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	for t, ps := range parts {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = -1 // the end
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, r.admin)
	if err != nil {
		return nil, fmt.Errorf("local: end offsets: %w", err)
	}
	out := map[string]map[int32]int64{}
	for _, t := range resp.Topics {
		out[t.Topic] = map[int32]int64{}
		for _, p := range t.Partitions {
			if err := kerrOf(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("local: end offset of %s/%d: %w", t.Topic, p.Partition, err)
			}
			out[t.Topic][p.Partition] = p.Offset
		}
	}
	return out, nil
}

// committed returns the offsets a streamlet's consumer group committed on its inlets.
func (r *runner) committed(ctx context.Context, st *running) (map[string]map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = st.group // no topics: every offset the group committed
	resp, err := req.RequestWith(ctx, r.admin)
	if err != nil {
		return nil, fmt.Errorf("local: committed offsets of %s: %w", st.group, err)
	}
	if resp.ErrorCode == kerr.GroupIDNotFound.Code {
		return nil, nil // the group has not joined yet: nothing committed
	}
	if err := kerrOf(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("local: committed offsets of %s: %w", st.group, err)
	}
	out := map[string]map[int32]int64{}
	add := func(topic string, p int32, off int64) {
		if out[topic] == nil {
			out[topic] = map[int32]int64{}
		}
		out[topic][p] = off
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.Offset)
			}
		}
	}
	return out, nil
}

// caughtUp reports whether every streamlet committed everything on its inlets and the printer
// read everything on the outlets. Commits are read before end offsets: a commit comes after
// its emits were written, so every emit of a commit seen here is under the end offsets read
// after it.
func (r *runner) caughtUp(ctx context.Context) (bool, error) {
	commits := map[*running]map[string]map[int32]int64{}
	for _, st := range r.streamlets {
		c, err := r.committed(ctx, st)
		if err != nil {
			return false, err
		}
		commits[st] = c
	}
	var topics []string
	for _, st := range r.streamlets {
		topics = append(topics, st.s.Inlets()...)
	}
	for t := range r.outlets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	ends, err := r.endOffsets(ctx, slices.Compact(topics))
	if err != nil {
		return false, err
	}
	for _, st := range r.streamlets {
		for _, t := range st.s.Inlets() {
			for p, end := range ends[t] {
				c, ok := commits[st][t][p]
				if !ok || c < 0 {
					c = 0
				}
				if c < end {
					return false, nil
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.outlets {
		for p, end := range ends[t] {
			if r.pos[t][p] < end {
				return false, nil
			}
		}
	}
	return true, nil
}

func kerrOf(code int16) error {
	return kerr.ErrorForCode(code)
}

// startPrinter consumes the outlet topics from the positions in r.pos and writes each record
// as a JSON line.
func (r *runner) startPrinter(ctx context.Context, brokers []string, wg *sync.WaitGroup) error {
	parts := map[string]map[int32]kgo.Offset{}
	for t, ps := range r.pos {
		parts[t] = map[int32]kgo.Offset{}
		for p, off := range ps {
			parts[t][p] = kgo.NewOffset().At(off)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(parts), kgo.WithLogger(kgoLog{r.log.With("component", "printer")}))
	if err != nil {
		return fmt.Errorf("local: the output consumer: %w", err)
	}
	several := len(r.p.Streamlets) > 1
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cl.Close()
		w := bufio.NewWriter(r.opts.Out)
		for {
			fetches := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fetches.EachRecord(func(rec *kgo.Record) {
				who := r.outlets[rec.Topic]
				line := outputLine(rec, who, several)
				w.Write(line)
				w.WriteByte('\n')
				r.mu.Lock()
				r.out[who.label(several)]++
				r.pos[rec.Topic][rec.Partition] = rec.Offset + 1
				r.mu.Unlock()
			})
			w.Flush()
		}
	}()
	return nil
}

func (o outletName) label(several bool) string {
	if several {
		return o.streamlet + "." + o.port
	}
	return o.port
}

// OutputRecord is one line `millrace run` prints: a record one of the streamlets produced.
// Key and header values that are not UTF-8 come in the Base64 siblings; a value that is not
// JSON comes as ValueBase64 instead of Payload.
type OutputRecord struct {
	Streamlet   string          `json:"streamlet,omitempty"` // in a pipeline of several
	Outlet      string          `json:"outlet"`
	Key         *string         `json:"key,omitempty"`
	KeyBase64   string          `json:"keyBase64,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	ValueBase64 string          `json:"valueBase64,omitempty"`
	Headers     []stdio.Header  `json:"headers,omitempty"`
}

func outputLine(rec *kgo.Record, who outletName, several bool) []byte {
	o := OutputRecord{Outlet: who.port}
	if several {
		o.Streamlet = who.streamlet
	}
	if rec.Key != nil {
		o.Key, o.KeyBase64 = textOrBase64(rec.Key)
	}
	switch {
	case len(rec.Value) == 0:
		o.Payload = json.RawMessage("null")
	case json.Valid(rec.Value):
		var buf bytes.Buffer
		_ = json.Compact(&buf, rec.Value)
		o.Payload = buf.Bytes()
	default:
		o.ValueBase64 = base64.StdEncoding.EncodeToString(rec.Value)
	}
	for _, h := range rec.Headers {
		sh := stdio.Header{Key: h.Key}
		sh.Value, sh.ValueBase64 = textOrBase64(h.Value)
		o.Headers = append(o.Headers, sh)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(o)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func textOrBase64(b []byte) (*string, string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

// Envelope is one input line of `millrace run`: the record to produce. Only Payload is
// needed; Topic defaults to the pipeline's input topic.
type Envelope struct {
	Key       *string         `json:"key"`
	KeyBase64 string          `json:"keyBase64"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers"`
	Topic     string          `json:"topic"`
}

// Record returns the record of an input line: an Envelope, or with bare the payload itself.
// n is the line's number, for errors.
func Record(line []byte, bare bool, n int, defaultTopic string) (*kgo.Record, error) {
	line = bytes.TrimSpace(line)
	rec := &kgo.Record{Topic: defaultTopic}
	if bare {
		if !json.Valid(line) {
			return nil, fmt.Errorf("%w %d: not JSON; with --bare each line is one JSON payload: %.80q", ErrInput, n, line)
		}
		var buf bytes.Buffer
		_ = json.Compact(&buf, line)
		rec.Value = buf.Bytes()
		return rec, nil
	}
	var env Envelope
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || len(line) == 0 || line[0] != '{' {
		why := "not a JSON object"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("%w %d: %s; an input line is {\"key\": \"k1\", \"payload\": {…}, \"headers\": [{\"key\": \"h\", \"value\": \"v\"}]} (or a bare payload with --bare): %.80q", ErrInput, n, why, line)
	}
	if env.Topic != "" {
		rec.Topic = env.Topic
	}
	switch {
	case env.Key != nil:
		rec.Key = []byte(*env.Key)
	case env.KeyBase64 != "":
		k, err := base64.StdEncoding.DecodeString(env.KeyBase64)
		if err != nil {
			return nil, fmt.Errorf("%w %d: keyBase64 is not base64: %v", ErrInput, n, err)
		}
		rec.Key = k
	}
	if p := bytes.TrimSpace(env.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		var buf bytes.Buffer
		_ = json.Compact(&buf, p)
		rec.Value = buf.Bytes()
	}
	for _, h := range env.Headers {
		kh := kgo.RecordHeader{Key: h.Key}
		switch {
		case h.Value != nil:
			kh.Value = []byte(*h.Value)
		case h.ValueBase64 != "":
			v, err := base64.StdEncoding.DecodeString(h.ValueBase64)
			if err != nil {
				return nil, fmt.Errorf("%w %d: header %q: valueBase64 is not base64: %v", ErrInput, n, h.Key, err)
			}
			kh.Value = v
		}
		rec.Headers = append(rec.Headers, kh)
	}
	return rec, nil
}

// produceInput produces every input line, then marks the input done (or failed).
func (r *runner) produceInput(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	finish := func(err error) {
		r.mu.Lock()
		r.inputErr, r.inputEOF = err, err == nil
		r.mu.Unlock()
	}
	if r.opts.Input == nil {
		finish(nil)
		return
	}
	var (
		failMu  sync.Mutex
		failure error
	)
	lr := stdio.NewLineReader(r.opts.Input, sidecar.DefaultMaxMessageBytes)
	for n := 1; ; n++ {
		line, err := lr.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, stdio.ErrLineTooLong) {
			finish(fmt.Errorf("%w %d: longer than %d MiB, the largest record the sidecar passes to a streamlet: keep large data elsewhere and send a reference", ErrInput, n, sidecar.DefaultMaxMessageBytes>>20))
			return
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			finish(fmt.Errorf("%w %d: %w", ErrInput, n, err))
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				break
			}
			continue
		}
		rec, rerr := Record(line, r.opts.Bare, n, r.p.Input)
		if rerr != nil {
			finish(rerr)
			return
		}
		r.admin.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			if err != nil {
				failMu.Lock()
				if failure == nil {
					failure = fmt.Errorf("local: producing input line %d to %s: %w", n, rec.Topic, err)
				}
				failMu.Unlock()
			}
		})
		r.mu.Lock()
		r.in++
		r.mu.Unlock()
		if err != nil { // the last line, without a newline
			break
		}
		if ctx.Err() != nil {
			return
		}
	}
	if err := r.admin.Flush(ctx); err != nil {
		finish(fmt.Errorf("local: producing the input: %w", err))
		return
	}
	failMu.Lock()
	defer failMu.Unlock()
	finish(failure)
}

// lastError keeps the last error a streamlet logged, for the reason of a stall.
type lastError struct {
	mu  sync.Mutex
	msg string
}

func (l *lastError) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg == "" {
		return "none logged (run with -v for the logs)"
	}
	return l.msg
}

// teeHandler passes records on to h and remembers the last error-level one.
type teeHandler struct {
	h    slog.Handler
	last *lastError
}

func (t *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || t.h.Enabled(ctx, l)
}

func (t *teeHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError {
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" || a.Key == "stderr" || a.Key == "reason" {
				fmt.Fprintf(&b, "; %s: %v", a.Key, a.Value)
			}
			return true
		})
		t.last.mu.Lock()
		t.last.msg = b.String()
		t.last.mu.Unlock()
	}
	if !t.h.Enabled(ctx, rec.Level) {
		return nil
	}
	return t.h.Handle(ctx, rec)
}

func (t *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &teeHandler{h: t.h.WithAttrs(as), last: t.last}
}

func (t *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{h: t.h.WithGroup(name), last: t.last}
}

// kgoLog routes franz-go's logs to slog at warn and above.
type kgoLog struct{ l *slog.Logger }

func (k kgoLog) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	k.l.Log(context.Background(), lvl, msg, keyvals...)
}
