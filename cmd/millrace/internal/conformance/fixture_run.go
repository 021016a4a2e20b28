package conformance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// FixtureOptions tune RunFixtures.
type FixtureOptions struct {
	// Update rewrites every NAME.out.jsonl with the answers the action gave, instead of
	// comparing, each error's message and abstain's reason with it.
	Update bool
	// RoundTrip, when set, passes the payloads and keys of registry-encoded ports (--decode,
	// --encode) through their encoding and back, as production does around the program: each
	// item's payload and key on its inlet before the program sees it, each emit's on its
	// outlet before it is compared. key says data is a key (its JSON text, as "key" carries
	// an encoded key), else a payload. It returns the JSON after the round trip, or the port's
	// error: an input that does not fit fails its fixture file, naming the line; an emit that
	// does not fit makes the item's answer the non-retryable error production gives it. Plain
	// ports (and plain keys) are left alone: it returns data as it is. Fixtures stay JSON
	// either way.
	RoundTrip func(ctx context.Context, port string, inlet, key bool, data json.RawMessage) (json.RawMessage, error)
}

// FixtureReport is the result of RunFixtures.
type FixtureReport struct {
	Action  string          `json:"action"`
	Pass    bool            `json:"pass"`
	Updated bool            `json:"updated,omitempty"`
	Files   []FixtureResult `json:"fixtures"`
}

// FixtureResult is the result of one fixture file.
type FixtureResult struct {
	Name     string        `json:"name"`
	Items    int           `json:"items"`
	Pass     bool          `json:"pass"`
	Error    string        `json:"error,omitempty"` // why the file could not be compared as a whole
	Failures []ItemFailure `json:"failures,omitempty"`
	Elapsed  time.Duration `json:"elapsedNs"`
}

// ItemFailure is one item whose answer differs from the golden one.
type ItemFailure struct {
	Source   string          `json:"source"` // fixtures/NAME.in.jsonl:LINE
	Key      *string         `json:"key,omitempty"`
	Problems []string        `json:"problems"`
	Want     json.RawMessage `json:"want,omitempty"`
	Got      json.RawMessage `json:"got,omitempty"`
}

// answer is an item's answer as golden files hold it.
type answer struct {
	Outcome   string    `json:"outcome"`
	Retryable *bool     `json:"retryable,omitempty"`
	Message   string    `json:"message,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Emits     []emitOut `json:"emits,omitempty"`
	// State is, for an item of an inlet that keeps state, its key's state after it: what it
	// staged when done, else what it saw; null when none. Nil (left out) for other inlets.
	State json.RawMessage `json:"state,omitempty"`
}

type emitOut struct {
	Outlet    string          `json:"outlet,omitempty"`
	Key       *string         `json:"key,omitempty"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers,omitempty"`
}

// RunFixtures runs every fixture of a.Dir through the engine that runs the action in
// production (package stdio/engine), as strictly: one process per fixture file (one per item
// with --per-item), its items one at a time and none retried, each answer compared by value
// with the golden line (or, with Update, written as the new golden line). A fault of the
// action (a line that breaks the protocol, a crash, a timeout, no ready) fails its file at
// once, named with the fix. It returns an error only when it cannot run at all: no fixture
// (errFixture), a command that cannot be executed (errAction), ctx ended.
func RunFixtures(ctx context.Context, a Action, opts FixtureOptions) (*FixtureReport, error) {
	a.defaults()
	if len(a.Command) == 0 {
		return nil, fmt.Errorf("%w: action %q has no command: end its config line with -- and the program", errAction, a.Name)
	}
	fx, err := LoadFixtures(a.Dir)
	if err != nil {
		return nil, err
	}
	if len(fx) == 0 {
		return nil, fmt.Errorf("%w: no fixture in %s: write fixtures/NAME.in.jsonl (one item per line, e.g. {\"key\": \"k1\", \"payload\": {}}) and run with --update to record the answers", errFixture, filepath.Join(a.Dir, "fixtures"))
	}
	rep := &FixtureReport{Action: a.Name, Pass: true, Updated: opts.Update}
	for _, f := range fx {
		res, err := runFixture(ctx, &a, f, opts)
		if err != nil {
			return nil, err
		}
		if !res.Pass {
			rep.Pass = false
		}
		rep.Files = append(rep.Files, res)
	}
	return rep, nil
}

const fixtureOwner = "fixture"

