package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// runner is one conformance run: it drives the conversations, each on its own goroutine: they
// start together, so a slow ready is waited for once, send their items one after another (see
// turns), and shut down while the next goes on, so an ignored shutdown costs about one grace
// period, not one per conversation. It collects what each check saw. mu guards what the
// conversations share; the main conversation's results (main, mainCounts, …, blocked) are
// written before mainDone is closed and only read after.
type runner struct {
	ctx      context.Context
	a        *Action
	opts     Options
	workdir  string
	inputs   []Input
	wait     time.Duration // the answer wait of a conformance run; 0: the item timeout
	start    time.Time
	mainDone chan struct{} // closed once the main conversation's answers are known
	// turns[c] is closed once check c's conversation has sent its items and had its answers:
	// the checks' conversations take their turns one after another, in order (only their
	// start and their shutdown overlap), so none competes with another for a slow action's CPU
	turns    map[string]chan struct{}
	previous map[string]string // the check whose turn comes before each one's
	// missed: the main conversation's first item was never answered, so every other
	// conversation sends that item's payload (exemplar) too; they then wait missedWait for an
	// answer, and one that does not come is that fault again (SKIP …: answers failed).
	missed bool
	// blocked is the check whose fault ended the main conversation so that no other can be
	// judged (ready: no ready to a plain hello; framing: a line the engine cannot read)
	blocked string

	mu      sync.Mutex
	fatal   error
	printed map[string]bool // the checks whose line the progress writer has
	done    map[string]bool // the checks that completed
	noted   map[string]bool // the kinds of progress note written (one of each is enough)
	procs   []*proc
	fails   map[string][]string
	skip    map[string]string        // check → the failed check that kept it from being judged
	pass    map[string]string        // the detail of a check that passed
	elapsed map[string]time.Duration // the time of a check's own conversation

	readyTimes  []time.Duration
	shutdowns   int
	shutdownMax time.Duration
	messages    int
	quiets      int
	answers     int // deliveries answered, in every conversation
	envelopes   int // batch envelopes the action wrote
	outputs     int
	several     int // deliveries with several outputs to one outlet

	main        map[int]string // outcome of each input in the main conversation
	mainCounts  map[string]int
	mainState   bool          // the main conversation's ready declared "state": true
	mainItems   int           // answered in the main conversation
	mainLatency time.Duration // their answer times, summed
}

func newRunner(ctx context.Context, a *Action, opts Options, workdir string, inputs []Input) *runner {
	return &runner{
		ctx: ctx, a: a, opts: opts, workdir: workdir, inputs: inputs, start: time.Now(),
		mainDone: make(chan struct{}), turns: map[string]chan struct{}{}, previous: map[string]string{},
		fails: map[string][]string{}, pass: map[string]string{}, elapsed: map[string]time.Duration{},
		skip: map[string]string{}, main: map[int]string{}, mainCounts: map[string]int{},
		printed: map[string]bool{}, done: map[string]bool{}, noted: map[string]bool{},
	}
}

// fail charges check with a fault; the first one is its verdict, written at once when the
// run streams its progress. It is safe for concurrent use, as are the runner's other methods
// that the conversations call.
func (r *runner) fail(check, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(check, detail)
}

// failFirst charges check unless it already failed: for a fault every conversation meets
// alike (a late ready, an ignored shutdown), where one line says it all.
func (r *runner) failFirst(check, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails[check]) == 0 {
		r.failLocked(check, detail)
	}
}

func (r *runner) failLocked(check, detail string) {
	r.fails[check] = append(r.fails[check], detail)
	if r.opts.Progress != nil && !r.printed[check] && isCheck(check) {
		r.printed[check] = true
		c := Check{Name: check, Ran: true, Detail: detail, Elapsed: time.Since(r.start)}
		if d, ok := r.elapsed[check]; ok {
			c.Elapsed = d
		}
		_ = writeCheck(r.opts.Progress, c)
	}
}

func isCheck(name string) bool {
	for _, c := range checkList {
		if c.Name == name {
			return true
		}
	}
	return false
}

