package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/goccy/go-json"
)

// pipeGrace bounds the wait for a child's pipes to close after it exited and its process group
// was killed (a grandchild that left the group may hold them open).
const pipeGrace = 2 * time.Second

// stderr capture limits.
const (
	stderrLineMax = 64 << 10 // longer stderr lines are logged truncated
	tailLines     = 10       // stderr lines kept for error messages
	tailLineMax   = 300      // bytes kept of each
)

var (
	errStdoutClosed   = errors.New("closed its stdout")
	errStdoutMidLine  = errors.New("closed its stdout in the middle of a line")
	shutdownLine      = []byte(`{"type":"shutdown"}` + "\n")
	errShutdownIgnore = errors.New("did not exit after shutdown")
	errAbandoned      = errors.New("was stopped: its deliveries were abandoned")
)

// task is one submitted item, through all its attempts. While an attempt is in flight, the
// process that holds it in its in-flight map owns the attempt fields.
type task struct {
	item     stdio.Item
	done     func(Result)
	key      string
	keyed    bool
	attempts int
	seq      uint64 // of the current attempt, for stderr attribution
	emits    []stdio.Emit
	emit1    [1]stdio.Emit  // room for the common single emit, saving an allocation
	staged   int            // bytes of emit and metric lines of the current attempt
	metrics  []stdio.Metric // of every attempt
	written  time.Time
	retry    *time.Timer // pending retry
	bo       backoff.BackOff
}

type lastDelivery struct {
	delivery, item string
	attempt        int
}

// process is one supervised child: its conversation, pipes and goroutines. It is created by
// Pool.spawn and owned by one worker goroutine, which alone writes items to it.
type process struct {
	pool    *Pool
	cmd     *exec.Cmd
	cancel  context.CancelFunc // SIGKILL of the group, through Cmd.Cancel
	pid     int
	log     *slog.Logger
	workdir string
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	wmu     sync.Mutex // one line at a time on stdin
	wbuf    []byte
	window  int
	room    chan struct{} // the reader tells a worker waiting in awaitRoom that the window has room

	ready      chan error    // the ready phase's outcome (capacity 1)
	stdoutDone chan struct{} // stdout reader ended
	stderrDone chan struct{} // stderr reader ended
	dead       chan struct{} // exited, pipes drained, in-flight deliveries failed

	mu       sync.Mutex
	inflight map[string]*task
	last     lastDelivery // the last delivery written, for stderr lines
	ended    bool         // no new deliveries
	cause    error        // why the conversation ended first
	timedOut *task        // the delivery whose timeout killed the process
	wantRoom bool         // a worker waits in awaitRoom
	stopping bool         // shutdown sent: EOF is expected
	watchdog *time.Timer  // item timeouts: fires at the oldest delivery's deadline (or later)
	answered time.Time    // when the last delivery was answered, for item timeouts
	armed    bool
	exitErr  error // cmd.Wait's

	tailMu sync.Mutex
	tail   []string
}

