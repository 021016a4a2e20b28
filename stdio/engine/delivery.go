package engine

import (
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/internal/errtext"

	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/goccy/go-json"
)

// task is one submitted item, through all its attempts. While an attempt is in flight, the
// process that holds it in its in-flight map owns the attempt fields.
type task struct {
	item     *stdio.Item // the caller's (Submit copies it; SubmitBatch takes its items over)
	done     func(Result)
	each     func(int, Result) // instead of done, for an item of SubmitBatch: its index
	index    int
	key      string
	keyed    bool
	attempts int
	seq      uint64 // of the current attempt, for stderr attribution
	emits    []stdio.Emit
	emit1    [1]stdio.Emit  // room for the common single emit, saving an allocation
	staged   int            // bytes of emit, metric and state lines of the current attempt
	metrics  []stdio.Metric // of every attempt
	written  time.Time
	retry    timer // pending retry
	bo       backoff.BackOff

	stateOf  func(int) json.RawMessage // the batch's WithState hook, or nil
	state    *stdio.StagedState        // the current attempt's last state message, or nil
	stateErr error                     // a state message of the current attempt that fails the item
}

type lastDelivery struct {
	delivery, item string
	attempt        int
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
	return min(w, maxWindow)
}

// readStdout reads the child's protocol lines until its stdout ends or it breaks the protocol.
func (pr *process) readStdout(stdout io.Reader) {
	<-pr.begin
	lr := stdio.NewLineReader(stdout, stdio.MaxLineBytes)
	var m stdio.Message
	line, err := lr.ReadLine()
	err = noNewline(err, line)
	if err == nil {
		err = stdio.DecodeMessage(line, &m)
		if err == nil && m.Type != stdio.TypeReady {
			err = stdio.NewProtocolError(stdio.RuleUnexpected, line, fmt.Sprintf("expected ready after hello, got a %q line", m.Type))
		}
	}
	if err != nil {
		err = readError(err)
		pr.fail(err)
		pr.ready <- fmt.Errorf("before ready: %w", err)
		return
	}
	if pr.state, err = pr.pool.readyState(&m, line); err != nil {
		pr.fail(err)
		pr.ready <- err
		return
	}
	pr.window = settleWindow(pr.pool.cfg.Window, m.Window, pr.pool.cfg.PerItem)
	pr.batch = m.Batch // an action that says nothing gets no envelope and may send none
	pr.concurrent, pr.cancel = m.Concurrent, m.Cancel
	pr.ready <- nil
	inBatch := func(msg []byte) error { return pr.handleInBatch(msg, &m) }
	fast := stdio.FastFunc(pr.handleFast)
	for {
		line, err := lr.ReadLine()
		if err == nil {
			if typ, delivery, key, payload, hasKey, ok := stdio.FastAnswer(line); ok {
				err = pr.handleFast(typ, delivery, key, payload, hasKey, line)
			} else if isBatch, berr := pr.splitBatch(line, fast, inBatch); isBatch {
				err = berr
			} else if err = stdio.DecodeMessage(line, &m); err == nil {
				err = pr.handle(&m, line)
			}
		}
		if err != nil {
			err = readError(noNewline(err, line))
			pr.violated(err)
			pr.fail(err)
			return
		}
	}
}

// violated reports a protocol violation of the ready process to Hooks.ProtocolViolation, before
// the process is killed for it, charged to the oldest delivery in flight (with one at a time,
// the delivery): a line that breaks the protocol cannot be trusted to name its own.
func (pr *process) violated(err error) {
	h := pr.pool.cfg.Hooks.ProtocolViolation
	if h == nil || !errors.Is(err, stdio.ErrProtocol) {
		return
	}
	var it *stdio.Item
	pr.mu.Lock()
	var oldest *task
	for _, t := range pr.inflight {
		if oldest == nil || t.seq < oldest.seq {
			oldest = t
		}
	}
	if oldest != nil {
		c := *oldest.item // a retry rewrites the task's item once the attempt is failed
		it = &c
	}
	pr.mu.Unlock()
	h(pr.pid, it, err)
}

// noNewline makes a last line without a newline the protocol violation it is, quoting it.
func noNewline(err error, line []byte) error {
	if errors.Is(err, stdio.ErrNoNewline) {
		e := stdio.NewProtocolError(stdio.RuleNoNewline, line, "the last line has no newline (stdout ended after it)")
		e.Err = stdio.ErrNoNewline
		return e
	}
	return err
}

func readError(err error) error {
	switch {
	case errors.Is(err, stdio.ErrProtocol):
		return err
	case errors.Is(err, io.EOF):
		return errStdoutClosed
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errStdoutMidLine
	case errors.Is(err, os.ErrClosed):
		return fmt.Errorf("stdout closed by the engine")
	}
	return err
}

