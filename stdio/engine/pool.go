package engine

import (
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/internal/errtext"

	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/goccy/go-json"
)

// writeBatch is the size past which the worker stops adding item lines to one write.
const writeBatch = 64 << 10

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

	// slots holds each slot's serving process (nil while it is replaced), for the sharing
	// rule (turn.go) and Stats; turn wakes the workers waiting for their turn.
	slots []atomic.Pointer[process]
	turn  turnSignal

	cancels, cancelKills, droppedAfterCancel atomic.Int64 // for Stats

	mu          sync.Mutex
	keys        map[string]*keyQueue // active keys; nil value: no item waiting behind the active one
	retrying    map[*task]struct{}
	procs       map[*process]struct{}
	outstanding int
	space       chan struct{} // closed when a full queue drains to lowWater; nil when nobody waits
	// drained is closed by the final that takes outstanding to zero once closed is: nothing is
	// enqueued after Close, so outstanding only falls and reaches zero at most once (Close
	// does not wait on it when nothing was outstanding).
	drained chan struct{}

	healthMu   sync.Mutex
	health     error
	startFails int

	closed     chan struct{} // closed by the first Close, under mu: Submit stops waiting and refuses
	closeDone  chan struct{} // closed when the first Close returns: later ones wait for it
	stopCtx    context.Context
	lifeCtx    context.Context // cancelled by Close after drain or abandon: workers stop
	lifeCancel context.CancelFunc
	wg         sync.WaitGroup
	timers     sync.WaitGroup // retry timers that may still fire
	clock      clock
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
		closed:    make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	p.clock = cmp.Or[clock](cfg.clock, realClock{})
	p.lifeCtx, p.lifeCancel = context.WithCancel(context.Background())
	p.hello = stdio.AppendMessage(nil, &stdio.Message{
		Type: stdio.TypeHello, Protocol: stdio.Protocol, Action: cfg.Hello.Action, Version: cfg.Hello.Version,
		Config: cfg.Hello.Config, Vars: cfg.Hello.Vars, State: helloState(cfg.State),
	})
	if len(p.hello) > stdio.MaxLineBytes {
		p.lifeCancel()
		return nil, fmt.Errorf("%w: action %q: the hello line (config and vars) is %d bytes, over the %s line limit", ErrConfig, cfg.Name, len(p.hello), errtext.Size(stdio.MaxLineBytes))
	}

	procs := make([]*process, cfg.Concurrency)
	errs := make([]error, cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i], errs[i] = p.spawn(ctx, i) })
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
	p.slots = make([]atomic.Pointer[process], cfg.Concurrency)
	for i, pr := range procs {
		p.procs[pr] = struct{}{}
		p.slots[i].Store(pr)
		p.wg.Add(1)
		go p.worker(i, pr)
	}
	p.log.Info("action pool started", "action", cfg.Name, "processes", cfg.Concurrency, "per_item", cfg.PerItem, "window", p.window, "queue", qs)
	return p, nil
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
// A valid it.Trace gets a new SpanID for each attempt (Trace.Parent and the rest kept): the
// item line carries the attempt's span, and Result.Trace the last one's.
// A payload holding raw newlines (whitespace) is compacted; otherwise its bytes are sent as
// given.
func (p *Pool) Submit(ctx context.Context, it stdio.Item, done func(Result)) error {
	payload, err := framePayload(&it)
	if err != nil {
		return err
	}
	it.Payload = payload
	return p.enqueue(ctx, &task{item: &it, done: done})
}

// framePayload checks that it can be written as one line and returns its payload, compacted
// if it holds raw newlines (its State is compacted in place).
func framePayload(it *stdio.Item) (json.RawMessage, error) {
	payload := it.Payload
	if len(payload) > 0 && !json.Valid(payload) {
		return nil, fmt.Errorf("%w: item %s: the payload is not valid JSON (an empty value is sent as null): %s", ErrBadItem, it.ID, errtext.Quote(payload))
	}
	if bytes.IndexByte(payload, '\n') >= 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, payload); err != nil {
			return nil, fmt.Errorf("%w: item %s: compacting the payload: %w", ErrBadItem, it.ID, err)
		}
		payload = b.Bytes()
	}
	if bytes.IndexByte(it.State, '\n') >= 0 { // a state given with the item, as payloads
		var b bytes.Buffer
		if err := json.Compact(&b, it.State); err != nil {
			return nil, fmt.Errorf("%w: item %s: the state is not valid JSON: %w", ErrBadItem, it.ID, err)
		}
		it.State = b.Bytes()
	}
	size := len(payload) + len(it.ID) + len(it.Run) + len(it.KeyBase64) + len(it.Inlet) + len(it.Topic) + len(it.IdempotencyKey) + len(it.Tracestate) + len(it.State) + 256
	if it.Trace.IsValid() {
		size += stdio.TraceparentLen + 32
	}
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
		return nil, fmt.Errorf("%w: item %s is about %d bytes as an item line, over the %s line limit of the action protocol", ErrBadItem, it.ID, size, errtext.Size(stdio.MaxLineBytes))
	}
	return payload, nil
}

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
