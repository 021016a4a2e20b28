package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/goccy/go-json"
)

// Defaults applied by Start to zero Config fields. Only the engine's own knobs have one: what
// the action config sets (concurrency, timeouts, retries, window) is taken as given, and its
// defaults live with the action config.
const (
	// DefaultReadyTimeout is the spec's hello → ready bound, used when ReadyTimeout is 0.
	DefaultReadyTimeout   = 10 * time.Second
	DefaultShutdownGrace  = 5 * time.Second
	DefaultRetryBackoff   = 100 * time.Millisecond
	DefaultRetryMax       = 10 * time.Second
	DefaultRestartBackoff = 100 * time.Millisecond
	DefaultRestartMax     = 30 * time.Second
	DefaultCrashLoopAfter = 3
	DefaultMaxStagedBytes = 64 << 20
	// MaxWindow caps the deliveries written ahead to one process, whatever the action declares.
	MaxWindow = 1024
)

// writeBatch is the size past which the worker stops adding item lines to one write.
const writeBatch = 64 << 10

// Config describes the action a Pool runs and how. The zero value of each optional field takes
// the default named beside it.
type Config struct {
	Name    string   // the action, sent in hello and logged with every line (required)
	Version string   // the action's version, sent in hello
	Command []string // argv, no shell: Command[0] is looked up in PATH (required)
	Dir     string   // working directory of the child ("" = the engine's)
	Env     []string // extra environment "K=V", appended to the engine's and MILLSTREAM_WORKDIR

	Concurrency int  // processes running at once (at least 1)
	PerItem     bool // one fresh process per delivery instead of serving many

	ReadyTimeout time.Duration // hello → ready (0: the spec's DefaultReadyTimeout)
	// ItemTimeout bounds each attempt (0 or less: no timeout). Its clock starts at
	// the later of the item's write and the process's previous answer, so deliveries written
	// ahead in a window wait their turn without using up their time.
	ItemTimeout   time.Duration
	ShutdownGrace time.Duration // shutdown → exit 0, before SIGTERM then SIGKILL (default DefaultShutdownGrace)

	// Window is the number of deliveries written ahead to one process. 0 lets the action decide
	// by declaring "window": N in its ready line; >0 is the config line's --window N, which
	// wins over the action's silence and is capped by a smaller declared window. 1 is the
	// spec's one delivery at a time. Always capped at MaxWindow.
	Window int

	Retries        int           // retries after the first attempt of a retryable failure (0: none)
	RetryBackoff   time.Duration // first retry delay, doubling with jitter (default DefaultRetryBackoff)
	RetryMax       time.Duration // longest retry delay (default DefaultRetryMax)
	RestartBackoff time.Duration // first delay between failed starts (default DefaultRestartBackoff)
	RestartMax     time.Duration // longest delay between failed starts (default DefaultRestartMax)
	CrashLoopAfter int           // consecutive failed starts before Health reports ErrCrashLoop (default 3)

	// MaxStagedBytes bounds the emit and metric lines one delivery may stage (default
	// DefaultMaxStagedBytes); more is a protocol violation that fails the attempt.
	MaxStagedBytes int

	// QueueSize bounds the items accepted and not yet finished (queued, in flight or waiting to
	// retry); Submit blocks when it is reached. Default: 256, or 2 × processes × window if more.
	QueueSize int

	Hello  stdio.Hello  // config and vars sent to every process; Action and Version default to Name and Version
	Logger *slog.Logger // where the pool and every child's stderr log (default: discard)
	Hooks  Hooks        // optional callbacks, for metrics
}

// Hooks are optional callbacks for metrics and health. They run on the pool's goroutines,
// possibly concurrently, and must return quickly.
type Hooks struct {
	// ProcessStarted is called when a process answered ready.
	ProcessStarted func(pid int)
	// ProcessExited is called when a process ended; err is nil for a clean shutdown, else it
	// names the exit status, the cause and the last stderr lines.
	ProcessExited func(pid int, err error)
	// AttemptFinished is called after every attempt, before any retry.
	AttemptFinished func(AttemptInfo)
	// stdio.Metric is called for every metric line, as it arrives.
	Metric func(it *stdio.Item, m stdio.Metric)
	// Health is called when Pool.Health changes: err nil when healthy again.
	Health func(err error)
}