// missedWait is how long a conversation waits for an answer once the main conversation went
// without one (Options.AnswerWait, 10 s): an action that answers answers within milliseconds,
// so the kit names a never-answered item in about AnswerWait plus a second a check.
const missedWait = time.Second

// setMissedAnswer records, from the main conversation, that its item went unanswered; it
// counts only when no item was answered before it (r.main, written by that conversation).
func (r *runner) setMissedAnswer() {
	r.mu.Lock()
	r.missed = len(r.main) == 0
	r.mu.Unlock()
}

func (r *runner) missedAnswer() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.missed
}

// skipFor records that check could not be judged because cause failed, unless it has a
// cause already.
func (r *runner) skipFor(check, cause string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.skip[check]; !ok && check != cause {
		r.skip[check] = cause
	}
}

// passed records the verdict of a check that ran its conversation to the end: detail, should
// nothing have charged it, and the time its conversation took.
func (r *runner) passed(check, detail string, elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pass[check] = detail
	r.elapsed[check] = elapsed
}

// took records the time of check's conversation unless passed did.
func (r *runner) took(check string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.elapsed[check]; !ok {
		r.elapsed[check] = d
	}
}

// setFatal records an error that ends the whole run (the action cannot start).
func (r *runner) setFatal(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal == nil {
		r.fatal = err
	}
}

func (r *runner) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// add counts n into one of the runner's shared counters.
func (r *runner) add(counter *int, n int) {
	r.mu.Lock()
	*counter += n
	r.mu.Unlock()
}

// answered checks the outputs of an answered delivery.
func (r *runner) answered(d *delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers++
	if d.answer.Type != stdio.TypeDone {
		return
	}
	r.outputs += len(d.emits)
	byOutlet := map[string][]stdio.Message{}
	for _, e := range d.emits {
		outlet := e.Outlet
		switch {
		case len(r.a.Outlets) == 0:
			r.failLocked(checkOutputs, fmt.Sprintf("delivery %s emitted, but the action declares no outlet: declare one with --out PORT=SCHEMA", d.item.Delivery))
			return
		case outlet == "":
			// as the bridge reads it: the one outlet that is neither --dead-letter nor --fallback
			name, n, ok := r.a.DefaultOutlet()
			if !ok {
				r.failLocked(checkOutputs, fmt.Sprintf("delivery %s emitted without \"outlet\", but the action has %d outlets besides --dead-letter and --fallback (%s): name one", d.item.Delivery, n, strings.Join(r.a.outlets(), ", ")))
				return
			}
			outlet = name
		case !slices.Contains(r.a.outlets(), outlet):
			r.failLocked(checkOutputs, fmt.Sprintf("delivery %s emitted to outlet %q, which is not declared: use one of %s, or declare it with --out", d.item.Delivery, outlet, strings.Join(r.a.outlets(), ", ")))
			return
		}
		byOutlet[outlet] = append(byOutlet[outlet], e)
	}
	for outlet, es := range byOutlet {
		if len(es) < 2 {
			continue
		}
		r.several++
		seen := map[string]bool{}
		for _, e := range es {
			k, ok := emitKey(&e)
			if !ok {
				r.failLocked(checkOutputs, fmt.Sprintf("delivery %s emitted %d outputs to %q, one without a key: key each of several outputs distinctly", d.item.Delivery, len(es), outlet))
				return
			}
			if seen[k] {
				r.failLocked(checkOutputs, fmt.Sprintf("delivery %s emitted %d outputs to %q, two with the key %q: key each of several outputs distinctly", d.item.Delivery, len(es), outlet, k))
				return
			}
			seen[k] = true
		}
	}
}

func emitKey(e *stdio.Message) (string, bool) {
	switch {
	case e.Key != nil:
		return *e.Key, true
	case e.KeyBase64 != "":
		return "base64:" + e.KeyBase64, true
	}
	return "", false
}

