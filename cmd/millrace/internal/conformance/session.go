package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// delivery is one item written to a process and what it answered.
type delivery struct {
	idx     int // index in the run's inputs; -1 for an item made up by a check
	item    stdio.Item
	owner   string // the check charged when it is not answered
	written time.Time
	latency time.Duration
	text    bool // the item carries non-ASCII text, so an answer that is not UTF-8 broke it
	emits   []stdio.Message
	states  []stdio.Message // its state messages, in order
	metrics int
	answer  *stdio.Message // done, error or abstain
}

// outcome names how a delivery was answered: done, error, abstain, or "" when it was not.
func (d *delivery) outcome() string {
	if d.answer == nil {
		return ""
	}
	return d.answer.Type
}

// session is one conversation with the action: usually one process, one per item with
// --per-item.
type session struct {
	r          *runner
	owner      string // the check charged with a crash, a timeout or a missing ready
	cfg        json.RawMessage
	helloExtra string
	p          *proc
	started    time.Time
	readyIn    time.Duration
	count      int // deliveries written to the current process
	inflight   map[string]*delivery
	answered   map[string]*delivery
	order      []*delivery // in answer order
	broken     bool        // the process ended or was given up on: nothing more is sent
	cause      string      // the check charged when it broke
	batch      bool        // the process declared "batch": true in ready
	concurrent bool        // the process declared "concurrent": true in ready
	cancel     bool        // the process declared "cancel": true in ready
	// cancelled is the delivery the cancel check cancelled, awaited within the cancel grace
	cancelled *delivery
	// interleaving: the delivery whose messages are under way, those whose messages another's
	// came between, and how many
	open        string
	mixed       []string
	interleaved int
	seq         int

	hState json.RawMessage // hello's "state": the inlets that keep state (nil: none)
	state  bool            // the process declared "state": true in ready
}

// open starts a process and says hello, with helloExtra spliced in (then items get unknown
// keys too); a session that got no ready is broken, its owner charged.
func (r *runner) open(owner string, cfg json.RawMessage, helloExtra string) *session {
	return r.openState(owner, cfg, helloExtra, r.a.State)
}

// openState is open with hello naming inlets as the inlets that keep state.
func (r *runner) openState(owner string, cfg json.RawMessage, helloExtra string, inlets map[string]engine.StateLimits) *session {
	s := &session{r: r, owner: owner, cfg: cfg, helloExtra: helloExtra, inflight: map[string]*delivery{}, answered: map[string]*delivery{}, started: time.Now(), hState: helloState(inlets)}
	s.start()
	return s
}

