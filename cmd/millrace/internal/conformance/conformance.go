// Package conformance checks a program against the Millstream action protocol, whatever it
// computes, and runs its fixture tests: the engine of `millrace test action`.
//
// [Run] starts the action several times, each process in a conversation built to show one
// rule (unknown keys, a malformed config, non-ASCII text, a 1 MiB payload, a burst), watches
// every line it writes, and returns one [Check] per rule. A fault is charged to the one check
// whose rule it breaks: a crash in the conversation with unknown keys fails "unknown-keys", not
// "answers"; a pretty-printed answer fails "framing" and is still read, so the rest can be
// checked.
//
// [RunFixtures] feeds fixtures/NAME.in.jsonl to the action and compares each answer with
// NAME.out.jsonl (JSON compared by value), or rewrites the golden files.
//
// The package needs only the action protocol (package stdio) and the action config of package
// bridge (one type and one table of defaults for every tool): no Kafka, no gRPC. The caller
// reads the action's config line and gives an [Action].
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// Sentinel errors of Run, RunFixtures and LoadFixtures. A person reads them after
// "millrace test:", so they carry no package prefix.
var (
	// errAction is returned by Run and RunFixtures for an Action they cannot run at all (no
	// command, a command that cannot start).
	errAction = errors.New("the action cannot run")
	// errFixture is returned by LoadFixtures and RunFixtures for a fixture file that cannot be
	// read: a line that is not a JSON object, a golden line of an unknown shape.
	errFixture = errors.New("a bad fixture")
)

// Defaults applied to zero Options fields and to what only the kit has (ShutdownGrace); the
// action's own defaults are the config line's (actionconf.Action, one table for every tool).
const (
	defaultShutdownGrace = engine.DefaultShutdownGrace // the bridge's processes get the same
	defaultBurst         = 32
	minBurst             = 8
	defaultPayloadSize   = 1 << 20
	// maxInputs is how many fixture items the conformance conversations use at most.
	maxInputs = 20
)

// Action is the program under test: its parsed config line (command, folder, ports, the
// --per-item, --ready-timeout and --timeout flags, a zero Timeout meaning none as in the
// bridge), and what only a test run has.
type Action struct {
	actionconf.Action

	Version       string          // sent in hello
	Env           []string        // extra environment, "K=V"
	Config        json.RawMessage // hello's config: every declared parameter resolved ({} when none)
	ShutdownGrace time.Duration   // shutdown → exit (default the engine's, 5s)
	// State holds the inlets whose items keep state per key, with their limits. nil: the
	// line's --state (Action.StateLimits), so `millrace test` runs a stateful line's fixtures
	// as the bridge would; a caller may set its own instead.
	State map[string]engine.StateLimits
}

func (a *Action) defaults() {
	if a.ShutdownGrace <= 0 {
		a.ShutdownGrace = defaultShutdownGrace
	}
	if len(a.Config) == 0 {
		a.Config = json.RawMessage("{}")
	}
	if a.Name == "" {
		a.Name = "action"
	}
	if a.State == nil {
		a.State = a.Action.StateLimits()
	}
}

func (a *Action) inlet() string {
	if len(a.Inlets) > 0 {
		return a.Inlets[0].Name
	}
	return "in"
}

// outlets are the names of the declared outlets, in order.
func (a *Action) outlets() []string {
	names := make([]string, len(a.Outlets))
	for i, p := range a.Outlets {
		names[i] = p.Name
	}
	return names
}

// idempotencyKey is the bridge's key of the record the item stands for, in the pipeline the
// kit's hello names (fixtureTopic).
func (a *Action) idempotencyKey(it *stdio.Item) string {
	return actionconf.IdempotencyKey(fixtureTopic, a.Name, it.Topic, it.Partition, it.Offset)
}

// itemTimer is the item timeout of a session: d, or none when d is 0 (the config line's
// --timeout 0s, as in the bridge).
type itemTimer struct {
	d time.Duration
	t *time.Timer
}

func newItemTimer(d time.Duration) *itemTimer {
	it := &itemTimer{d: d}
	if d > 0 {
		it.t = time.NewTimer(d)
	}
	return it
}

// C fires when the timeout passes; it never fires when there is none.
func (it *itemTimer) C() <-chan time.Time {
	if it.t == nil {
		return nil
	}
	return it.t.C
}

// Reset starts the timeout again.
func (it *itemTimer) Reset() {
	if it.t != nil {
		it.t.Reset(it.d)
	}
}

// Stop releases the timer.
func (it *itemTimer) Stop() {
	if it.t != nil {
		it.t.Stop()
	}
}

