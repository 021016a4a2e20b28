package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	errStdoutClosed   = errors.New("closed its stdout")
	errStdoutMidLine  = errors.New("closed its stdout in the middle of a line")
	shutdownLine      = []byte(`{"type":"shutdown"}` + "\n")
	errShutdownIgnore = errors.New("did not exit after shutdown")
	errAbandoned      = errors.New("was stopped: its deliveries were abandoned")
)

// process is one supervised child: its conversation, pipes and goroutines. It is created by
// Pool.spawn and owned by one worker goroutine, which alone writes items to it.
type process struct {
	pool    *Pool
	child   *Child
	pid     int
	log     *slog.Logger
	workdir string
	untrack func() // of workdir, for Teardown
	stdin   *os.File
	wmu     sync.Mutex // one line at a time on stdin
	wbuf    []byte
	window  int
	batch   bool // the action declared "batch": true: items go in envelopes, answers may
	state   bool // the action declared "state": true: it may send state messages
	// concurrent: the action declared "concurrent": true: it runs its deliveries at once, so
	// each one's item timeout runs from its own write. cancel: it declared "cancel": true: a
	// timeout cancels the delivery instead of killing the process.
	concurrent bool
	cancel     bool
	slot       int           // the pool's slot this process fills (0 … Concurrency-1), for metrics
	room       chan struct{} // the reader tells a worker waiting in awaitRoom that the window has room
	// held mirrors len(inflight)+len(cancelled), the slots of the window in use, for other
	// workers deciding whose turn it is (turn.go) without taking pr.mu.
	held     atomic.Int32
	roomWait atomic.Bool // mirrors wantRoom, for the same readers
	gone     atomic.Bool // mirrors ended: the process takes no more deliveries

	ready   chan error     // the ready phase's outcome (capacity 1)
	begin   chan struct{}  // closed once pid and log are set: the readers may start
	exited  chan struct{}  // exited and reaped, pipes drained
	dead    chan struct{}  // exited, pipes drained, in-flight deliveries failed
	pending sync.WaitGroup // watchdog firings and the abandon grace: reap waits for them

	mu       sync.Mutex
	inflight map[string]*task
	// cancelled holds the deliveries cancelled and not yet answered: each keeps its slot of
	// the window until the action's final answer for it, or its cancel grace kills the process.
	cancelled map[string]*cancelEntry
	last      lastDelivery // the last delivery written, for stderr lines
	ended     bool         // no new deliveries
	cause     error        // why the conversation ended first
	timedOut  *task        // the delivery whose timeout killed the process
	wantRoom  bool         // a worker waits in awaitRoom
	stopping  bool         // shutdown sent: EOF is expected
	watchdog  timer        // item timeouts: fires at the oldest delivery's deadline (or later)
	answered  time.Time    // when the last delivery was answered, for item timeouts
	armed     bool
	exitErr   error // cmd.Wait's
	crashed   bool  // ended other than by a clean shutdown; set by reap before dead is closed

	tailMu sync.Mutex
	tail   []string
}

// spawn starts one process, says hello and waits for ready (ReadyTimeout, or ctx).
func (p *Pool) spawn(ctx context.Context, slot int) (*process, error) {
	cfg := &p.cfg
	if tornDown() {
		return nil, fmt.Errorf("%w: action %q: the program is quitting (Teardown)", ErrStart, cfg.Name)
	}
	workdir, err := os.MkdirTemp("", "millstream-workdir-")
	if err != nil {
		return nil, fmt.Errorf("%w: action %q: creating its MILLSTREAM_WORKDIR: %w", ErrStart, cfg.Name, err)
	}
	untrack := TrackDir(workdir)
	pr := &process{
		pool: p, workdir: workdir, slot: slot,
		ready: make(chan error, 1), begin: make(chan struct{}),
		exited: make(chan struct{}), dead: make(chan struct{}), inflight: make(map[string]*task), room: make(chan struct{}, 1),
	}
	pr.child = &Child{
		Argv:   cfg.Command,
		Dir:    cfg.Dir,
		Env:    append(append(os.Environ(), "MILLSTREAM_WORKDIR="+workdir), cfg.Env...),
		Stdout: pr.readStdout,
		Stderr: pr.readStderr,
	}
	pr.untrack = untrack
	if err := pr.child.Start(); err != nil {
		os.RemoveAll(workdir)
		untrack()
		return nil, fmt.Errorf("%w: action %q: starting %s: %w (check the command after -- on the config line)", ErrStart, cfg.Name, p.cmdline, err)
	}
	pr.pid, pr.stdin = pr.child.pid(), pr.child.Stdin()
	pr.log = p.log.With("action", cfg.Name, "pid", pr.pid)
	close(pr.begin)
	go pr.reap()

	// A child that does not read stdin cannot block the start: the hello write has the ready
	// timeout as its deadline.
	_ = pr.stdin.SetWriteDeadline(time.Now().Add(cfg.ReadyTimeout))
	if _, err := pr.stdin.Write(p.hello); err != nil {
		pr.fail(fmt.Errorf("writing hello: %w", err))
	}
	_ = pr.stdin.SetWriteDeadline(time.Time{})
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case err = <-pr.ready:
	case <-timer.C:
		err = fmt.Errorf("%w within %v (the ready timeout)", ErrNoReady, cfg.ReadyTimeout)
		pr.fail(err)
	case <-ctx.Done():
		err = ctx.Err()
		pr.fail(err)
	}
	if err != nil {
		<-pr.dead
		return nil, fmt.Errorf("%w: action %q (%s, pid %d) %w (%s); %s", ErrStart, cfg.Name, p.cmdline, pr.pid, err, exitText(pr.exitError()), pr.tailText())
	}
	pr.log.Debug("action ready", "window", pr.window, "batch", pr.batch, "concurrent", pr.concurrent, "cancel", pr.cancel)
	if h := p.cfg.Hooks.ProcessStarted; h != nil {
		h(pr.pid)
	}
	return pr, nil
}