// spawn starts one process, says hello and waits for ready (ReadyTimeout, or ctx).
func (p *Pool) spawn(ctx context.Context) (*process, error) {
	cfg := &p.cfg
	workdir, err := os.MkdirTemp("", "millstream-workdir-")
	if err != nil {
		return nil, fmt.Errorf("%w: action %q: creating its MILLSTREAM_WORKDIR: %w", ErrStart, cfg.Name, err)
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		files = append(files, r, w)
		return r, w
	}
	stdinR, stdinW := pipe()
	stdoutR, stdoutW := pipe()
	stderrR, stderrW := pipe()
	if err != nil {
		closeAll()
		os.RemoveAll(workdir)
		return nil, fmt.Errorf("%w: action %q: creating pipes: %w", ErrStart, cfg.Name, err)
	}

	lifeCtx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(lifeCtx, cfg.Command[0], cfg.Command[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = append(append(os.Environ(), "MILLSTREAM_WORKDIR="+workdir), cfg.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		cancel()
		closeAll()
		os.RemoveAll(workdir)
		return nil, fmt.Errorf("%w: action %q: starting %s: %w (check the command after -- on the config line)", ErrStart, cfg.Name, p.cmdline, err)
	}
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()

	pr := &process{
		pool: p, cmd: cmd, cancel: cancel, pid: cmd.Process.Pid, workdir: workdir,
		stdin: stdinW, stdout: stdoutR, stderr: stderrR,
		ready: make(chan error, 1), stdoutDone: make(chan struct{}), stderrDone: make(chan struct{}),
		dead: make(chan struct{}), inflight: make(map[string]*task), room: make(chan struct{}, 1),
	}
	pr.log = p.log.With("action", cfg.Name, "pid", pr.pid)
	go pr.readStdout()
	go pr.readStderr()
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
		err = fmt.Errorf("did not answer hello with ready within %v (the ready timeout)", cfg.ReadyTimeout)
		pr.fail(err)
	case <-ctx.Done():
		err = ctx.Err()
		pr.fail(err)
	}
	if err != nil {
		<-pr.dead
		return nil, fmt.Errorf("%w: action %q (%s, pid %d) %w (%s); %s", ErrStart, cfg.Name, p.cmdline, pr.pid, err, exitText(pr.exitError()), pr.tailText())
	}
	pr.log.Debug("action ready", "window", pr.window)
	if h := p.cfg.Hooks.ProcessStarted; h != nil {
		h(pr.pid)
	}
	return pr, nil
}

// settleWindow combines the config's window with the one the action declared in ready.
func settleWindow(configured, declared int, perItem bool) int {
	w := declared
	if configured > 0 && (declared <= 0 || configured < declared) {
		w = configured
	}
	if w < 1 || perItem {
		w = 1
	}
	return min(w, MaxWindow)
}

// readStdout reads the child's protocol lines until its stdout ends or it breaks the protocol.
func (pr *process) readStdout() {
	defer close(pr.stdoutDone)
	lr := stdio.NewLineReader(pr.stdout, stdio.MaxLineBytes)
	var m stdio.Message
	line, err := lr.ReadLine()
	if err == nil {
		err = stdio.DecodeMessage(line, &m)
		if err == nil && m.Type != stdio.TypeReady {
			err = fmt.Errorf("%w: expected ready after hello, got a %q line: %s", stdio.ErrProtocol, m.Type, stdio.QuoteStart(line))
		}
	}
	if err != nil {
		err = readError(err)
		pr.fail(err)
		pr.ready <- fmt.Errorf("before ready: %w", err)
		return
	}
	pr.window = settleWindow(pr.pool.cfg.Window, m.Window, pr.pool.cfg.PerItem)
	pr.ready <- nil
	for {
		line, err := lr.ReadLine()
		if err == nil {
			if typ, delivery, key, payload, hasKey, ok := stdio.FastAnswer(line); ok {
				err = pr.handleFast(typ, delivery, key, payload, hasKey, line)
			} else if err = stdio.DecodeMessage(line, &m); err == nil {
				err = pr.handle(&m, line)
			}
		}
		if err != nil {
			pr.fail(readError(err))
			return
		}
	}
}

func readError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return errStdoutClosed
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errStdoutMidLine
	case errors.Is(err, os.ErrClosed):
		return fmt.Errorf("stdout closed by the engine")
	}
	return err
}