// vars are hello's variables, shaped as the bridge sends them: pipeline, streamlet,
// conversation, and the inlet and outlet bindings (port → topic).
func (a *Action) vars() map[string]any {
	inlets, outlets := map[string]string{}, map[string]string{}
	for _, p := range a.Inlets {
		inlets[p.Name] = fixtureTopic
	}
	for _, p := range a.Outlets {
		outlets[p.Name] = fixtureTopic + "." + p.Name
	}
	return map[string]any{"pipeline": fixtureTopic, "streamlet": a.Name, "conversation": fixtureTopic, "inlets": inlets, "outlets": outlets}
}

// Options tune a conformance run; the zero value is the documented behaviour.
type Options struct {
	// Inputs are the items the conversations send (at most maxInputs are used). Nil: the
	// items of Dir/fixtures/*.in.jsonl, or three generic items when there are none.
	Inputs []Input
	// Burst is the number of items written at once in the burst check. Zero: 32, fewer (down
	// to minBurst) for a slow action, so that the burst takes about two seconds at the pace
	// of the main conversation.
	Burst int
	// PayloadSize is the size of the large payload (default 1 MiB).
	PayloadSize int
	// StderrLineMax is the longest stderr line accepted (default stdio.MaxLineBytes).
	StderrLineMax int
	// Quiet is how long the main conversation listens for stray lines after ready and after
	// each answer (default 50ms; 4× before shutdown).
	Quiet time.Duration
	// AnswerWait bounds how long the kit waits for an answer, and for ready past the ready
	// timeout, before it charges the check (default defaultAnswerWait; the action's item
	// timeout when that is shorter), so a missing answer is known in seconds, not after the
	// whole item timeout.
	AnswerWait time.Duration
	// Progress, when set, gets each check's line as the check completes (a failure as soon as
	// it is seen), and a note of what the kit is waiting for while the action is silent. The
	// lines are those of Report.WriteText, without the verdict (Report.WriteVerdict).
	Progress io.Writer
}

// Input is one item a test sends, and where it came from ("fixtures/basic.in.jsonl:3").
type Input struct {
	Item   stdio.Item
	Source string

	stateSet bool // the fixture line gives "state", which Item.State holds (nil: null, none)
}

// The checks, in the order they are reported.
const (
	checkReady       = "ready"
	checkFraming     = "framing"
	checkStdout      = "stdout"
	checkAnswers     = "answers"
	checkUnknownKeys = "unknown-keys"
	checkOutputs     = "outputs"
	checkSilence     = "silence"
	checkConfig      = "config"
	checkNonASCII    = "non-ascii"
	checkLarge       = "large-payload"
	checkBurst       = "burst"
	checkBatch       = "batch"
	checkConcurrent  = "concurrent"
	checkCancel      = "cancel"
	checkState       = "state"
	checkStderr      = "stderr"
	checkShutdown    = "shutdown"
)

// checkList lists every check name, in report order, with the rule it holds the action to.
var checkList = []struct{ Name, Rule string }{
	{checkReady, "answers hello with ready within the ready timeout"},
	{checkFraming, "every stdout line is one JSON object of a known type, UTF-8, newline-terminated, at most 8 MiB"},
	{checkStdout, "nothing but protocol lines on stdout (logs go to stderr)"},
	{checkAnswers, "every item answered exactly once (done, error or abstain), naming its delivery"},
	{checkUnknownKeys, "keys it does not know in hello and in items are ignored: same answers, no crash"},
	{checkOutputs, "every emit names a declared outlet (or the only one); several from one delivery to one outlet are keyed distinctly"},
	{checkSilence, "nothing is written between deliveries, nor for a delivery once answered"},
	{checkConfig, "a malformed config is answered item by item (error), not by a crash"},
	{checkNonASCII, "non-ASCII text in keys, headers and payloads round-trips unchanged"},
	{checkLarge, "a 1 MiB payload is read and answered"},
	{checkBurst, "items written at once are all answered, in order (in any order, declaring \"concurrent\": true in ready)"},
	{checkBatch, "declaring \"batch\": true in ready, items in envelopes, on lines of their own and in an envelope at the 8 MiB line limit are all answered"},
	{checkConcurrent, "declaring \"concurrent\": true in ready, items of distinct keys written at once are each answered once, in any order, each delivery's messages its own item's"},
	{checkCancel, "declaring \"cancel\": true in ready, a cancelled item gets a final answer within the 5 s cancel grace, a cancel for a delivery never given is ignored, and later items are still answered"},
	{checkState, "declaring \"state\": true in ready, items with a state of every JSON type and with none are answered; each state message names a delivery in flight, carries \"state\" and comes before its answer; a key fed its own state three times is answered; no state for a keyless item nor over the limit hello names"},
	{checkStderr, "stderr is read as it comes, so logging never blocks; log lines end with a newline"},
	{checkShutdown, "exits with status 0 on shutdown, within the grace period"},
}

