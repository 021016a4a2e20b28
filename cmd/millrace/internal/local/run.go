package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
)

// Errors of Run; each wrapping error says which streamlet, line or partition and why.
var (
	// errInput is returned for an input line that is not a record envelope (or, with Bare, not
	// JSON); it names the line.
	errInput = errors.New("bad input line")
	// errStalled is returned when a partition stalled: a batch kept failing for StallAfter.
	errStalled = errors.New("a partition stalled")
	// errRefused is returned when a sidecar refused its process at discovery.
	errRefused = errors.New("the streamlet was refused at discovery")
	// ErrInterrupted is returned when ctx ended before every output was committed.
	ErrInterrupted = errors.New("interrupted")
	// errSchema is returned when an encoded port's schema is missing or cannot be registered
	// (millrace run and millrace test's fixtures alike).
	errSchema = errors.New("schema of an encoded port")
)

// Options tune Run. The zero value runs an in-memory broker, reads no input and stops when
// everything is committed.
type Options struct {
	Brokers    []string      // a real Kafka cluster; none: an in-process broker (kfake)
	DataDir    string        // the in-process broker keeps its data here (none: in memory)
	Partitions int           // of each topic Run creates (default 1: outputs in input order); given, an existing topic must have as many
	Input      io.Reader     // input lines, produced as records (nil: none)
	Bare       bool          // each input line is a payload, not an envelope
	Follow     bool          // keep running when the input is done, until ctx ends
	Out        io.Writer     // where output records go, one JSON line each (nil: discarded)
	Logger     *slog.Logger  // logs of the sidecars, bridges and actions (nil: discarded)
	Progress   io.Writer     // where a progress line is redrawn every half second (nil: none)
	StallAfter time.Duration // a batch failing for this long stops the run (default 20s)
	Version    string        // millrace's version, for discovery
	// Metrics, when set, serves /metrics of every streamlet, both halves (the sidecar's and the
	// bridge's registries, each series labelled streamlet); Run closes it. A streamlet whose
	// config line says --metrics ADDR is served at ADDR too.
	Metrics net.Listener
	// Getenv reads the OTEL_* variables that turn on the bridges' span export
	// (bridge.SpanExportFromEnv); nil exports no spans.
	Getenv func(string) string
	// ExactlyOnce runs the sidecars with FLOW_DELIVERY=exactly-once: each commit round is one
	// Kafka transaction. The printer reads read_committed in either mode.
	ExactlyOnce bool
	// BrokerStarted, when set, is called with the in-process broker's addresses once it listens
	// (never with Brokers), so that the caller can say where other tools (millrace replay) find it.
	BrokerStarted func(addrs []string)
	// Schemas are the schema files of encoded ports (--decode, --encode) by PORT or PORT.key,
	// over the action directory's schemas/PORT.EXT (millrace run --schema). A run with an
	// encoded port starts an embedded schema registry with them.
	Schemas map[string]string
	// Observer, when set, watches the run as it goes (millrace run --ui): told the run's view
	// once its streamlets run, every bridge event, and the run's end.
	Observer Observer
}

// runner is one Run.
type runner struct {
	p     *actiondir.Pipeline
	opts  Options
	log   *slog.Logger
	start time.Time

	admin   *kgo.Client           // produces the input; raw requests where kadm cannot serve
	adm     *kadm.Client          // the admin requests, over admin
	outlets map[string]outletName // topic → who writes it

	mu       sync.Mutex
	in       int
	out      map[string]int
	pos      map[string]map[int32]int64 // printer: next offset per outlet partition
	data     map[string]map[int32]int64 // printer: after its last record, markers left out
	inputErr error
	inputEOF bool

	streamlets []*running
	lr         *localRegistry   // the embedded schema registry; nil without encoded ports
	stateRoot  string           // the stateful streamlets' stores go in stateRoot/STREAMLET; "": none keeps state
	keys       map[string]int64 // keys held by each stateful inlet (STREAMLET.PORT) as the run stopped
	ended      bool             // the streamlets are stopping: View.Produce refuses
}