// handle applies one answer line to the delivery it names.
func (pr *process) handle(m *stdio.Message, line []byte) error {
	switch m.Type {
	case stdio.TypeEmit, stdio.TypeMetric, stdio.TypeDone, stdio.TypeError, stdio.TypeAbstain:
	default:
		return fmt.Errorf("%w: unexpected %q line from the action (it may send emit, metric, done, error or abstain): %s", stdio.ErrProtocol, m.Type, stdio.QuoteStart(line))
	}
	pr.mu.Lock()
	t := pr.inflight[m.Delivery]
	if t == nil {
		pr.mu.Unlock()
		return notInFlight(m.Type, m.Delivery, line)
	}
	switch m.Type {
	case stdio.TypeEmit:
		return pr.stageLocked(t, line, stdio.Emit{Outlet: m.Outlet, Key: m.Key, KeyBase64: m.KeyBase64, Payload: m.Payload, Headers: m.Headers})
	case stdio.TypeMetric:
		if err := pr.stagedLocked(t, line); err != nil {
			pr.mu.Unlock()
			return err
		}
		metric := stdio.Metric{Name: m.Name, Value: m.Value, Labels: m.Labels}
		t.metrics = append(t.metrics, metric)
		pr.mu.Unlock()
		if h := pr.pool.cfg.Hooks.Metric; h != nil {
			h(&t.item, metric)
		}
		return nil
	}
	pr.answeredLocked(t)
	switch m.Type {
	case stdio.TypeDone:
		pr.pool.attemptEnded(t, Done, nil, "")
	case stdio.TypeAbstain:
		pr.pool.attemptEnded(t, Abstained, nil, m.Reason)
	case stdio.TypeError:
		msg := m.Message
		if msg == "" {
			msg = m.Error
		}
		if msg == "" {
			msg = "(no message)"
		}
		pr.pool.attemptEnded(t, Failed, &ActionError{Message: msg, Retryable: m.Retryable}, "")
	}
	return nil
}

// handleFast is handle for the lines stdio.FastAnswer recognises, without allocating for them
// beyond the emit itself.
func (pr *process) handleFast(typ string, delivery, key, payload []byte, hasKey bool, line []byte) error {
	pr.mu.Lock()
	t := pr.inflight[string(delivery)]
	if t == nil {
		pr.mu.Unlock()
		return notInFlight(typ, string(delivery), line)
	}
	if typ == stdio.TypeEmit {
		e := stdio.Emit{Payload: append(json.RawMessage(nil), payload...)}
		if hasKey {
			k := string(key)
			e.Key = &k
		}
		return pr.stageLocked(t, line, e)
	}
	pr.answeredLocked(t)
	pr.pool.attemptEnded(t, Done, nil, "")
	return nil
}

func notInFlight(typ, delivery string, line []byte) error {
	return fmt.Errorf("%w: %q for delivery %q, which is not in flight (answered already, never sent, or a line between deliveries): %s", stdio.ErrProtocol, typ, delivery, stdio.QuoteStart(line))
}

// stagedLocked counts line against the delivery's MaxStagedBytes. pr.mu is held.
func (pr *process) stagedLocked(t *task, line []byte) error {
	t.staged += len(line)
	if limit := pr.pool.cfg.MaxStagedBytes; t.staged > limit {
		return fmt.Errorf("%w: delivery %s staged more than %s of emit and metric lines, the limit per delivery (MaxStagedBytes)", stdio.ErrProtocol, t.item.Delivery, stdio.SizeName(limit))
	}
	return nil
}

// stageLocked stages e for t and unlocks pr.mu.
func (pr *process) stageLocked(t *task, line []byte, e stdio.Emit) error {
	if err := pr.stagedLocked(t, line); err != nil {
		pr.mu.Unlock()
		return err
	}
	t.emits = append(t.emits, e)
	pr.mu.Unlock()
	return nil
}

// answeredLocked takes t, just answered, out of flight, unlocks pr.mu and passes its slot on.
func (pr *process) answeredLocked(t *task) {
	delete(pr.inflight, t.item.Delivery)
	if pr.pool.cfg.ItemTimeout > 0 {
		pr.answered = time.Now()
	}
	pr.mu.Unlock()
	pr.next()
}

// next follows a delivery just answered. With one delivery at a time (window 1) it writes the
// next ready item at once from the reader's goroutine: the child has answered everything, so
// it reads its stdin and this write cannot deadlock with its stdout. With a window the worker
// alone writes (the reader never blocks on a write); next only wakes it when the window is
// down to half, so a busy window costs one wake-up per half window, not one per item.
func (pr *process) next() {
	if pr.window == 1 && !pr.pool.cfg.PerItem {
		select {
		case t := <-pr.pool.ready:
			if pr.deliver(t) {
				return
			}
			pr.pool.requeue(t)
		default:
		}
	}
	pr.mu.Lock()
	pr.roomLocked()
	pr.mu.Unlock()
}

