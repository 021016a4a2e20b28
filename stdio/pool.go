package stdio

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by Start to zero Config fields.
const (
	DefaultReadyTimeout   = 10 * time.Second
	DefaultItemTimeout    = 5 * time.Minute
	DefaultShutdownGrace  = 5 * time.Second
	DefaultRetryBackoff   = 100 * time.Millisecond
	DefaultRetryMax       = 10 * time.Second
	DefaultRestartBackoff = 100 * time.Millisecond
	DefaultRestartMax     = 30 * time.Second
	DefaultCrashLoopAfter = 3
	// MaxWindow caps the deliveries written ahead to one process, whatever the action declares.
	MaxWindow = 1024
)

// Config describes the action a Pool runs and how. The zero value of each optional field takes
// the default named beside it.
type Config struct {
	Name    string   // the action, sent in hello and logged with every line (required)
	Version string   // the action's version, sent in hello
	Command []string // argv, no shell: Command[0] is looked up in PATH (required)
	Dir     string   // working directory of the child ("" = the engine's)
	Env     []string // extra environment "K=V", appended to the engine's and MILLSTREAM_WORKDIR

	Concurrency int  // processes running at once (default 1)
	PerItem     bool // one fresh process per delivery instead of serving many

	ReadyTimeout  time.Duration // hello → ready (default DefaultReadyTimeout)
	ItemTimeout   time.Duration // per attempt, from the item's write (0: DefaultItemTimeout; <0: none)
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

	// QueueSize bounds the items accepted and not yet finished (queued, in flight or waiting to
	// retry); Submit blocks when it is reached. Default: 64, or 2 × processes × window if more.
	QueueSize int

	Hello  Hello        // config and vars sent to every process; Action and Version default to Name and Version
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
	// Metric is called for every metric line, as it arrives.
	Metric func(it *Item, m Metric)
	// Health is called when Pool.Health changes: err nil when healthy again.
	Health func(err error)
}

// AttemptInfo describes one finished attempt, for Hooks.AttemptFinished.
type AttemptInfo struct {
	Item    *Item         // the item as delivered (Delivery and Attempt set); read only
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
	Emits    []Emit   // Done: the staged emits of the successful attempt, in order
	Metrics  []Metric // the metrics of every attempt, in order
	Err      error    // Failed/Abandoned: the cause (wraps a sentinel; names exit status and stderr where relevant)
	Reason   string   // Abstained: the action's reason
	Attempts int      // attempts made (0 when abandoned before the first)
}

// Pool runs an action's processes and hands them items. Its methods are safe for concurrent
// use.
type Pool struct {
	cfg Config
}

// Start validates cfg, starts the pool's processes (Concurrency of them; in per-item mode the
// first warm ones) and returns when every one answered ready. Otherwise it stops what it
// started and returns an error wrapping ErrStart (or ErrConfig) that names the command and
// quotes the last stderr lines. ctx bounds the start only; the pool lives until Close.
func Start(ctx context.Context, cfg Config) (*Pool, error) {
	return nil, fmt.Errorf("%w: not implemented yet", ErrStart)
}

// Submit queues it and returns; the item's final Result is passed to done exactly once, from
// a pool goroutine, when the item is Done, Failed for good, Abstained or Abandoned. done must
// not block for long (it holds up the process that answered).
//
// Submit blocks while the pool holds QueueSize unfinished items (back-pressure); ctx ends the
// wait with ctx.Err(). After Close it returns ErrClosed; for an item that cannot be framed it
// returns an error wrapping ErrBadItem. When Submit returns an error, done is never called.
//
// Ordering: items with the same key (Key, or KeyBase64) run one after another in Submit order,
// each finishing (retries included) before the next starts; keyless items and different keys
// run in parallel, in any order. it.Delivery and it.Attempt are ignored: the pool sets them.
func (p *Pool) Submit(ctx context.Context, it Item, done func(Result)) error {
	return ErrClosed
}

// Health returns nil while the pool can start processes, or an error wrapping ErrCrashLoop
// that names the command and quotes its last stderr lines after CrashLoopAfter consecutive
// failed starts. It turns nil again after the next successful start.
func (p *Pool) Health() error { return nil }

// Window returns the deliveries written ahead to one process, as settled at Start.
func (p *Pool) Window() int { return 1 }

// Close stops the pool. With drain, queued and in-flight items finish first (retries
// included); without it, or when ctx ends first, every unfinished item is Abandoned at once.
// Then every process gets shutdown and, after ShutdownGrace, SIGTERM then SIGKILL of its
// process group. Close returns when every goroutine and process is gone, with ctx.Err() if ctx
// ended before the drain finished. It may be called more than once; later calls wait as the
// first and return nil.
func (p *Pool) Close(ctx context.Context, drain bool) error { return nil }