// AttemptInfo describes one finished attempt, for Hooks.AttemptFinished.
type AttemptInfo struct {
	Item    *stdio.Item   // the item as delivered (Delivery and Attempt set); read only, valid during the call
	Outcome Outcome       // Done, Failed (this attempt), Abstained or Abandoned
	Latency time.Duration // from the item's write to its answer
	Err     error         // why the attempt failed
	Retry   bool          // whether the item will be retried
}

// Outcome is how an item ended.
type Outcome int

const (
	// Done: the action answered done; Result.Emits are its staged outputs.
	Done Outcome = iota + 1
	// Failed: the item failed for good (non-retryable error, or retries exhausted); Result.Err
	// says why.
	Failed
	// Abstained: the action was unsure; Result.Reason says why. Its emits are dropped.
	Abstained
	// Abandoned: the pool was closed without draining before the item finished. Nothing of it
	// was published; Result.Err wraps ErrClosed.
	Abandoned
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Abstained:
		return "abstained"
	case Abandoned:
		return "abandoned"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the final answer for one submitted item, after any retries.
type Result struct {
	Outcome  Outcome
	Emits    []stdio.Emit   // Done: the staged emits of the successful attempt, in order
	Metrics  []stdio.Metric // the metrics of every attempt, in order
	Err      error          // Failed/Abandoned: the cause (wraps a sentinel; names exit status and stderr where relevant)
	Reason   string         // Abstained: the action's reason
	Attempts int            // attempts made (0 when abandoned before the first)
}

// Pool runs an action's processes and hands them items. Its methods are safe for concurrent
// use.
type Pool struct {
	cfg     Config
	log     *slog.Logger
	cmdline string // for errors
	hello   []byte
	prefix  string // of delivery ids, unique per pool
	seq     atomic.Uint64
	window  int

	queueSize int        // unfinished items at most: Submit's back-pressure
	lowWater  int        // a blocked Submit wakes when outstanding falls to it
	ready     chan *task // items that may run now; never fuller than queueSize

	abandoning atomic.Bool

	mu          sync.Mutex
	keys        map[string]*keyQueue // active keys; nil value: no item waiting behind the active one
	retrying    map[*task]struct{}
	procs       map[*process]struct{}
	outstanding int
	space       chan struct{} // closed when a full queue drains to lowWater; nil when nobody waits
	closed      bool
	drained     chan struct{} // closed once closed and nothing is outstanding
	drainedDone bool

	healthMu   sync.Mutex
	health     error
	startFails int

	closedCh   chan struct{} // closed by Close: Submit stops waiting
	quit       chan struct{} // closed by Close after drain or abandon: workers stop
	stopCtx    context.Context
	lifeCancel context.CancelFunc
	lifeCtx    context.Context
	wg         sync.WaitGroup

	closeOnce sync.Once
	closeDone chan struct{}
}

// keyQueue holds the items waiting behind the active item of one key, in Submit order.
type keyQueue struct {
	items []*task
	head  int
}

func (q *keyQueue) pop() *task {
	if q == nil || q.head == len(q.items) {
		return nil
	}
	t := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	return t
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		return c, fmt.Errorf("%w: the action has no name", ErrConfig)
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return c, fmt.Errorf("%w: action %q has no command (the words after -- on the config line)", ErrConfig, c.Name)
	}
	if c.Concurrency < 1 {
		return c, fmt.Errorf("%w: action %q: concurrency is %d; it must be at least 1 (--concurrency N on the config line)", ErrConfig, c.Name, c.Concurrency)
	}
	if c.Retries < 0 || c.Window < 0 || c.QueueSize < 0 || c.CrashLoopAfter < 0 {
		return c, fmt.Errorf("%w: action %q: retries, window, queue size and crash-loop threshold must not be negative", ErrConfig, c.Name)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadyTimeout, DefaultReadyTimeout)
	def(&c.ShutdownGrace, DefaultShutdownGrace)
	def(&c.RetryBackoff, DefaultRetryBackoff)
	def(&c.RetryMax, DefaultRetryMax)
	def(&c.RestartBackoff, DefaultRestartBackoff)
	def(&c.RestartMax, DefaultRestartMax)
	if c.MaxStagedBytes <= 0 {
		c.MaxStagedBytes = DefaultMaxStagedBytes
	}
	if c.CrashLoopAfter == 0 {
		c.CrashLoopAfter = DefaultCrashLoopAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Hello.Action == "" {
		c.Hello.Action = c.Name
	}
	if c.Hello.Version == "" {
		c.Hello.Version = c.Version
	}
	return c, nil
}

// Start validates cfg, starts the pool's processes (Concurrency of them; in per-item mode the
// first warm ones) and returns when every one answered ready. Otherwise it stops what it
// started and returns an error wrapping ErrStart (or ErrConfig) that names the command and
// quotes the last stderr lines. ctx bounds the start only; the pool lives until Close.
func Start(ctx context.Context, cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	p := &Pool{
		cfg:       cfg,
		log:       cfg.Logger,
		cmdline:   quoteArgv(cfg.Command),
		prefix:    "dl_" + hex.EncodeToString(nonce[:]) + "_",
		keys:      make(map[string]*keyQueue),
		retrying:  make(map[*task]struct{}),
		procs:     make(map[*process]struct{}),
		drained:   make(chan struct{}),
		closedCh:  make(chan struct{}),
		quit:      make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	p.lifeCtx, p.lifeCancel = context.WithCancel(context.Background())
	p.hello = stdio.AppendMessage(nil, &stdio.Message{
		Type: stdio.TypeHello, Protocol: stdio.Protocol, Action: cfg.Hello.Action, Version: cfg.Hello.Version,
		Config: cfg.Hello.Config, Vars: cfg.Hello.Vars,
	})
	if len(p.hello) > stdio.MaxLineBytes {
		p.lifeCancel()
		return nil, fmt.Errorf("%w: action %q: the hello line (config and vars) is %d bytes, over the %s line limit", ErrConfig, cfg.Name, len(p.hello), stdio.SizeName(stdio.MaxLineBytes))
	}

	procs := make([]*process, cfg.Concurrency)
	errs := make([]error, cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i], errs[i] = p.spawn(ctx) })
	}
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		for _, pr := range procs {
			if pr != nil {
				wg.Go(func() { pr.shutdown(ctx) })
			}
		}
		wg.Wait()
		p.lifeCancel()
		return nil, err
	}
	p.window = procs[0].window
	qs := cfg.QueueSize
	if qs == 0 {
		qs = max(256, 2*cfg.Concurrency*p.window)
	}
	p.queueSize = qs
	// Hysteresis: a blocked Submit wakes once half of the queue is free, not once per
	// finished item, so back-pressure costs one wake-up per batch of items.
	p.lowWater = qs / 2
	p.ready = make(chan *task, qs)
	for _, pr := range procs {
		p.procs[pr] = struct{}{}
		p.wg.Add(1)
		go p.worker(pr)
	}
	p.log.Info("action pool started", "action", cfg.Name, "processes", cfg.Concurrency, "per_item", cfg.PerItem, "window", p.window, "queue", qs)
	return p, nil
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "command [" + strings.Join(q, " ") + "]"
}