// roomLocked wakes a worker waiting for room once the window is at most half full (empty for
// a window of 1). pr.mu is held.
func (pr *process) roomLocked() {
	if pr.wantRoom && len(pr.inflight) <= pr.window/2 {
		pr.wantRoom = false
		select {
		case pr.room <- struct{}{}:
		default:
		}
	}
}

// isEnded reports whether the process takes no more deliveries.
func (pr *process) isEnded() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.ended
}

// hasRoom reports whether another delivery fits in the window now.
func (pr *process) hasRoom() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return len(pr.inflight) < pr.window
}

// awaitRoom waits until another delivery fits in the window (after the reader's wake-up, at
// half the window), the process is dead (alive false) or quit is closed (quit true).
func (pr *process) awaitRoom(quit <-chan struct{}) (alive, quitting bool) {
	for {
		pr.mu.Lock()
		if len(pr.inflight) < pr.window && !pr.wantRoom || len(pr.inflight) == 0 {
			pr.mu.Unlock()
			return true, false
		}
		pr.wantRoom = true
		pr.mu.Unlock()
		select {
		case <-pr.room:
		case <-pr.dead:
			return false, false
		case <-quit:
			return true, true
		}
	}
}

// deliver writes t as this process's next delivery. It returns false, having changed nothing,
// when the process takes no more deliveries or the pool is abandoning.
func (pr *process) deliver(t *task) bool {
	if !pr.register(t) {
		return false
	}
	pr.wmu.Lock()
	pr.wbuf = stdio.AppendItem(pr.wbuf[:0], &t.item)
	pr.writeLocked(pr.wbuf)
	if cap(pr.wbuf) > 1<<20 {
		pr.wbuf = nil
	}
	pr.wmu.Unlock()
	return true
}

// register makes t a delivery in flight on this process (attempt counted, delivery id set,
// timeout running) that the caller then writes. It returns false, having changed nothing,
// when the process takes no more deliveries or the pool is abandoning.
func (pr *process) register(t *task) bool {
	p := pr.pool
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ended || p.abandoning.Load() || len(pr.inflight) >= pr.window {
		return false
	}
	t.attempts++
	t.seq = p.seq.Add(1)
	t.item.Attempt = t.attempts
	var id [64]byte
	t.item.Delivery = string(strconv.AppendUint(append(id[:0], p.prefix...), t.seq, 36))
	t.emits = t.emit1[:0:1]
	t.staged = 0
	t.written = time.Now()
	if p.cfg.ItemTimeout > 0 {
		// One watchdog timer per process, armed for the oldest deadline: no timer is made
		// or stopped per item.
		if !pr.armed {
			pr.armed = true
			if pr.watchdog == nil {
				pr.watchdog = time.AfterFunc(p.cfg.ItemTimeout, pr.watch)
			} else {
				pr.watchdog.Reset(p.cfg.ItemTimeout)
			}
		}
	}
	pr.inflight[t.item.Delivery] = t
	pr.last = lastDelivery{t.item.Delivery, t.item.ID, t.attempts}
	return true
}

// write writes item lines to the child's stdin.
func (pr *process) write(lines []byte) {
	pr.wmu.Lock()
	pr.writeLocked(lines)
	pr.wmu.Unlock()
}

func (pr *process) writeLocked(lines []byte) {
	if _, err := pr.stdin.Write(lines); err != nil {
		pr.fail(fmt.Errorf("%w: writing an item to its stdin: %w", errStdoutClosed, err))
	}
}

// watch runs when the watchdog fires: it ends the process if its oldest delivery outlived its
// deadline, else re-arms for that deadline. A delivery's clock starts at the later of its write
// and the process's previous answer: with a window, deliveries written ahead wait their turn
// in a sequential action, and only the oldest one can be late.
func (pr *process) watch() {
	now := time.Now()
	pr.mu.Lock()
	var oldest *task
	for _, t := range pr.inflight {
		if oldest == nil || t.seq < oldest.seq {
			oldest = t
		}
	}
	pr.armed = false
	if oldest == nil || pr.ended {
		pr.mu.Unlock()
		return
	}
	start := oldest.written
	if pr.answered.After(start) {
		start = pr.answered
	}
	if deadline := start.Add(pr.pool.cfg.ItemTimeout); deadline.After(now) {
		pr.armed = true
		pr.watchdog.Reset(deadline.Sub(now))
		pr.mu.Unlock()
		return
	}
	if pr.timedOut == nil {
		pr.timedOut = oldest
	}
	pr.mu.Unlock()
	pr.fail(fmt.Errorf("%w: delivery %s (item %s) got no answer within %v", ErrTimeout, oldest.item.Delivery, oldest.item.ID, pr.pool.cfg.ItemTimeout))
}