func (s *session) start() {
	r := s.r
	p, err := startProc(r.a, r.workdir, r.opts.StderrLineMax)
	if err != nil {
		r.setFatal(err)
		s.broken = true
		return
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	s.p, s.count = p, 0
	hello := stdio.Message{Type: stdio.TypeHello, Protocol: stdio.Protocol, Action: r.a.Name, Version: r.a.Version, Config: s.cfg, Vars: r.a.vars(), State: s.hState}
	line := stdio.AppendMessage(nil, &hello)
	if s.helloExtra != "" {
		line = splice(line, s.helloExtra)
	}
	p.write(line)
	t0 := time.Now()
	deadline := time.NewTimer(r.readyWait())
	defer deadline.Stop()
	notice := r.noticeTimer(r.readyWait())
	defer notice.Stop()
	for {
		select {
		case <-notice.C():
			if s.owner != checkReady {
				continue // every conversation waits alike: the main one says so
			}
			r.notef("waiting for ready from %s (hello sent %s ago; the ready timeout is %s, the check gives up at %s)", s.name(), roundDur(time.Since(t0)), r.a.ReadyTimeout, r.readyWait())
		case ev, ok := <-p.events:
			if !ok {
				s.end(fmt.Sprintf("%s before answering ready", s.exitDesc()))
				return
			}
			if ev.kind == evMessage && ev.msg.Type == stdio.TypeReady {
				s.observe(ev)
				s.batch = ev.msg.Batch
				s.concurrent, s.cancel = ev.msg.Concurrent, ev.msg.Cancel
				s.state = ev.msg.DeclaresState()
				s.readyIn = ev.at.Sub(t0)
				r.mu.Lock()
				r.readyTimes = append(r.readyTimes, s.readyIn)
				r.mu.Unlock()
				if s.readyIn > r.a.ReadyTimeout {
					r.failFirst(checkReady, fmt.Sprintf("ready came after %s, over the %s ready timeout (millrace gives up on a process that takes longer): do the slow preparation after ready, or raise --ready-timeout", roundDur(s.readyIn), r.a.ReadyTimeout))
				}
				return
			}
			s.handle(ev)
			if s.broken {
				return
			}
		case <-deadline.C:
			// the ready rule's fault, whichever conversation meets it: charged once
			s.endAs(checkReady, fmt.Sprintf("no ready within %s of hello (the ready timeout is %s): %s", r.readyWait(), r.a.ReadyTimeout, streamHint))
			return
		case <-r.ctx.Done():
			s.end("stopped: " + r.ctx.Err().Error())
			return
		}
	}
}

// ok reports whether the session can take items.
func (s *session) ok() bool { return !s.broken && s.r.fatalErr() == nil && s.r.ctx.Err() == nil }

// end charges the session's owner with why it broke, kills the process and stops the session.
func (s *session) end(why string) {
	s.endAs(s.owner, why)
}

func (s *session) endAs(check, why string) {
	if s.broken {
		return
	}
	if s.p != nil && s.p.tooLong { // stopped for an unbounded line, not ended by itself
		<-s.p.done
		check, why = checkFraming, "the process was stopped: "+s.p.endNote+"; write large data to a file in MILLSTREAM_WORKDIR and send its path"
	}
	s.broken, s.cause = true, check
	if s.p != nil {
		s.p.kill()
		why += s.p.stderr.tail()
	}
	if check == checkReady {
		s.r.failFirst(check, why)
	} else {
		s.r.fail(check, why)
	}
	s.skipWaiting(check)
}

// stop ends the session on a fault already charged to cause: the process is killed, as the
// engine kills it on a line it cannot read, and nothing more is judged in this conversation.
func (s *session) stop(cause string) {
	if s.broken {
		return
	}
	s.broken, s.cause = true, cause
	s.p.kill()
	s.skipWaiting(cause)
}

// skipWaiting records that the checks whose deliveries are in flight, and the session's own,
// cannot be judged because cause failed.
func (s *session) skipWaiting(cause string) {
	s.r.skipFor(s.owner, cause)
	for _, d := range s.inflight {
		s.r.skipFor(d.owner, cause)
	}
}

func (s *session) exitDesc() string {
	<-s.p.done
	_, desc := s.p.exitStatus()
	if s.p.endNote != "" {
		desc += " (" + s.p.endNote + ")"
	}
	return desc
}

// send writes one item; with --per-item each item gets a fresh process.
func (s *session) send(idx int, it stdio.Item, owner string) *delivery {
	if s.r.a.PerItem && s.count > 0 {
		s.shutdown()
		s.broken = false
		s.start()
		if !s.ok() {
			return nil
		}
	}
	s.number(&it)
	line := appendItem(nil, &it)
	d := s.track(idx, it, owner, line)
	if s.helloExtra != "" { // the conversation with unknown keys has them in items too
		line = splice(line, unknownItemKeys)
	}
	s.p.write(line)
	return d
}

// number gives it the session's next delivery, first attempt.
func (s *session) number(it *stdio.Item) {
	s.seq++
	it.Delivery = fmt.Sprintf("dl-%s-%d", s.owner, s.seq)
	it.Attempt = 1
}

// track records the delivery of it, written as line, as in flight.
func (s *session) track(idx int, it stdio.Item, owner string, line []byte) *delivery {
	d := &delivery{idx: idx, item: it, owner: owner, written: time.Now(), text: !isASCII(line)}
	s.inflight[it.Delivery] = d
	s.count++
	return d
}

// await waits until every delivery in flight is answered; each answer (not any line) restarts
// the item timeout. A timeout or an exit is charged to the owner of the oldest unanswered
// delivery.
func (s *session) await() {
	wait, bounded := s.r.answerWait()
	missed := s.owner != checkAnswers && s.r.missedAnswer()
	if missed && (wait == 0 || wait > missedWait) {
		wait = missedWait
	}
	if s.cancelled != nil {
		wait, bounded = s.r.cancelWait(), false
	}
	timer := newItemTimer(wait)
	defer timer.Stop()
	notice := s.r.noticeTimer(wait)
	defer notice.Stop()
	since := time.Now()
	for len(s.inflight) > 0 && s.ok() {
		select {
		case <-notice.C():
			limit := "no item timeout"
			if wait > 0 {
				limit = "the check fails at " + wait.String()
			}
			s.r.notef("waiting for an answer to %s (%s so far; %s)", describe(s.oldest()), roundDur(time.Since(since)), limit)
		case ev, ok := <-s.p.events:
			if !ok {
				d := s.oldest()
				why := fmt.Sprintf("%s while %s was in flight", s.exitDesc(), describe(d))
				if d.owner == checkBatch {
					why += ": " + batchHint
				}
				s.endAs(d.owner, why)
				return
			}
			before := len(s.inflight)
			s.handle(ev)
			if len(s.inflight) < before {
				timer.Reset()
				notice.Reset()
				since = time.Now()
			}
		case <-timer.C():
			d := s.oldest()
			if missed {
				// The main conversation went without an answer already: most likely the same
				// fault, charged once (SKIP …: answers failed), not waited out check by check.
				s.stop(checkAnswers)
				return
			}
			if d.owner == checkAnswers {
				s.r.setMissedAnswer()
			}
			limit := "the item timeout"
			if bounded {
				limit = fmt.Sprintf("the conformance wait; the item timeout is %s: give a slow action more with --timeout", s.r.a.Timeout)
			}
			hint := streamHint
			if d.owner == checkBatch {
				hint = batchHint
			}
			if d == s.cancelled {
				s.endAs(d.owner, fmt.Sprintf("no final answer to %s within %s of its cancel (the engine's cancel grace is %s; then it kills the process and fails its other deliveries): on a cancel, stop the delivery's work and answer it at once, e.g. {\"type\":\"error\",\"delivery\":…,\"retryable\":true,\"message\":\"cancelled\"}", describe(d), wait, engine.CancelGrace))
				return
			}
			s.endAs(d.owner, fmt.Sprintf("no answer to %s within %s (%s): answer every item, end each line with \\n, %s", describe(d), wait, limit, hint))
			return
		case <-s.r.ctx.Done():
			s.endAs(s.owner, "stopped: "+s.r.ctx.Err().Error())
			return
		}
	}
}

func (s *session) oldest() *delivery {
	var old *delivery
	for _, d := range s.inflight {
		if old == nil || d.written.Before(old.written) {
			old = d
		}
	}
	return old
}

func describe(d *delivery) string {
	src := ""
	if d.idx >= 0 {
		src = " from " + d.item.ID
	}
	return fmt.Sprintf("delivery %s (item%s)", d.item.Delivery, src)
}

// deliver sends one item and waits for its answer.
func (s *session) deliver(idx int, it stdio.Item, owner string) *delivery {
	if !s.ok() {
		return nil
	}
	d := s.send(idx, it, owner)
	if d == nil {
		return nil
	}
	s.await()
	return d
}

// quiet listens for d: anything the action writes meanwhile is out of turn.
func (s *session) quiet(d time.Duration) {
	if !s.ok() {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-s.p.events:
			if !ok {
				s.end(fmt.Sprintf("%s between deliveries, before shutdown", s.exitDesc()))
				return
			}
			s.handle(ev)
		case <-timer.C:
			return
		case <-s.r.ctx.Done():
			return
		}
	}
}