// worker owns one process slot: it keeps a process running (replacing one that dies, with the
// crash-loop breaker's backoff) and feeds it items until the pool quits.
func (p *Pool) worker(pr *process) {
	defer p.wg.Done()
	bo := p.restartBackOff()
	for {
		if pr == nil {
			if pr = p.respawn(bo); pr == nil {
				return
			}
		}
		if !p.serve(pr) {
			pr.shutdown(p.stopCtx)
			p.forget(pr)
			return
		}
		if p.cfg.PerItem {
			pr.shutdown(p.lifeCtx)
		}
		<-pr.dead
		p.forget(pr)
		pr = nil
	}
}

func (p *Pool) forget(pr *process) {
	p.mu.Lock()
	delete(p.procs, pr)
	p.mu.Unlock()
}

// serve feeds pr items until it dies (true), has served its one item in per-item mode (true),
// or the pool quits (false).
func (p *Pool) serve(pr *process) bool {
	var batch []byte
	for {
		if alive, quit := pr.awaitRoom(p.quit); !alive || quit {
			return !quit
		}
		var t *task
		select {
		case t = <-p.ready:
		case <-pr.dead:
			return true
		case <-p.quit:
			return false
		}
		if !pr.register(t) {
			p.requeue(t)
			if p.abandoning.Load() || !pr.isEnded() {
				continue
			}
			select {
			case <-pr.dead:
				return true
			case <-p.quit:
				return false
			}
		}
		// With a window, every ready item that fits goes out in the same write.
		batch = stdio.AppendItem(batch[:0], &t.item)
	fill:
		for len(batch) < writeBatch && pr.hasRoom() {
			select {
			case t = <-p.ready:
			default:
				break fill
			}
			if !pr.register(t) {
				p.requeue(t)
				break
			}
			batch = stdio.AppendItem(batch, &t.item)
		}
		pr.write(batch)
		if cap(batch) > 1<<20 {
			batch = nil
		}
		if p.cfg.PerItem { // its one item: wait for the answer, then retire the process
			_, quit := pr.awaitRoom(p.quit)
			return !quit
		}
	}
}