// fail ends the conversation with cause (the first cause wins) and kills the process group,
// unless the process is shutting down and merely closed its stdout.
func (pr *process) fail(cause error) {
	pr.mu.Lock()
	if pr.cause == nil {
		pr.cause = cause
	}
	pr.ended = true
	stopping := pr.stopping
	pr.mu.Unlock()
	if stopping && errors.Is(cause, errStdoutClosed) {
		return
	}
	pr.cancel()
}

// reap waits for the child, kills what is left of its group, drains its pipes, removes its
// workdir and fails the deliveries still in flight.
func (pr *process) reap() {
	err := pr.cmd.Wait()
	// Kill the group: grandchildren die with the child and release the pipes they inherited.
	_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
	timer := time.NewTimer(pipeGrace)
	for _, done := range []chan struct{}{pr.stdoutDone, pr.stderrDone} {
		select {
		case <-done:
		case <-timer.C:
			pr.log.Warn("action pipes still open after exit; closing them (a descendant left the process group)", "grace", pipeGrace)
			pr.stdout.Close()
			pr.stderr.Close()
			<-done
		}
	}
	timer.Stop()
	pr.stdin.Close()
	pr.stdout.Close()
	pr.stderr.Close()
	pr.cancel()
	if rmErr := os.RemoveAll(pr.workdir); rmErr != nil {
		pr.log.Warn("removing MILLSTREAM_WORKDIR", "dir", pr.workdir, "err", rmErr)
	}

	pr.mu.Lock()
	pr.exitErr = err
	pr.ended = true
	if pr.watchdog != nil {
		pr.watchdog.Stop()
	}
	cause, stopping := pr.cause, pr.stopping
	if cause == nil {
		cause = errStdoutClosed
	}
	inflight := make([]*task, 0, len(pr.inflight))
	for _, t := range pr.inflight {
		inflight = append(inflight, t)
	}
	pr.inflight = nil
	pr.mu.Unlock()
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
	for _, t := range inflight {
		pr.pool.attemptEnded(t, Failed, pr.deliveryError(t, cause, err), "")
	}
	close(pr.dead)
}

// deliveryError says why the process's end failed t.
func (pr *process) deliveryError(t *task, cause, exitErr error) error {
	name := pr.pool.cfg.Name
	where := fmt.Sprintf("delivery %s (item %s, attempt %d)", t.item.Delivery, t.item.ID, t.item.Attempt)
	exit, tail := exitText(exitErr), pr.tailText()
	pr.mu.Lock()
	timedOut := pr.timedOut
	pr.mu.Unlock()
	switch {
	case errors.Is(cause, ErrTimeout) && timedOut == t:
		return fmt.Errorf("%w: action %q (pid %d) gave no answer to %s within %v; the process was killed (%s); %s",
			ErrTimeout, name, pr.pid, where, pr.pool.cfg.ItemTimeout, exit, tail)
	case errors.Is(cause, ErrTimeout):
		return fmt.Errorf("%w: action %q (pid %d) was killed during %s because another delivery timed out: %v (%s); %s",
			ErrCrashed, name, pr.pid, where, cause, exit, tail)
	case errors.Is(cause, stdio.ErrProtocol):
		return fmt.Errorf("action %q (pid %d) during %s: %w; the process was killed (%s); %s", name, pr.pid, where, cause, exit, tail)
	case errors.Is(cause, ErrClosed):
		return fmt.Errorf("action %q (pid %d) during %s: %w", name, pr.pid, where, cause)
	}
	var ee *exec.ExitError
	if errors.Is(cause, errStdoutClosed) && (exitErr == nil || errors.As(exitErr, &ee) && ee.ExitCode() >= 0) {
		cause = errors.New("exited") // on its own, not killed by us after it closed stdout
	}
	return fmt.Errorf("%w: action %q (pid %d) %v during %s (%s); %s", ErrCrashed, name, pr.pid, cause, where, exit, tail)
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
	_ = syscall.Kill(-pr.pid, syscall.SIGTERM)
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
	if inflight != nil {
		pr.inflight = make(map[string]*task)
		pr.roomLocked()
	}
	pr.mu.Unlock()
	if len(inflight) > 0 {
		pr.log.Info("abandoning the deliveries in flight; stopping the process", "in_flight", len(inflight))
		_ = syscall.Kill(-pr.pid, syscall.SIGTERM)
		time.AfterFunc(pr.pool.cfg.ShutdownGrace, func() { pr.fail(errAbandoned) })
	}
	for _, t := range inflight {
		pr.pool.attemptEnded(t, Abandoned, fmt.Errorf("%w: delivery %s of item %s abandoned", ErrClosed, t.item.Delivery, t.item.ID), "")
	}
}