// Check is the verdict of one check. A check that could not be judged because another failed
// (its conversation was ended by that fault, or the action never became ready) has Ran false,
// does not pass, and its Detail names the check that failed ("framing failed").
type Check struct {
	Name    string        `json:"name"`
	Pass    bool          `json:"pass"`
	Ran     bool          `json:"ran"`
	Detail  string        `json:"detail"`
	Elapsed time.Duration `json:"elapsedNs"`
}

// Report is the result of a conformance run.
type Report struct {
	Action     string  `json:"action"`
	Conformant bool    `json:"conformant"`
	Checks     []Check `json:"checks"`
}

// Failed returns the names of the checks that ran and failed.
func (r *Report) Failed() []string {
	var names []string
	for _, c := range r.Checks {
		if c.Ran && !c.Pass {
			names = append(names, c.Name)
		}
	}
	return names
}

// NotRun returns the names of the checks that could not be judged (skipped).
func (r *Report) NotRun() []string {
	var names []string
	for _, c := range r.Checks {
		if !c.Ran {
			names = append(names, c.Name)
		}
	}
	return names
}

// WriteText writes the report as `millrace test action --conformance` prints it: one line
// per check, "PASS name: detail (time)", "FAIL …" or "SKIP name: framing failed", then the
// verdict (WriteVerdict).
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		_ = writeCheck(&b, c)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return r.WriteVerdict(w)
}

// WriteVerdict writes the last line of the report: "<action>: conformant", or not, with the
// checks that failed and those that could not run.
func (r *Report) WriteVerdict(w io.Writer) error {
	var b strings.Builder
	if r.Conformant {
		fmt.Fprintf(&b, "%s: conformant\n", r.Action)
	} else {
		notRun := ""
		if n := r.NotRun(); len(n) > 0 {
			notRun = fmt.Sprintf("; %d skipped: %s", len(n), strings.Join(n, ", "))
		}
		fmt.Fprintf(&b, "%s: not conformant (%d of %d checks failed: %s%s)\n", r.Action, len(r.Failed()), len(r.Checks), strings.Join(r.Failed(), ", "), notRun)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// Run checks a against the action protocol and returns the report; the action is conformant
// when every check passes. It returns an error only when it cannot run the action at all
// (wrapping errAction), cannot read its fixtures (errFixture), or ctx ends.
func Run(ctx context.Context, a Action, opts Options) (*Report, error) {
	a.defaults()
	if len(a.Command) == 0 {
		return nil, fmt.Errorf("%w: action %q has no command: end its config line with -- and the program", errAction, a.Name)
	}
	if opts.PayloadSize <= 0 {
		opts.PayloadSize = defaultPayloadSize
	}
	if opts.StderrLineMax <= 0 {
		opts.StderrLineMax = stdio.MaxLineBytes
	}
	if opts.Quiet <= 0 {
		opts.Quiet = 50 * time.Millisecond
	}
	if opts.AnswerWait <= 0 {
		opts.AnswerWait = defaultAnswerWait
	}
	inputs := opts.Inputs
	if inputs == nil {
		fx, err := LoadFixtures(a.Dir)
		if err != nil {
			return nil, err
		}
		for _, f := range fx {
			inputs = append(inputs, f.Inputs(&a)...)
		}
		if len(inputs) == 0 {
			inputs = genericInputs(&a)
		}
	}
	if len(inputs) > maxInputs {
		inputs = inputs[:maxInputs]
	}
	workdir, err := os.MkdirTemp("", "millrace-conformance-")
	if err != nil {
		return nil, fmt.Errorf("a work folder for the test: %w", err)
	}
	defer engine.TrackDir(workdir)() // removed by engine.Teardown should the program quit at once
	defer os.RemoveAll(workdir)
	r := newRunner(ctx, &a, opts, workdir, inputs)
	r.wait = opts.AnswerWait
	if err := r.run(); err != nil {
		return nil, err
	}
	return r.report(), nil
}

// genericInputs are the items used when the action has no fixtures.
func genericInputs(a *Action) []Input {
	k1, k2 := "k1", "k2"
	items := []struct {
		key     *string
		payload string
	}{
		{&k1, `{"id":1,"text":"hello"}`},
		{&k2, `{"id":2,"text":"world","n":2.5}`},
		{nil, `{}`},
	}
	var in []Input
	for i, it := range items {
		item := fillItem(a, stdio.Item{Key: it.key, Payload: json.RawMessage(it.payload)}, int64(i), "generic")
		in = append(in, Input{Item: item, Source: fmt.Sprintf("generic item %d", i+1)})
	}
	return in
}