// fixtureConfig is the engine config of a fixture's conversation: the action's, one process,
// no retry (a fixture shows what one attempt answers), hello with the fixture's config. The
// ready timeout is doubled, and 5 s added, as the conformance kit waits: fixtures judge answers,
// and the kit's ready check judges the start, so a start slowed down by a loaded machine (CI
// running every action's fixtures at once) does not fail them.
func fixtureConfig(a *Action, config json.RawMessage) engine.Config {
	cfg := a.EngineConfig()
	cfg.Version, cfg.Env, cfg.ShutdownGrace = a.Version, a.Env, a.ShutdownGrace
	cfg.Concurrency, cfg.Retries = 1, 0
	cfg.ReadyTimeout = 2*cmp.Or(a.ReadyTimeout, engine.DefaultReadyTimeout) + 5*time.Second
	cfg.Hello = stdio.Hello{Action: a.Name, Version: a.Version, Config: config, Vars: a.vars()}
	cfg.State = a.State
	return cfg
}

func runFixture(ctx context.Context, a *Action, f *Fixture, opts FixtureOptions) (FixtureResult, error) {
	t0 := time.Now()
	res := FixtureResult{Name: f.Name, Items: len(f.lines)}
	inputs := f.Inputs(a)
	config := a.Config
	if f.Config != nil {
		config = f.Config
	}
	pool, err := engine.Start(ctx, fixtureConfig(a, config))
	if err != nil {
		if cannotExec(err) {
			return res, fmt.Errorf("%w: action %q: %w (check the command after -- in the config line)", errAction, a.Name, err)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Error = startFault(err)
		return res, nil
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*a.ShutdownGrace)
		defer cancel()
		_ = pool.Close(cctx, true)
	}()
	var got []*answer
	states := fixtureStates{}
	for _, in := range inputs {
		states.read(a, &in)
		if opts.RoundTrip != nil {
			if fault := roundTripInput(ctx, opts.RoundTrip, &in.Item); fault != "" {
				res.Error = fmt.Sprintf("%s: %s", in.Source, fault)
				return res, nil
			}
		}
		r, err := submitOne(ctx, pool, in.Item)
		if err != nil {
			return res, err
		}
		ans, fault := toAnswer(a, r)
		if fault != "" {
			res.Error = fmt.Sprintf("%s: %s", in.Source, fault)
			return res, nil
		}
		if opts.RoundTrip != nil {
			if rt := roundTripEmits(ctx, opts.RoundTrip, ans); rt != ans {
				r.State = nil // an emit does not fit: the record fails, and nothing it staged applies
				ans = rt
			}
		}
		ans.State = states.after(a, &in.Item, r)
		got = append(got, ans)
	}
	res.Elapsed = time.Since(t0)
	if opts.Update {
		if err := writeGolden(f.Out, got, len(a.Outlets)); err != nil {
			return res, err
		}
		res.Pass = true
		return res, nil
	}
	old, oldErr := readGolden(f.Out)
	switch {
	case errors.Is(oldErr, fs.ErrNotExist):
		res.Error = fmt.Sprintf("no golden file %s: run with --update to write it from the answers, then check them", filepath.Join("fixtures", filepath.Base(f.Out)))
		return res, nil
	case oldErr != nil:
		return res, oldErr
	case len(old) != len(inputs):
		res.Error = fmt.Sprintf("%s has %s for %s in %s: one answer per item; run with --update to rewrite it", filepath.Base(f.Out), plural(len(old), "line", "lines"), plural(len(inputs), "item", "items"), filepath.Base(f.In))
		return res, nil
	}
	for i := range inputs {
		problems := compareAnswer(a, old[i], got[i])
		if len(problems) == 0 {
			continue
		}
		gotJSON, _ := marshal(got[i])
		res.Failures = append(res.Failures, ItemFailure{Source: inputs[i].Source, Key: inputs[i].Item.Key, Problems: problems, Want: old[i], Got: gotJSON})
	}
	res.Pass = len(res.Failures) == 0
	return res, nil
}

// submitOne runs it through the pool and waits for its result.
func submitOne(ctx context.Context, pool *engine.Pool, it stdio.Item) (engine.Result, error) {
	done := make(chan engine.Result, 1)
	if err := pool.Submit(ctx, it, func(r engine.Result) { done <- r }); err != nil {
		if errors.Is(err, engine.ErrBadItem) {
			return engine.Result{}, fmt.Errorf("%w: %w", errFixture, err)
		}
		return engine.Result{}, err
	}
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
		return engine.Result{}, ctx.Err()
	}
}

// cannotExec reports whether a failed start never ran the program: the command is missing or
// not executable, which no fixture can judge.
func cannotExec(err error) bool {
	var pe *fs.PathError
	var ee *exec.Error
	return errors.As(err, &pe) || errors.As(err, &ee)
}