// readStderr logs every stderr line and keeps the last ones, until stderr ends.
func (pr *process) readStderr() {
	defer close(pr.stderrDone)
	br := bufio.NewReaderSize(pr.stderr, stderrLineMax)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			pr.logStderr(line, true)
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return
			}
			continue
		}
		if len(line) > 0 {
			pr.logStderr(bytes.TrimRight(line, "\r\n"), false)
		}
		if err != nil {
			return
		}
	}
}

func (pr *process) logStderr(line []byte, truncated bool) {
	kept := line
	if len(kept) > tailLineMax {
		kept = kept[:tailLineMax]
	}
	pr.tailMu.Lock()
	if len(pr.tail) == tailLines {
		copy(pr.tail, pr.tail[1:])
		pr.tail = pr.tail[:tailLines-1]
	}
	pr.tail = append(pr.tail, string(kept))
	pr.tailMu.Unlock()

	ctx := context.Background()
	level := slog.LevelInfo
	var fields map[string]any
	if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &fields) == nil {
		if s, ok := fields["level"].(string); ok {
			_ = level.UnmarshalText([]byte(strings.ToUpper(s)))
			delete(fields, "level")
		}
	} else {
		fields = nil
	}
	if !pr.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8+len(fields))
	pr.mu.Lock()
	var cur *task
	for _, t := range pr.inflight {
		if cur == nil || t.seq < cur.seq {
			cur = t
		}
	}
	// The oldest delivery in flight, else the last one: stderr is read apart from stdout, so a
	// line written during a delivery may arrive after its answer.
	if cur != nil {
		attrs = append(attrs, slog.String("delivery", cur.item.Delivery), slog.String("item", cur.item.ID), slog.Int("attempt", cur.item.Attempt))
	} else if pr.last.delivery != "" {
		attrs = append(attrs, slog.String("delivery", pr.last.delivery), slog.String("item", pr.last.item), slog.Int("attempt", pr.last.attempt))
	}
	pr.mu.Unlock()
	msg := "action stderr"
	if fields != nil {
		for _, k := range []string{"msg", "message"} {
			if s, ok := fields[k].(string); ok {
				msg = s
				delete(fields, k)
				break
			}
		}
		delete(fields, "time")
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			attrs = append(attrs, slog.Any(k, fields[k]))
		}
	} else {
		attrs = append(attrs, slog.String("line", string(line)))
	}
	if truncated {
		attrs = append(attrs, slog.Bool("truncated", true), slog.Int("max_bytes", stderrLineMax))
	}
	pr.log.LogAttrs(ctx, level, msg, attrs...)
}

// tailText quotes the last stderr lines for an error message.
func (pr *process) tailText() string {
	pr.tailMu.Lock()
	defer pr.tailMu.Unlock()
	if len(pr.tail) == 0 {
		return "stderr was empty"
	}
	var b strings.Builder
	b.WriteString("last stderr lines: ")
	for i, l := range pr.tail {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(strconv.Quote(l))
	}
	return b.String()
}
