package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// runner is one conformance run: it drives the conversations one after another and collects
// what each check saw. It runs on one goroutine.
type runner struct {
	ctx     context.Context
	a       *Action
	opts    Options
	workdir string
	inputs  []Input
	fatal   error
	wait    time.Duration   // the answer wait of a conformance run; 0: the item timeout
	printed map[string]bool // the checks whose line the progress writer has

	procs   []*proc
	start   time.Time
	fails   map[string][]string
	pass    map[string]string        // the detail of a check that passed
	elapsed map[string]time.Duration // the time of a check's own conversation
	notRun  string                   // why the conversations after the main one did not run

	readyTimes  []time.Duration
	shutdowns   int
	shutdownMax time.Duration
	messages    int
	quiets      int
	outputs     int
	several     int            // deliveries with several outputs to one outlet
	main        map[int]string // outcome of each input in the main conversation
	mainCounts  map[string]int
	mainItems   int           // answered in the main conversation
	mainLatency time.Duration // their answer times, summed
}

func newRunner(ctx context.Context, a *Action, opts Options, workdir string, inputs []Input) *runner {
	return &runner{
		ctx: ctx, a: a, opts: opts, workdir: workdir, inputs: inputs, start: time.Now(),
		fails: map[string][]string{}, pass: map[string]string{}, elapsed: map[string]time.Duration{},
		main: map[int]string{}, mainCounts: map[string]int{}, printed: map[string]bool{},
	}
}

// fail charges check with a fault; the first one is its verdict, written at once when the
// run streams its progress.
func (r *runner) fail(check, detail string) {
	r.fails[check] = append(r.fails[check], detail)
	if r.opts.Progress != nil && !r.printed[check] && isCheck(check) {
		r.printed[check] = true
		c := Check{Name: check, Detail: detail, Elapsed: time.Since(r.start)}
		if d, ok := r.elapsed[check]; ok {
			c.Elapsed = d
		}
		_ = writeCheck(r.opts.Progress, c)
	}
}

func isCheck(name string) bool {
	for _, c := range Checks {
		if c.Name == name {
			return true
		}
	}
	return false
}

// observeNotes charges framing and stdout faults seen on a line.
func (r *runner) observeNotes(ev event) {
	switch ev.kind {
	case evText:
		r.fail(CheckStdout, fmt.Sprintf("a line that is not a protocol message: %s; stdout carries protocol lines only, write logs to stderr", quote(ev.raw)))
	case evBad:
		r.fail(CheckFraming, ev.note+"; the line: "+quote(firstLine(ev.raw)))
	case evMessage:
		if ev.note != "" {
			r.fail(CheckFraming, ev.note+"; it starts "+quote(firstLine(ev.raw)))
		}
	}
}

// answered checks the outputs of an answered delivery.
func (r *runner) answered(d *delivery) {
	if d.answer.Type != stdio.TypeDone {
		return
	}
	r.outputs += len(d.emits)
	byOutlet := map[string][]stdio.Message{}
	for _, e := range d.emits {
		outlet := e.Outlet
		switch {
		case len(r.a.Outlets) == 0:
			r.fail(CheckOutputs, fmt.Sprintf("delivery %s emitted, but the action declares no outlet: declare one with --out PORT=SCHEMA", d.item.Delivery))
			return
		case outlet == "" && len(r.a.Outlets) > 1:
			r.fail(CheckOutputs, fmt.Sprintf("delivery %s emitted without \"outlet\", but the action has %d outlets (%s): name one", d.item.Delivery, len(r.a.Outlets), strings.Join(r.a.outlets(), ", ")))
			return
		case outlet == "":
			outlet = r.a.Outlets[0].Name
		case !slices.Contains(r.a.outlets(), outlet):
			r.fail(CheckOutputs, fmt.Sprintf("delivery %s emitted to outlet %q, which is not declared: use one of %s, or declare it with --out", d.item.Delivery, outlet, strings.Join(r.a.outlets(), ", ")))
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
				r.fail(CheckOutputs, fmt.Sprintf("delivery %s emitted %d outputs to %q, one without a key: key each of several outputs distinctly", d.item.Delivery, len(es), outlet))
				return
			}
			if seen[k] {
				r.fail(CheckOutputs, fmt.Sprintf("delivery %s emitted %d outputs to %q, two with the key %q: key each of several outputs distinctly", d.item.Delivery, len(es), outlet, k))
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

// run drives every conversation.
func (r *runner) run() error {
	defer func() {
		for _, p := range r.procs {
			p.kill()
		}
	}()
	r.mainConversation()
	if r.fatal != nil {
		return r.fatal
	}
	r.finished(CheckAnswers)
	if r.notRun == "" {
		steps := []struct {
			check string
			run   func()
		}{{CheckUnknownKeys, r.unknownKeys}, {CheckConfig, r.badConfig}, {CheckNonASCII, r.nonASCII}, {CheckLarge, r.large}, {CheckBurst, r.burst}}
		for _, step := range steps {
			step.run()
			if r.fatal != nil {
				return r.fatal
			}
			r.finished(step.check)
		}
	}
	return r.ctx.Err()
}

// mainConversation: hello, every input one at a time with quiet waits, shutdown.
func (r *runner) mainConversation() {
	t0 := time.Now()
	s := r.open(CheckReady, r.a.Config, "")
	if s.broken {
		r.notRun = "the action never answered ready to a plain hello (see ready)"
		return
	}
	r.elapsed[CheckReady] = s.readyIn
	s.owner = CheckAnswers
	s.quiet(2 * r.opts.Quiet)
	r.quiets++
	for i, in := range r.inputs {
		d := s.deliver(i, in.Item, CheckAnswers)
		if d == nil || d.answer == nil {
			break
		}
		r.main[i] = d.outcome()
		r.mainCounts[d.outcome()]++
		r.mainItems++
		r.mainLatency += d.latency
		if i < 10 {
			s.quiet(r.opts.Quiet)
			r.quiets++
		}
	}
	s.quiet(4 * r.opts.Quiet)
	r.quiets++
	s.shutdown()
	r.elapsed[CheckAnswers] = time.Since(t0)
	r.pass[CheckAnswers] = fmt.Sprintf("%d items answered exactly once (%s)", len(r.main), counts(r.mainCounts))
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