// requeue puts back an item that was taken but not delivered.
func (p *Pool) requeue(t *task) {
	p.mu.Lock()
	if !p.abandoning.Load() {
		p.ready <- t
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.final(t, Result{Outcome: Abandoned, Err: fmt.Errorf("%w: item %s abandoned before delivery", ErrClosed, t.item.ID), Metrics: t.metrics, Attempts: t.attempts})
}

func (p *Pool) restartBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.cfg.RestartBackoff),
		backoff.WithMaxInterval(p.cfg.RestartMax),
		backoff.WithMaxElapsedTime(0),
	)
}

// respawn starts a replacement process, backing off between failed starts and reporting a
// crash loop; it returns nil when the pool quits first.
func (p *Pool) respawn(bo *backoff.ExponentialBackOff) *process {
	for {
		select {
		case <-p.quit:
			return nil
		default:
		}
		pr, err := p.spawn(p.lifeCtx)
		if err == nil {
			p.mu.Lock()
			p.procs[pr] = struct{}{}
			p.mu.Unlock()
			bo.Reset()
			p.setHealth(nil)
			return pr
		}
		if p.lifeCtx.Err() != nil {
			return nil
		}
		p.healthMu.Lock()
		p.startFails++
		fails := p.startFails
		p.healthMu.Unlock()
		p.log.Error("action process failed to start", "action", p.cfg.Name, "err", err, "failed_starts_in_a_row", fails)
		if fails >= p.cfg.CrashLoopAfter {
			p.setHealth(fmt.Errorf("%w: %d starts in a row failed (queued items wait; fix the action or its config); last: %w", ErrCrashLoop, fails, err))
		}
		timer := time.NewTimer(bo.NextBackOff())
		select {
		case <-timer.C:
		case <-p.quit:
			timer.Stop()
			return nil
		}
	}
}

func (p *Pool) setHealth(err error) {
	p.healthMu.Lock()
	was := p.health
	p.health = err
	if err == nil {
		p.startFails = 0
	}
	p.healthMu.Unlock()
	if (was == nil) != (err == nil) {
		if err == nil {
			p.log.Info("action healthy again", "action", p.cfg.Name)
		}
		if h := p.cfg.Hooks.Health; h != nil {
			h(err)
		}
	}
}

// Health returns nil while the pool can start processes, or an error wrapping ErrCrashLoop
// that names the command and quotes its last stderr lines after CrashLoopAfter consecutive
// failed starts. It turns nil again after the next successful start.
func (p *Pool) Health() error {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	return p.health
}

// Window returns the deliveries written ahead to one process, as settled at Start from
// Config.Window and the first process's ready line.
func (p *Pool) Window() int { return p.window }

