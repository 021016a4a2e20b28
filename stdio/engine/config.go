package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by Start to zero Config fields. Only the engine's own knobs have one: what
// the action config sets (concurrency, timeouts, retries, window) is taken as given, and its
// defaults live with the action config.
const (
	// DefaultReadyTimeout is the spec's hello → ready bound, used when ReadyTimeout is 0; the
	// action config line's --ready-timeout default is this one.
	DefaultReadyTimeout = 10 * time.Second
	// DefaultShutdownGrace is how long a process has from shutdown to its exit before SIGTERM,
	// used when ShutdownGrace is 0; the conformance kit waits the same.
	DefaultShutdownGrace  = 5 * time.Second
	defaultRetryBackoff   = 100 * time.Millisecond
	defaultRetryMax       = 10 * time.Second
	defaultRestartBackoff = 100 * time.Millisecond
	defaultRestartMax     = 30 * time.Second
	defaultCrashLoopAfter = 3
	defaultMaxStagedBytes = 64 << 20
	// maxWindow caps the deliveries written ahead to one process, whatever the action declares.
	maxWindow = 1024
)

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
	ShutdownGrace time.Duration // shutdown → exit 0, before SIGTERM then SIGKILL (default 5 s)

	// Window is the number of deliveries written ahead to one process. 0 lets the action decide
	// by declaring "window": N in its ready line; >0 is the config line's --window N, which
	// wins over the action's silence and is capped by a smaller declared window. 1 is the
	// spec's one delivery at a time. Always capped at 1024.
	Window int

	Retries        int           // retries after the first attempt of a retryable failure (0: none)
	RetryBackoff   time.Duration // first retry delay, doubling with jitter (default 100 ms)
	RetryMax       time.Duration // longest retry delay (default 10 s)
	RestartBackoff time.Duration // first delay between failed starts (default 100 ms)
	RestartMax     time.Duration // longest delay between failed starts (default 30 s)
	CrashLoopAfter int           // consecutive failed starts before Health reports ErrCrashLoop (default 3)

	// MaxStagedBytes bounds the emit, metric and state lines one delivery may stage (default 64 MiB); more is a protocol violation that fails the attempt.
	MaxStagedBytes int

	// Budget, when set, bounds the output staged and held across every pool sharing it: while
	// it is full no item is written. Done results then carry Held bytes the caller releases.
	Budget *Budget

	// QueueSize bounds the items accepted and not yet finished (queued, in flight or waiting to
	// retry); Submit blocks when it is reached. Default: 256, or 2 × processes × window if more.
	QueueSize int

	// State holds the inlets whose items keep state, with their limits; empty: no state. With
	// it, hello says so, a process whose ready does not declare "state": true fails its start,
	// and a state staged for an item of another inlet, or over the limits, fails the item
	// (ErrState).
	State map[string]StateLimits

	Hello  stdio.Hello  // config and vars sent to every process; Action and Version default to Name and Version
	Logger *slog.Logger // where the pool and every child's stderr log (default: discard)
	Hooks  Hooks        // optional callbacks, for metrics

	clock clock // nil: the real time; tests set a fake one (export_test.go)
}

// Hooks are optional callbacks for metrics and health. They run on the pool's goroutines,
// possibly concurrently, and must return quickly.
type Hooks struct {
	// ProcessStarted is called when a process answered ready.
	ProcessStarted func(pid int)
	// ProcessRestarted is called, after ProcessStarted, for a process started to replace one
	// that ended other than by a clean shutdown (a crash, a kill, a timeout); not for the
	// fresh process of each item in per-item mode.
	ProcessRestarted func(pid int)
	// ProcessExited is called when a process ended; err is nil for a clean shutdown, else it
	// names the exit status, the cause and the last stderr lines.
	ProcessExited func(pid int, err error)
	// ProcessStartFailed is called when a process meant to replace one that ended could not be
	// started or did not answer ready (err wraps ErrStart), before the pool backs off and tries
	// again. A failed Start is not reported here: Start returns its error.
	ProcessStartFailed func(err error)
	// ProtocolViolation is called when a ready process wrote a line that breaks the protocol
	// (err wraps a *stdio.ProtocolError), before the process is killed for it and its
	// deliveries in flight fail (retryable). it is the oldest delivery in flight, a copy, or nil
	// when none was (a line between deliveries). A violation before ready is the start's error.
	ProtocolViolation func(pid int, it *stdio.Item, err error)
	// AttemptFinished is called after every attempt, before any retry.
	AttemptFinished func(AttemptInfo)
	// stdio.Metric is called for every metric line, as it arrives.
	Metric func(it *stdio.Item, m stdio.Metric)
	// Stderr is called for every stderr line of a process (without its line end; a line
	// longer than the capture limit truncated), with the delivery it belongs to: as the action
	// tagged it (a JSON line with delivery, item or attempt, as the SDKs' item logs), else when
	// the engine can tell (as its log line is tagged), else none. It runs on the process's
	// stderr reader: it must not block.
	Stderr func(StderrLine)
	// Cancelled is called when a delivery's item timeout passed in a process that declared
	// "cancel": true, as the delivery fails and before its cancel is written; it is a copy.
	Cancelled func(pid int, it *stdio.Item)
	// CancelIgnored is called when a process is killed for giving no final answer to the
	// cancelled delivery within CancelGrace.
	CancelIgnored func(pid int, delivery string)
	// DeliveryAnswered is called when the action gives a delivery its final answer (done,
	// error or abstain; a cancelled delivery's late one included), freeing its slot of the
	// window, with the process's slot in the pool (0 … Concurrency-1) and the time from the
	// delivery's write to that answer.
	DeliveryAnswered func(slot int, wait time.Duration)
	// Health is called when the pool's health changes (ErrCrashLoop, then nil): err nil when healthy again.
	Health func(err error)
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
	def(&c.RetryBackoff, defaultRetryBackoff)
	def(&c.RetryMax, defaultRetryMax)
	def(&c.RestartBackoff, defaultRestartBackoff)
	def(&c.RestartMax, defaultRestartMax)
	if c.MaxStagedBytes <= 0 {
		c.MaxStagedBytes = defaultMaxStagedBytes
	}
	if c.CrashLoopAfter == 0 {
		c.CrashLoopAfter = defaultCrashLoopAfter
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

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "command [" + strings.Join(q, " ") + "]"
}