// shutdown asks the process to exit and charges the shutdown check unless it exits with
// status 0 within the grace period. A broken session is only cleaned up.
func (s *session) shutdown() {
	if s.p == nil {
		return
	}
	defer s.p.kill() // grandchildren too
	if !s.ok() {
		return
	}
	r := s.r
	s.p.write(stdio.AppendMessage(nil, &stdio.Message{Type: stdio.TypeShutdown}))
	t0 := time.Now()
	grace := time.NewTimer(r.a.ShutdownGrace)
	defer grace.Stop()
	notice := r.noticeTimer(r.a.ShutdownGrace)
	defer notice.Stop()
	note := func() {
		r.noteOnce("shutdown", "waiting for %s to exit after shutdown (%s so far; the check fails at %s)", s.name(), roundDur(time.Since(t0)), r.a.ShutdownGrace)
	}
	events := s.p.events
	for events != nil {
		select {
		case <-notice.C():
			note()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			s.handle(ev)
			if s.broken {
				return
			}
		case <-grace.C:
			// The notice is due before the grace ends: a session woken late for both (a
			// loaded machine) still says what it waited for before it fails.
			select {
			case <-notice.C():
				note()
			default:
			}
			s.broken = true
			s.p.kill()
			r.failFirst(checkShutdown, fmt.Sprintf("still running %s after shutdown (%s): exit with status 0 when shutdown arrives", r.a.ShutdownGrace, s.name()))
			return
		}
	}
	if !waitCtx(context.Background(), s.p.done, time.Until(t0.Add(r.a.ShutdownGrace))) {
		s.broken = true
		s.p.kill()
		r.failFirst(checkShutdown, fmt.Sprintf("closed stdout but was still running %s after shutdown (%s)", r.a.ShutdownGrace, s.name()))
		return
	}
	took := time.Since(t0)
	code, desc := s.p.exitStatus()
	if s.p.endNote != "" {
		r.fail(checkFraming, s.p.endNote)
	}
	if code != 0 {
		r.fail(checkShutdown, fmt.Sprintf("%s after shutdown (%s): exit with status 0%s", desc, s.name(), s.p.stderr.tail()))
		return
	}
	r.mu.Lock()
	r.shutdowns++
	r.shutdownMax = max(r.shutdownMax, took)
	r.mu.Unlock()
}