// startFault says why the action's process did not start, with the way out.
func startFault(err error) string {
	var pe *stdio.ProtocolError
	switch {
	case errors.As(err, &pe):
		return "the answer to hello breaks the protocol " + violation(pe) + stopped
	case errors.Is(err, engine.ErrNoReady):
		return fmt.Sprintf("the action did not answer hello with ready in time: %v; %s (or raise --ready-timeout)", err, streamHint)
	}
	return fmt.Sprintf("the action did not start: %v; run it by hand in its folder to see why", err)
}

// stopped is what production does on a line that breaks the protocol.
const stopped = " (millrace run and production stop the process on such a line)"

// violation names a protocol violation as the engine found it: the rule, what is wrong, the
// line and the fix.
func violation(pe *stdio.ProtocolError) string {
	s := fmt.Sprintf("(%s): %s", pe.Rule, pe.Detail)
	if pe.Line != nil {
		s += ": " + quote(pe.Line)
	}
	return s + "; fix: " + pe.Rule.Fix()
}

// toAnswer is an item's result as golden files hold it, or, when the action gave no answer or
// an emit no declared outlet takes, what went wrong, with the fix.
func toAnswer(a *Action, r engine.Result) (*answer, string) {
	var act *engine.ActionError
	var pe *stdio.ProtocolError
	switch {
	case r.Outcome == engine.Done:
		ans := &answer{Outcome: stdio.TypeDone}
		for i, e := range r.Emits {
			outlet, err := a.EmitOutlet(i+1, &e)
			if errors.As(err, &pe) {
				return nil, "the action broke the protocol " + violation(pe) + " (production fails such a record for good)"
			}
			ans.Emits = append(ans.Emits, emitOut{Outlet: outlet, Key: e.Key, KeyBase64: e.KeyBase64, Payload: e.Payload, Headers: e.Headers})
		}
		return ans, ""
	case r.Outcome == engine.Abstained:
		return &answer{Outcome: stdio.TypeAbstain, Reason: r.Reason}, ""
	case errors.As(r.Err, &act):
		retryable := act.Retryable
		return &answer{Outcome: stdio.TypeError, Retryable: &retryable, Message: act.Message}, ""
	case errors.As(r.Err, &pe):
		return nil, "no answer: the action broke the protocol " + violation(pe) + stopped
	case errors.Is(r.Err, engine.ErrState):
		return nil, fmt.Sprintf("the action staged a state production cannot keep: %v (production fails such a record for good)", r.Err)
	case errors.Is(r.Err, engine.ErrTimeout):
		return nil, fmt.Sprintf("no answer: %v; answer every item, end each line with \\n, %s", r.Err, streamHint)
	}
	return nil, fmt.Sprintf("no answer: %v", r.Err)
}