// run drives every conversation: the main one and, beside it, each check's own, which opens
// its process at once (so a slow ready is waited for once) and sends its items when the main
// conversation's answers are known and the check before it is done with its own.
func (r *runner) run() error {
	defer func() {
		for _, p := range r.procs {
			p.kill()
		}
	}()
	steps := []struct {
		check string
		run   func()
	}{{checkUnknownKeys, r.unknownKeys}, {checkConfig, r.badConfig}, {checkNonASCII, r.nonASCII}, {checkLarge, r.large}, {checkBurst, r.burst}, {checkBatch, r.batchCheck}, {checkConcurrent, r.concurrentCheck}, {checkCancel, r.cancelCheck}, {checkState, r.stateCheck}}
	prev := checkAnswers
	for _, step := range steps {
		r.turns[step.check], r.previous[step.check] = make(chan struct{}), prev
		prev = step.check
	}
	var wg sync.WaitGroup
	for _, step := range steps {
		wg.Go(func() {
			t0 := time.Now()
			step.run()
			r.endTurn(step.check) // on every way out
			r.took(step.check, time.Since(t0))
			r.finished(step.check)
		})
	}
	t0 := time.Now()
	r.mainConversation()
	r.took(checkAnswers, time.Since(t0))
	r.finished(checkAnswers)
	wg.Wait()
	if err := r.fatalErr(); err != nil {
		return err
	}
	return r.ctx.Err()
}

// mainConversation: hello, every input one at a time with quiet waits, shutdown. The others
// go on once its answers are known, before its shutdown.
func (r *runner) mainConversation() {
	t0 := time.Now()
	s := r.open(checkReady, r.a.Config, "")
	if s.broken {
		r.took(checkReady, time.Since(t0))
		r.blocked = checkReady
		if s.cause != "" && s.cause != checkReady {
			r.blocked = s.cause // it could not even be started and read
		}
		close(r.mainDone)
		return
	}
	r.mu.Lock()
	r.elapsed[checkReady] = s.readyIn
	r.mu.Unlock()
	s.owner = checkAnswers
	s.quiet(2 * r.opts.Quiet)
	r.add(&r.quiets, 1)
	for i, in := range r.inputs {
		d := s.deliver(i, in.Item, checkAnswers)
		if d == nil || d.answer == nil {
			break
		}
		r.main[i] = d.outcome()
		r.mainCounts[d.outcome()]++
		r.mainItems++
		r.mainLatency += d.latency
		if i < 10 {
			s.quiet(r.opts.Quiet)
			r.add(&r.quiets, 1)
		}
	}
	s.quiet(4 * r.opts.Quiet)
	r.add(&r.quiets, 1)
	if s.cause == checkFraming {
		r.blocked = checkFraming // every conversation would end on the same unreadable line
	}
	r.mainState = s.state
	close(r.mainDone)
	s.shutdown()
	r.passed(checkAnswers, fmt.Sprintf("%s answered exactly once (%s)", plural(len(r.main), "item", "items"), counts(r.mainCounts)), time.Since(t0))
}

// awaitMain waits for the main conversation's answers; it returns false, recording why, when
// check cannot be judged: the main conversation never got going, or none of its items was
// answered and the check compares with them (compare).
func (r *runner) awaitMain(check string, s *session, compare bool) bool {
	r.mu.Lock()
	prev := r.turns[r.previous[check]] // nil once closed
	r.mu.Unlock()
	for _, ch := range []chan struct{}{r.mainDone, prev} {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-r.ctx.Done():
			return false
		}
	}
	cause := r.blocked
	if cause == "" && compare && len(r.main) == 0 {
		cause = checkAnswers
		if c, ok := r.skipOf(checkAnswers); ok {
			cause = c
		}
	}
	if cause == "" {
		return true
	}
	r.skipFor(check, cause)
	if s != nil {
		s.finish() // its process got hello: shutdown can still be judged
	}
	return false
}

// endTurn lets the next check's conversation send its items. It may be called more than once.
func (r *runner) endTurn(check string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.turns[check]; ok {
		close(ch)
		delete(r.turns, check) // so a second call closes nothing; the next waits on its copy
	}
}

func (r *runner) skipOf(check string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.skip[check]
	return c, ok
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range []string{"done", "error", "abstain"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// answeredInputs are the inputs the main conversation got an answer for, in order.
func (r *runner) answeredInputs() []int {
	var idx []int
	for i := range r.inputs {
		if _, ok := r.main[i]; ok {
			idx = append(idx, i)
		}
	}
	return idx
}