// finish ends a check's conversation: the next check's may send its items while this one's
// process is shut down.
func (s *session) finish() {
	s.r.endTurn(s.owner)
	s.shutdown()
}

// name names the conversation in a report.
func (s *session) name() string {
	switch s.owner {
	case checkReady, checkAnswers:
		return "the main conversation"
	case fixtureOwner:
		return "the fixture's conversation"
	}
	return "the " + s.owner + " conversation"
}

// observe charges the framing and stdout faults seen on a line. A line the engine cannot read
// ends the conversation, as the engine kills the process on it: what it may have answered is
// lost, so the checks waiting on it are skipped rather than failed for a missing answer.
func (s *session) observe(ev event) {
	r := s.r
	switch ev.kind {
	case evText:
		r.fail(checkStdout, fmt.Sprintf("a line that is not a protocol message: %s; stdout carries protocol lines only, write logs to stderr", quote(ev.raw)))
	case evBad:
		detail := ev.note
		if !ev.shown {
			detail += "; the line: " + quote(firstLine(ev.raw))
		}
		hint := ev.hint
		if hint == "" {
			hint = "write each message with a JSON encoder, one object per line"
		}
		check, detail := checkFraming, detail+"; the engine stops the process on such a line: "+hint
		if ev.badUTF8 && s.carriesText() {
			check = checkNonASCII
			detail = fmt.Sprintf("non-ASCII text came back broken: a line that is not valid UTF-8: %s; decode stdin as UTF-8 and encode stdout as UTF-8 (Perl: use open qw(:std :encoding(UTF-8))), and never cut text inside a character", quote(firstLine(ev.raw)))
		}
		r.fail(check, detail)
		s.stop(check)
	case evMessage:
		if ev.note != "" {
			r.fail(checkFraming, ev.note+"; it starts "+quote(firstLine(ev.raw)))
		}
	case evEnvelope:
		if !s.batch {
			r.fail(checkFraming, fmt.Sprintf("a batch envelope from an action that did not declare \"batch\": true in ready: %s; declare it in ready ({\"type\":\"ready\",\"window\":64,\"batch\":true}) or write each message on its own line", quote(ev.raw)))
			s.stop(checkFraming)
			return
		}
		r.add(&r.envelopes, 1)
	}
}