// Run runs the pipeline: it starts the broker (unless opts.Brokers names one), creates the
// topics, runs each streamlet's bridge and sidecar exactly as in production (the sidecar
// talks gRPC to the bridge on a free 127.0.0.1 port), produces the input lines, and writes
// every record its streamlets produce to opts.Out. It returns when the input is done and every
// input record was processed and committed (never with Follow), when ctx ends (wrapping
// ErrInterrupted unless Follow), or on the first fault that would keep it from finishing: a
// bad input line, a refused discovery, a stalled partition, a fault that can only repeat (a
// command that cannot run, a program that never readies: one line with the fix, at once). The
// summary is returned in every case but a failed start and such a fault.
func Run(ctx context.Context, p *actiondir.Pipeline, opts Options) (*Summary, error) {
	if err := preflight(p); err != nil {
		return nil, err
	}
	partitionsGiven := opts.Partitions > 0
	if !partitionsGiven {
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
	if opts.Metrics != nil {
		defer opts.Metrics.Close() // also when Run fails before serving it
	}
	r := &runner{p: p, opts: opts, log: opts.Logger, start: time.Now(), outlets: map[string]outletName{}, out: map[string]int{}, pos: map[string]map[int32]int64{}}
	lr, err := startRegistry(p, opts.Schemas, opts.Logger.With("part", "schema-registry"))
	if err != nil {
		return nil, err
	}
	defer lr.close()
	r.lr = lr
	root, removeState, err := stateRoot(p, opts.DataDir)
	if err != nil {
		return nil, err
	}
	defer removeState() // after the sidecars stopped (stop, below) and closed their files
	r.stateRoot = root
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
			return nil, fmt.Errorf("starting the in-process Kafka broker: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		if opts.BrokerStarted != nil {
			opts.BrokerStarted(brokers)
		}
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kafkaLogger(r.log, "local"))
	if err != nil {
		return nil, fmt.Errorf("Kafka client for %s: %w", strings.Join(brokers, ","), err)
	}
	defer admin.Close()
	r.admin = admin
	r.adm = kadm.NewClient(admin)
	r.adm.SetTimeoutMillis(10_000) // a CreateTopics the broker cannot finish in 10 s fails
	if err := r.createTopics(ctx, partitionsGiven); err != nil {
		return nil, err
	}
	if err := r.createChangelogs(ctx); err != nil {
		return nil, err
	}
	// print only what this run produces: from the outlets' end offsets now
	ends, err := r.endOffsets(ctx, slices.Collect(maps.Keys(r.outlets)))
	if err != nil {
		return nil, err
	}
	r.pos = ends
	r.data = map[string]map[int32]int64{}
	for t := range ends {
		r.data[t] = map[int32]int64{}
	}

	runCtx, stopAll := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAll()
	var printers sync.WaitGroup
	printCtx, stopPrinting := context.WithCancel(runCtx)
	if err := r.startPrinter(printCtx, brokers, &printers); err != nil {
		stopPrinting()
		return nil, err
	}
	endpoints, err := r.metricsListeners()
	if err != nil {
		stopPrinting()
		printers.Wait()
		return nil, err
	}
	stopMetrics := func() {
		for _, ep := range endpoints {
			ep.lis.Close()
		}
	}
	var started []*running
	stop := func(abort bool) {
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
		stopMetrics()
		keys := stateKeys(started)
		r.mu.Lock()
		r.keys = keys
		r.mu.Unlock()
		if abort { // a fault that can only repeat: nothing in flight will succeed, so none is waited for
			for _, st := range started {
				st.sidecar.cancel()
				st.srv.Abort()
			}
		}
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
			stop(false)
			return nil, err
		}
		started = append(started, st)
	}
	r.mu.Lock()
	r.streamlets = started
	r.mu.Unlock()
	stopMetrics = r.serveMetrics(endpoints)
	if opts.Observer != nil {
		opts.Observer.Started(&View{r: r, brokers: brokers})
	}

	inputDone := make(chan struct{})
	go r.produceInput(runCtx, inputDone)

	err = r.watch(ctx, inputDone)
	stop(errors.Is(err, errRepeats))
	stopAll()
	if opts.Observer != nil {
		defer func() { opts.Observer.Ended(err) }() // with the error Run returns
	}
	if errors.Is(err, ErrInterrupted) {
		err = r.interrupted()
	}
	select {
	case <-inputDone:
	case <-time.After(time.Second): // a read of an interactive stdin cannot be interrupted
	}
	if errors.Is(err, errRepeats) {
		return nil, err
	}
	return r.summary(err == nil), err
}

// interrupted says how far an interrupted run got, once its streamlets stopped (the batches
// in flight at the interrupt were finished and committed): what was committed, and what was
// not.
func (r *runner) interrupted() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := r.uncommitted(ctx)
	r.mu.Lock()
	eof := r.inputEOF
	r.mu.Unlock()
	switch {
	case err != nil:
		return fmt.Errorf("%w; whether every record was committed is unknown: %w", ErrInterrupted, err)
	case n > 0:
		return fmt.Errorf("%w: %d record(s) read were not committed (with --data or --brokers the next run processes them again); the others were", ErrInterrupted, n)
	case !eof:
		return fmt.Errorf("%w: every record read was committed; the input was not read to its end", ErrInterrupted)
	}
	return fmt.Errorf("%w: every record was committed", ErrInterrupted)
}