// fail ends the conversation with cause (the first cause wins) and kills the process group,
// unless the process is shutting down and merely closed its stdout.
func (pr *process) fail(cause error) {
	pr.mu.Lock()
	if pr.cause == nil {
		pr.cause = cause
	}
	pr.ended = true
	pr.gone.Store(true)
	stopping := pr.stopping
	pr.mu.Unlock()
	pr.pool.turnChanged()
	if stopping && errors.Is(cause, errStdoutClosed) {
		return
	}
	pr.child.Kill()
}

// reap waits for the child, kills what is left of its group, drains its pipes, removes its
// workdir and fails the deliveries still in flight.
func (pr *process) reap() {
	err := pr.child.Wait()                 // the group killed, the pipes read to their end or closed
	if errors.Is(err, exec.ErrWaitDelay) { // a clean exit, but the pipes outlived it
		pr.log.Warn("action pipes still open after exit; closed them (a descendant left the process group)", "grace", pipeGrace)
		err = nil
	}
	close(pr.exited)
	pr.stdin.Close()
	if rmErr := os.RemoveAll(pr.workdir); rmErr != nil {
		pr.log.Warn("removing MILLSTREAM_WORKDIR", "dir", pr.workdir, "err", rmErr)
	}
	pr.untrack()

	pr.mu.Lock()
	pr.exitErr = err
	pr.ended = true
	pr.gone.Store(true)
	if pr.watchdog != nil && pr.watchdog.Stop() {
		pr.pending.Done()
	}
	pr.dropCancelledLocked()
	cause, stopping := pr.cause, pr.stopping
	if cause == nil {
		cause = errStdoutClosed
	}
	inflight := make([]*task, 0, len(pr.inflight))
	for _, t := range pr.inflight {
		inflight = append(inflight, t)
	}
	pr.inflight = nil
	pr.heldLocked()
	pr.mu.Unlock()
	pr.pool.turnChanged()
	pr.pending.Wait()
	slices.SortFunc(inflight, func(a, b *task) int { return cmp.Compare(a.seq, b.seq) })

	var endErr error
	if !stopping || err != nil || len(inflight) > 0 {
		endErr = fmt.Errorf("action %q (pid %d) %w (%s); %s", pr.pool.cfg.Name, pr.pid, cause, exitText(err), pr.tailText())
		pr.log.Warn("action process ended", "err", endErr, "in_flight", len(inflight))
	} else {
		pr.log.Debug("action process exited")
	}
	if h := pr.pool.cfg.Hooks.ProcessExited; h != nil {
		h(pr.pid, endErr)
	}
	pr.crashed = endErr != nil // read by the worker after dead is closed
	for _, t := range inflight {
		pr.pool.attemptEnded(t, Failed, pr.deliveryError(t, cause, err), "")
	}
	close(pr.dead)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (pr *process) exitError() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.exitErr
}

// shutdown asks the process to exit and waits ShutdownGrace, then sends SIGTERM to its group
// and waits ShutdownGrace again, then kills the group; ctx ending skips the waits. It returns
// when the process is dead.
func (pr *process) shutdown(ctx context.Context) {
	pr.mu.Lock()
	pr.stopping = true
	pr.ended = true
	pr.gone.Store(true)
	pr.mu.Unlock()
	_, _ = pr.stdin.Write(shutdownLine)
	pr.stdin.Close()
	grace := pr.pool.cfg.ShutdownGrace
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-pr.dead:
		return
	case <-timer.C:
	case <-ctx.Done():
	}
	pr.log.Warn("action did not exit after shutdown; sending SIGTERM to its process group", "grace", grace)
	_ = pr.child.signal(syscall.SIGTERM)
	timer.Reset(grace)
	select {
	case <-pr.dead:
		return
	case <-timer.C:
	case <-ctx.Done():
	}
	pr.log.Warn("action did not exit after SIGTERM; killing its process group")
	pr.fail(errShutdownIgnore)
	<-pr.dead
}

// abandon takes every delivery in flight away from the process, ending each as Abandoned. A
// process that was busy gets SIGTERM now and SIGKILL after ShutdownGrace: its work is no longer
// wanted, and its worker may be blocked writing to it.
func (pr *process) abandon() {
	pr.mu.Lock()
	inflight := pr.inflight
	busy := len(inflight) > 0 || len(pr.cancelled) > 0
	if inflight != nil {
		pr.inflight = make(map[string]*task)
		pr.dropCancelledLocked()
		pr.heldLocked()
		pr.roomLocked()
	}
	if busy {
		pr.pending.Add(1) // under pr.mu, before reap waits: reap waits for the grace below
	}
	pr.mu.Unlock()
	if busy {
		pr.log.Info("abandoning the deliveries in flight; stopping the process", "in_flight", len(inflight))
		_ = pr.child.signal(syscall.SIGTERM)
		go func() {
			defer pr.pending.Done()
			stop := make(chan struct{})
			tm := pr.pool.clock.AfterFunc(pr.pool.cfg.ShutdownGrace, func() { close(stop) })
			select {
			case <-stop:
				pr.fail(errAbandoned)
			case <-pr.exited:
				if !tm.Stop() {
					<-stop
				}
			}
		}()
	}
	for _, t := range inflight {
		pr.pool.attemptEnded(t, Abandoned, fmt.Errorf("%w: delivery %s of item %s abandoned", ErrClosed, t.item.Delivery, t.item.ID), "")
	}
}