// WriteText writes the report as `millrace test action` prints it.
func (rep *FixtureReport) WriteText(w io.Writer) error {
	var b strings.Builder
	items, bad := 0, 0
	for _, f := range rep.Files {
		items += f.Items
		switch {
		case rep.Updated && f.Error == "":
			fmt.Fprintf(&b, "UPDATED %s: %s written to fixtures/%s.out.jsonl (%s)\n", f.Name, plural(f.Items, "answer", "answers"), f.Name, roundDur(f.Elapsed))
		case f.Error != "":
			bad++
			fmt.Fprintf(&b, "FAIL %s: %s\n", f.Name, f.Error)
		case f.Pass:
			fmt.Fprintf(&b, "PASS %s: %s (%s)\n", f.Name, plural(f.Items, "item", "items"), roundDur(f.Elapsed))
		default:
			bad += len(f.Failures)
			verb := "differ"
			if len(f.Failures) == 1 {
				verb = "differs"
			}
			fmt.Fprintf(&b, "FAIL %s: %d of %s %s from fixtures/%s.out.jsonl (%s)\n", f.Name, len(f.Failures), plural(f.Items, "item", "items"), verb, f.Name, roundDur(f.Elapsed))
			for _, it := range f.Failures {
				key := ""
				if it.Key != nil {
					key = fmt.Sprintf(" (key %q)", *it.Key)
				}
				fmt.Fprintf(&b, "  %s%s:\n", it.Source, key)
				for _, pr := range it.Problems {
					fmt.Fprintf(&b, "    %s\n", pr)
				}
				fmt.Fprintf(&b, "    want %s\n    got  %s\n", it.Want, it.Got)
			}
		}
	}
	files := plural(len(rep.Files), "fixture file", "fixture files")
	switch {
	case rep.Updated:
		fmt.Fprintf(&b, "%s: %s, %s: golden files updated; review them with git diff\n", rep.Action, files, plural(items, "item", "items"))
	case rep.Pass:
		fmt.Fprintf(&b, "%s: %s, %s: all pass\n", rep.Action, files, plural(items, "item", "items"))
	case rep.differs():
		fmt.Fprintf(&b, "%s: %s, %s: %d failed (if the new answers are right, run with --update to accept them)\n", rep.Action, files, plural(items, "item", "items"), bad)
	default: // nothing to accept: the action broke, and --update would record nothing
		fmt.Fprintf(&b, "%s: %s, %s: %d failed\n", rep.Action, files, plural(items, "item", "items"), bad)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// differs reports whether some item's answer differs from its golden line: the one failure
// that --update may be the answer to.
func (rep *FixtureReport) differs() bool {
	for _, f := range rep.Files {
		if len(f.Failures) > 0 {
			return true
		}
	}
	return false
}

// fixtureStates is the state a fixture file keeps per key across its lines, as production
// does: applied when an item is done, nothing of a failure.
type fixtureStates map[string]json.RawMessage

func stateKey(it *stdio.Item) (string, bool) {
	switch {
	case it.Key != nil:
		return it.Inlet + "\x00" + *it.Key, true
	case it.KeyBase64 != "":
		return it.Inlet + "\x00\x00" + it.KeyBase64, true
	}
	return "", false
}

// read gives in's item the state it sees: the line's own, else what the file kept.
func (s fixtureStates) read(a *Action, in *Input) {
	k, keyed := stateKey(&in.Item)
	if _, ok := a.State[in.Item.Inlet]; !ok || !keyed {
		in.Item.State = nil
		return
	}
	if in.stateSet {
		s[k] = in.Item.State
		return
	}
	in.Item.State = s[k]
}

// after records what r staged and returns the item's state after it, null when none; nil for
// an item of an inlet that keeps no state.
func (s fixtureStates) after(a *Action, it *stdio.Item, r engine.Result) json.RawMessage {
	if _, ok := a.State[it.Inlet]; !ok {
		return nil
	}
	k, keyed := stateKey(it)
	if keyed && r.Outcome == engine.Done && r.State != nil {
		s[k] = r.State.Value
	}
	if v := s[k]; keyed && v != nil {
		return v
	}
	return json.RawMessage("null")
}

// roundTripFunc is FixtureOptions.RoundTrip.
type roundTripFunc = func(ctx context.Context, port string, inlet, key bool, data json.RawMessage) (json.RawMessage, error)

// roundTripInput passes item's payload and key through its inlet's encoding
// (FixtureOptions.RoundTrip), in place; it returns why the fixture's line does not fit, or "".
func roundTripInput(ctx context.Context, rt roundTripFunc, item *stdio.Item) string {
	p, err := rt(ctx, item.Inlet, true, false, item.Payload)
	if err != nil {
		return fmt.Sprintf("the payload does not fit inlet %s's schema: %v; fix the fixture's payload", item.Inlet, err)
	}
	item.Payload = p
	if item.Key == nil {
		return ""
	}
	k, err := rt(ctx, item.Inlet, true, true, json.RawMessage(*item.Key))
	if err != nil {
		return fmt.Sprintf("the key does not fit the schema of inlet %s's keys: %v; fix the fixture's key (an encoded key is its JSON text: \"key\": \"\\\"k1\\\"\" for an Avro string)", item.Inlet, err)
	}
	s := string(k)
	item.Key = &s
	return ""
}

// roundTripEmits passes ans's emits, payloads and keys, through their outlets' encoding
// (FixtureOptions.RoundTrip); an emit that does not fit turns the answer into the
// non-retryable error production gives the record.
func roundTripEmits(ctx context.Context, rt roundTripFunc, ans *answer) *answer {
	misfit := func(i int, outlet, what string, err error) *answer {
		no := false
		return &answer{Outcome: stdio.TypeError, Retryable: &no, Message: fmt.Sprintf("emit %d to outlet %q does not fit its %s: %v", i+1, outlet, what, err)}
	}
	for i := range ans.Emits {
		e := &ans.Emits[i]
		p, err := rt(ctx, e.Outlet, false, false, e.Payload)
		if err != nil {
			return misfit(i, e.Outlet, "schema", err)
		}
		e.Payload = p
		if e.Key == nil {
			continue
		}
		k, err := rt(ctx, e.Outlet, false, true, json.RawMessage(*e.Key))
		if err != nil {
			return misfit(i, e.Outlet, "keys' schema", err)
		}
		s := string(k)
		e.Key = &s
	}
	return ans
}