// Submit queues it and returns; the item's final Result is passed to done exactly once, from
// a pool goroutine, when the item is Done, Failed for good, Abstained or Abandoned. done must
// not block for long (it holds up the process that answered) and must not wait for Submit.
//
// Submit blocks while the pool holds QueueSize unfinished items (back-pressure); ctx ends the
// wait with ctx.Err(). After Close it returns ErrClosed; for an item that cannot be framed it
// returns an error wrapping ErrBadItem. When Submit returns an error, done is never called.
//
// Ordering: items with the same key (Key, or KeyBase64) run one after another in Submit order,
// each finishing (retries included) before the next starts; keyless items and different keys
// run in parallel, in any order. it.Delivery and it.Attempt are ignored: the pool sets them.
// A payload holding raw newlines (whitespace) is compacted; otherwise its bytes are sent as
// given.
func (p *Pool) Submit(ctx context.Context, it stdio.Item, done func(Result)) error {
	payload, err := framePayload(&it)
	if err != nil {
		return err
	}
	it.Payload = payload
	t := &task{item: it, done: done}
	switch {
	case it.Key != nil:
		t.key, t.keyed = *it.Key, true
	case it.KeyBase64 != "":
		t.key, t.keyed = "\x00base64:"+it.KeyBase64, true
	}
	p.mu.Lock()
	for p.outstanding >= p.queueSize && !p.closed {
		if p.space == nil {
			p.space = make(chan struct{})
		}
		space := p.space
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closedCh:
		}
		p.mu.Lock()
	}
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: item %s not accepted", ErrClosed, it.ID)
	}
	p.outstanding++
	if t.keyed {
		if q, active := p.keys[t.key]; active {
			if q == nil {
				q = &keyQueue{}
				p.keys[t.key] = q
			}
			q.items = append(q.items, t)
			p.mu.Unlock()
			return nil
		}
		p.keys[t.key] = nil
	}
	p.ready <- t
	p.mu.Unlock()
	return nil
}

// framePayload checks that it can be written as one line and returns its payload, compacted
// if it holds raw newlines.
func framePayload(it *stdio.Item) (json.RawMessage, error) {
	payload := it.Payload
	if len(payload) > 0 && !json.Valid(payload) {
		return nil, fmt.Errorf("%w: item %s: the payload is not valid JSON (an empty value is sent as null): %s", ErrBadItem, it.ID, stdio.QuoteStart(payload))
	}
	if bytes.IndexByte(payload, '\n') >= 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, payload); err != nil {
			return nil, fmt.Errorf("%w: item %s: compacting the payload: %w", ErrBadItem, it.ID, err)
		}
		payload = b.Bytes()
	}
	size := len(payload) + len(it.ID) + len(it.Run) + len(it.KeyBase64) + len(it.Inlet) + len(it.Topic) + len(it.IdempotencyKey) + 256
	if it.Key != nil {
		size += len(*it.Key)
	}
	for _, h := range it.Headers {
		size += len(h.Key) + len(h.ValueBase64) + 32
		if h.Value != nil {
			size += len(*h.Value)
		}
	}
	if size > stdio.MaxLineBytes {
		return nil, fmt.Errorf("%w: item %s is about %d bytes as an item line, over the %s line limit of the action protocol", ErrBadItem, it.ID, size, stdio.SizeName(stdio.MaxLineBytes))
	}
	return payload, nil
}

func isRetryable(err error) bool {
	if ae, ok := errors.AsType[*ActionError](err); ok {
		return ae.Retryable
	}
	return errors.Is(err, ErrCrashed) || errors.Is(err, ErrTimeout) || errors.Is(err, stdio.ErrProtocol)
}