// splitBatch applies the messages of an answer envelope, in order, when the action declared
// envelopes and line is one; isBatch is false for any other line.
// The common answers go to handleFast, read as the envelope is split.
func (pr *process) splitBatch(line []byte, fast stdio.FastFunc, inBatch func([]byte) error) (isBatch bool, err error) {
	if !pr.batch {
		return false, nil
	}
	return stdio.SplitAnswers(line, fast, inBatch)
}

// handleInBatch applies one message of an answer envelope, other than those handleFast
// takes, as the same line on its own.
func (pr *process) handleInBatch(msg []byte, m *stdio.Message) error {
	if err := stdio.DecodeInBatch(msg, m); err != nil {
		return err
	}
	switch m.Type {
	case stdio.TypeEmit, stdio.TypeMetric, stdio.TypeState, stdio.TypeDone, stdio.TypeError, stdio.TypeAbstain:
		return pr.handle(m, msg)
	}
	e := stdio.NewProtocolError(stdio.RuleMalformedBatch, msg, fmt.Sprintf("%s: a %q message, which an envelope from the action cannot hold (it may hold emit, metric, state, done, error and abstain messages)", stdio.ErrMalformedBatch, m.Type))
	e.Err = stdio.ErrMalformedBatch
	return e
}

// handle applies one answer line to the delivery it names.
func (pr *process) handle(m *stdio.Message, line []byte) error {
	switch m.Type {
	case stdio.TypeEmit, stdio.TypeMetric, stdio.TypeState, stdio.TypeDone, stdio.TypeError, stdio.TypeAbstain:
	case stdio.TypeBatch:
		if pr.batch { // an envelope the decoder reads and SplitBatch did not: its keys repeat
			e := stdio.NewProtocolError(stdio.RuleMalformedBatch, line, fmt.Sprintf(`%s: a line whose "type" is given more than once, the last one "batch"`, stdio.ErrMalformedBatch))
			e.Err = stdio.ErrMalformedBatch
			return e
		}
		return stdio.NewProtocolError(stdio.RuleUndeclaredBatch, line, `a batch envelope from an action that did not declare "batch": true in its ready line (declare it there to answer in envelopes, or write one message per line)`)
	default:
		return stdio.NewProtocolError(stdio.RuleUnexpected, line, fmt.Sprintf("unexpected %q line from the action (it may send emit, metric, state, done, error or abstain)", m.Type))
	}
	pr.mu.Lock()
	t := pr.inflight[m.Delivery]
	if t == nil {
		if pr.cancelledAnswerLocked(m.Type, m.Delivery) {
			return nil
		}
		pr.mu.Unlock()
		return notInFlight(m.Type, m.Delivery, line)
	}
	switch m.Type {
	case stdio.TypeEmit:
		return pr.stageLocked(t, line, stdio.Emit{Outlet: m.Outlet, Key: m.Key, KeyBase64: m.KeyBase64, Payload: m.Payload, Headers: m.Headers})
	case stdio.TypeState:
		return pr.stageStateLocked(t, line, m.State)
	case stdio.TypeMetric:
		if err := pr.stagedLocked(t, line); err != nil {
			pr.mu.Unlock()
			return err
		}
		metric := stdio.Metric{Name: m.Name, Value: m.Value, Labels: m.Labels}
		t.metrics = append(t.metrics, metric)
		pr.mu.Unlock()
		if h := pr.pool.cfg.Hooks.Metric; h != nil {
			h(t.item, metric)
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
		if len(pr.cancelled) > 0 && pr.cancelledAnswerLocked(typ, string(delivery)) {
			return nil
		}
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
	if typ == stdio.TypeState {
		return pr.stageStateLocked(t, line, payload)
	}
	pr.answeredLocked(t)
	pr.pool.attemptEnded(t, Done, nil, "")
	return nil
}

func notInFlight(typ, delivery string, line []byte) error {
	return stdio.NewProtocolError(stdio.RuleNotInFlight, line, fmt.Sprintf("%q for delivery %q, which is not in flight (answered already, never sent, or a line between deliveries)", typ, delivery))
}

// stagedLocked counts line against the delivery's MaxStagedBytes. pr.mu is held.
func (pr *process) stagedLocked(t *task, line []byte) error {
	t.staged += len(line)
	pr.pool.cfg.Budget.add(len(line))
	if limit := pr.pool.cfg.MaxStagedBytes; t.staged > limit {
		return stdio.NewProtocolError(stdio.RuleStagedTooMuch, nil, fmt.Sprintf("delivery %s staged more than %s of emit, metric and state lines, the limit per delivery (MaxStagedBytes)", t.item.Delivery, errtext.Size(limit)))
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
	if h := pr.pool.cfg.Hooks.DeliveryAnswered; h != nil {
		h(pr.slot, pr.pool.clock.Now().Sub(t.written))
	}
	pr.releasedLocked()
}

// releasedLocked follows a final answer that freed a slot of the window: it unlocks pr.mu
// and passes the slot on.
func (pr *process) releasedLocked() {
	if pr.pool.cfg.ItemTimeout > 0 {
		pr.answered = pr.pool.clock.Now()
	}
	pr.heldLocked()
	pr.mu.Unlock()
	pr.pool.turnChanged()
	pr.next()
}

// usedLocked returns the slots of the window in use: deliveries in flight and cancelled ones
// not yet answered. pr.mu is held.
func (pr *process) usedLocked() int { return len(pr.inflight) + len(pr.cancelled) }

// heldLocked publishes usedLocked in held, after the maps changed. pr.mu is held.
func (pr *process) heldLocked() { pr.held.Store(int32(pr.usedLocked())) }

// next follows a delivery just answered. With one delivery at a time (window 1) it writes the
// next ready item at once from the reader's goroutine: the child has answered everything, so
// it reads its stdin and this write cannot deadlock with its stdout. With a window the worker
// alone writes (the reader never blocks on a write); next only wakes it when the window is
// down to half, so a busy window costs one wake-up per half window, not one per item.
func (pr *process) next() {
	if pr.window == 1 && !pr.pool.cfg.PerItem && !pr.pool.cfg.Budget.isFull() {
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
	if pr.wantRoom && pr.usedLocked() <= pr.window/2 {
		pr.wantRoom = false
		pr.roomWait.Store(false)
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
	return pr.usedLocked() < pr.window
}

// awaitRoom waits until another delivery fits in the window (after the reader's wake-up, at
// half the window), the process is dead (alive false) or quit is closed (quit true).
func (pr *process) awaitRoom(quit <-chan struct{}) (alive, quitting bool) {
	for {
		pr.mu.Lock()
		if used := pr.usedLocked(); used < pr.window && !pr.wantRoom || used == 0 {
			pr.mu.Unlock()
			return true, false
		}
		pr.wantRoom = true
		pr.roomWait.Store(true)
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
	if !pr.register(t, pr.pool.clock.Now()) {
		return false
	}
	pr.pool.turnChanged()
	pr.wmu.Lock()
	pr.wbuf = stdio.AppendItem(pr.wbuf[:0], t.item)
	pr.writeLocked(pr.wbuf)
	if cap(pr.wbuf) > 1<<20 {
		pr.wbuf = nil
	}
	pr.wmu.Unlock()
	return true
}

// register makes t a delivery in flight on this process (attempt counted, delivery id set,
// timeout running) that the caller then writes, now being the time of the write (one reading
// of the clock for a run of items written together). It returns false, having changed
// nothing, when the process takes no more deliveries or the pool is abandoning.
func (pr *process) register(t *task, now time.Time) bool {
	p := pr.pool
	t.readState() // outside pr.mu: the caller's hook; harmless when the attempt is not written
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ended || p.abandoning.Load() || pr.usedLocked() >= pr.window {
		return false
	}
	t.attempts++
	t.seq = p.seq.Add(1)
	t.item.Attempt = t.attempts
	if t.item.Trace.IsValid() { // each attempt is a span of its own, a child of the input's
		t.item.Trace.SpanID = stdio.NewSpanID()
	}
	var id [64]byte
	t.item.Delivery = string(strconv.AppendUint(append(id[:0], p.prefix...), t.seq, 36))
	t.emits = t.emit1[:0:1]
	t.staged = 0
	t.state, t.stateErr = nil, nil
	t.written = now
	if p.cfg.ItemTimeout > 0 {
		// One watchdog timer per process, armed for the oldest deadline: no timer is made
		// or stopped per item.
		if !pr.armed {
			pr.armed = true
			pr.pending.Add(1) // the firing's; reap waits for it
			if pr.watchdog == nil {
				pr.watchdog = p.clock.AfterFunc(p.cfg.ItemTimeout, pr.watch)
			} else {
				pr.watchdog.Reset(p.cfg.ItemTimeout)
			}
		}
	}
	pr.inflight[t.item.Delivery] = t
	pr.heldLocked()
	pr.last = lastDelivery{t.item.Delivery, t.item.ID, t.attempts}
	p.cfg.Budget.begin()
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

// deliveryError says why the process's end failed t.
func (pr *process) deliveryError(t *task, cause, exitErr error) error {
	name := pr.pool.cfg.Name
	where := fmt.Sprintf("delivery %s (item %s, attempt %d)", t.item.Delivery, t.item.ID, t.item.Attempt)
	exit, tail := exitText(exitErr), pr.tailText()
	pr.mu.Lock()
	timedOut := pr.timedOut
	pr.mu.Unlock()
	switch {
	case errors.Is(cause, errCancelIgnored):
		return fmt.Errorf("%w: action %q (pid %d) was killed during %s: %v (%s); %s", ErrCrashed, name, pr.pid, where, cause, exit, tail)
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