// carriesText reports whether the conversation sent non-ASCII text the action may be echoing.
func (s *session) carriesText() bool {
	if s.owner == checkNonASCII {
		return true
	}
	for _, d := range s.inflight {
		if d.text {
			return true
		}
	}
	return false
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// handle classifies one event of stdout.
func (s *session) handle(ev event) {
	r := s.r
	s.observe(ev)
	if ev.kind != evMessage {
		return
	}
	m := ev.msg
	r.add(&r.messages, 1)
	switch m.Type {
	case stdio.TypeReady:
		r.fail(checkSilence, "a second ready, after the first: say ready once, after hello")
		return
	case stdio.TypeHello, stdio.TypeItem, stdio.TypeShutdown, stdio.TypeCancel:
		r.fail(checkFraming, fmt.Sprintf("a %q message, which only the engine sends: an action sends ready, emit, metric, state, done, error or abstain", m.Type))
		return
	}
	if m.Type == stdio.TypeState {
		s.stateMessage(&m, ev.raw)
	}
	terminal := m.Type == stdio.TypeDone || m.Type == stdio.TypeError || m.Type == stdio.TypeAbstain
	if m.Delivery == "" {
		if terminal {
			r.fail(checkAnswers, fmt.Sprintf("a %s without \"delivery\": %s; every answer names the delivery it answers, as received", m.Type, quote(ev.raw)))
		} else {
			r.fail(checkSilence, fmt.Sprintf("a %s that belongs to no delivery: %s; write only for the delivery in flight", m.Type, quote(ev.raw)))
		}
		return
	}
	if d, ok := s.inflight[m.Delivery]; ok {
		s.noteInterleave(m.Delivery, terminal)
		if !terminal {
			switch m.Type {
			case stdio.TypeEmit:
				d.emits = append(d.emits, m)
			case stdio.TypeState:
				d.states = append(d.states, m)
			default:
				d.metrics++
			}
			return
		}
		d.answer = &m
		d.latency = ev.at.Sub(d.written)
		delete(s.inflight, m.Delivery)
		s.answered[m.Delivery] = d
		s.order = append(s.order, d)
		r.answered(d)
		return
	}
	if d, ok := s.answered[m.Delivery]; ok {
		switch {
		case terminal:
			r.fail(checkAnswers, fmt.Sprintf("delivery %s answered twice (%s, then %s): answer each delivery exactly once", m.Delivery, d.answer.Type, m.Type))
		case m.Type == stdio.TypeState:
			r.fail(checkState, fmt.Sprintf("a state for delivery %s after it was answered %s: write the state message before the answer (the engine refuses it after)", m.Delivery, d.answer.Type))
		default:
			r.fail(checkSilence, fmt.Sprintf("a %s for delivery %s after it was answered %s: write everything of a delivery before its answer", m.Type, m.Delivery, d.answer.Type))
		}
		return
	}
	check := checkAnswers
	if m.Type == stdio.TypeState {
		check = checkState // the state row: a state names a delivery in flight
	}
	r.fail(check, fmt.Sprintf("a %s for delivery %q, which was never given: copy \"delivery\" from the item", m.Type, m.Delivery))
}

// splice inserts extra (",\"k\":v…") before the closing brace of a protocol line.
func splice(line []byte, extra string) []byte {
	n := len(line) - 2 // "}\n"
	out := make([]byte, 0, len(line)+len(extra))
	out = append(out, line[:n]...)
	out = append(out, extra...)
	return append(out, line[n:]...)
}

func appendItem(dst []byte, it *stdio.Item) []byte {
	m := stdio.Message{
		Type: stdio.TypeItem, Delivery: it.Delivery, ID: it.ID, Run: it.Run, Key: it.Key,
		KeyBase64: it.KeyBase64, Payload: it.Payload, Headers: it.Headers, Inlet: it.Inlet,
		Topic: it.Topic, Partition: it.Partition, Offset: it.Offset, Timestamp: it.Timestamp,
		Attempt: it.Attempt, IdempotencyKey: it.IdempotencyKey, State: it.State,
	}
	return stdio.AppendMessage(dst, &m)
}