// attemptEnded is called exactly once per attempt, by whoever took it out of a process's
// in-flight map: it schedules a retry or finishes the item.
func (p *Pool) attemptEnded(t *task, out Outcome, err error, reason string) {
	retry := out == Failed && isRetryable(err) && t.attempts < 1+p.cfg.Retries && !p.abandoning.Load()
	if out == Failed {
		p.log.Warn("action attempt failed", "action", p.cfg.Name, "item", t.item.ID, "delivery", t.item.Delivery, "attempt", t.attempts, "retry", retry, "err", err)
	}
	if h := p.cfg.Hooks.AttemptFinished; h != nil {
		h(AttemptInfo{Item: &t.item, Outcome: out, Latency: time.Since(t.written), Err: err, Retry: retry})
	}
	if retry {
		p.mu.Lock()
		if !p.abandoning.Load() {
			if t.bo == nil {
				t.bo = backoff.NewExponentialBackOff(
					backoff.WithInitialInterval(p.cfg.RetryBackoff),
					backoff.WithMaxInterval(p.cfg.RetryMax),
					backoff.WithMaxElapsedTime(0),
				)
			}
			p.retrying[t] = struct{}{}
			t.retry = time.AfterFunc(t.bo.NextBackOff(), func() { p.retryNow(t) })
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	res := Result{Outcome: out, Metrics: t.metrics, Attempts: t.attempts}
	switch out {
	case Done:
		res.Emits = t.emits
	case Abstained:
		res.Reason = reason
	default:
		res.Err = err
	}
	if out == Failed && p.abandoning.Load() {
		res.Outcome = Abandoned
		res.Err = fmt.Errorf("%w: item %s abandoned after: %w", ErrClosed, t.item.ID, err)
	}
	p.final(t, res)
}

// retryNow queues t again once its backoff passed, unless the pool abandoned it meanwhile.
func (p *Pool) retryNow(t *task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.retrying[t]; !ok {
		return
	}
	delete(p.retrying, t)
	p.ready <- t
}

// final hands t its result, lets the next item of its key run and frees its queue slot.
func (p *Pool) final(t *task, res Result) {
	if t.done != nil {
		t.done(res)
	}
	p.mu.Lock()
	if t.keyed {
		if q, ok := p.keys[t.key]; ok {
			if next := q.pop(); next != nil {
				p.ready <- next
			} else {
				delete(p.keys, t.key)
			}
		}
	}
	p.outstanding--
	if p.space != nil && p.outstanding <= p.lowWater {
		close(p.space)
		p.space = nil
	}
	if p.closed && p.outstanding == 0 && !p.drainedDone {
		p.drainedDone = true
		close(p.drained)
	}
	p.mu.Unlock()
}

// abandonAll ends every unfinished item as Abandoned: queued, waiting behind a key, waiting to
// retry and in flight.
func (p *Pool) abandonAll() {
	p.mu.Lock()
	p.abandoning.Store(true)
	var tasks []*task
	for drained := false; !drained; {
		select {
		case t := <-p.ready:
			tasks = append(tasks, t)
		default:
			drained = true
		}
	}
	for _, q := range p.keys {
		if q != nil {
			tasks = append(tasks, q.items[q.head:]...)
		}
	}
	p.keys = make(map[string]*keyQueue)
	for t := range p.retrying {
		t.retry.Stop()
		tasks = append(tasks, t)
	}
	clear(p.retrying)
	procs := make([]*process, 0, len(p.procs))
	for pr := range p.procs {
		procs = append(procs, pr)
	}
	p.mu.Unlock()
	for _, t := range tasks {
		p.final(t, Result{Outcome: Abandoned, Err: fmt.Errorf("%w: item %s abandoned", ErrClosed, t.item.ID), Metrics: t.metrics, Attempts: t.attempts})
	}
	for _, pr := range procs {
		pr.abandon()
	}
}

// Close stops the pool. With drain, queued and in-flight items finish first (retries
// included); without it, or when ctx ends first, every unfinished item is Abandoned at once.
// Then every process gets shutdown and, after ShutdownGrace, SIGTERM then SIGKILL of its
// process group (at once when ctx has ended). Close returns when every done callback has run
// and every goroutine and process is gone, with ctx.Err() if ctx ended before the drain
// finished. It may be called more than once; later calls wait for the first and return nil.
func (p *Pool) Close(ctx context.Context, drain bool) error {
	first := false
	p.closeOnce.Do(func() { first = true })
	if !first {
		<-p.closeDone
		return nil
	}
	defer close(p.closeDone)
	p.mu.Lock()
	p.closed = true
	close(p.closedCh)
	if p.outstanding == 0 && !p.drainedDone {
		p.drainedDone = true
		close(p.drained)
	}
	p.mu.Unlock()
	var err error
	if drain {
		select {
		case <-p.drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if !drain || err != nil {
		p.abandonAll()
	}
	p.stopCtx = ctx
	close(p.quit)
	p.lifeCancel()
	p.wg.Wait()
	p.log.Info("action pool closed", "action", p.cfg.Name, "drained", drain && err == nil)
	return err
}
