package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
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
	Error    string        `json:"error,omitempty"`    // why the file could not be compared as a whole
	Warnings []string      `json:"warnings,omitempty"` // protocol faults seen while it ran
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
}

type emitOut struct {
	Outlet    string          `json:"outlet,omitempty"`
	Key       *string         `json:"key,omitempty"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers,omitempty"`
}

// RunFixtures runs every fixture of a.Dir: one process per fixture file (one per item with
// --per-item), its items one at a time, each answer compared by value with the golden line
// (or, with Update, written as the new golden line). It returns an error only when it cannot
// run at all: no fixture (ErrFixture), an action that cannot start (ErrAction), ctx ended.
func RunFixtures(ctx context.Context, a Action, opts FixtureOptions) (*FixtureReport, error) {
	a.defaults()
	if len(a.Command) == 0 {
		return nil, fmt.Errorf("%w: action %q has no command: end its config line with -- and the program", ErrAction, a.Name)
	}
	fx, err := LoadFixtures(a.Dir)
	if err != nil {
		return nil, err
	}
	if len(fx) == 0 {
		return nil, fmt.Errorf("%w: no fixture in %s: write fixtures/NAME.in.jsonl (one item per line, e.g. {\"key\": \"k1\", \"payload\": {}}) and run with --update to record the answers", ErrFixture, filepath.Join(a.Dir, "fixtures"))
	}
	workdir, err := os.MkdirTemp("", "millrace-fixtures-")
	if err != nil {
		return nil, fmt.Errorf("a work folder for the test: %w", err)
	}
	defer engine.TrackDir(workdir)() // removed by engine.Teardown should the program quit at once
	defer os.RemoveAll(workdir)
	rep := &FixtureReport{Action: a.Name, Pass: true, Updated: opts.Update}
	for _, f := range fx {
		res, err := runFixture(ctx, &a, f, opts, workdir)
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

func runFixture(ctx context.Context, a *Action, f *Fixture, opts FixtureOptions, workdir string) (FixtureResult, error) {
	t0 := time.Now()
	res := FixtureResult{Name: f.Name, Items: len(f.lines)}
	inputs := f.Inputs(a)
	r := newRunner(ctx, a, Options{StderrLineMax: stdio.MaxLineBytes}, workdir, inputs)
	defer func() {
		for _, p := range r.procs {
			p.kill()
		}
	}()
	cfg := a.Config
	if f.Config != nil {
		cfg = f.Config
	}
	var got []*answer
	s := r.open(fixtureOwner, cfg, "")
	for i, in := range inputs {
		d := s.deliver(i, in.Item, fixtureOwner)
		if d == nil || d.answer == nil {
			break
		}
		got = append(got, toAnswer(a, d))
	}
	s.shutdown()
	if r.fatal != nil {
		return res, r.fatal
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(t0)
	for _, c := range Checks {
		for _, w := range r.fails[c.Name] {
			res.Warnings = append(res.Warnings, c.Name+": "+w)
		}
	}
	// As strict as production: the engine stops a process on a line it cannot read as a
	// message, so a fixture passes no action that writes one, and --update records nothing.
	for _, c := range []string{CheckStdout, CheckFraming} {
		if fails := r.fails[c]; len(fails) > 0 {
			res.Error = fmt.Sprintf("%s: %s (millrace run and production stop the process on such a line, and retry its batch)", c, fails[0])
			return res, nil
		}
	}
	if len(got) < len(inputs) {
		why := "it stopped"
		if fails := r.fails[fixtureOwner]; len(fails) > 0 {
			why = fails[0]
		} else if fails := r.fails[CheckShutdown]; len(fails) > 0 {
			why = fails[0]
		}
		res.Error = fmt.Sprintf("%s: no answer from the action: %s", inputs[len(got)].Source, why)
		return res, nil
	}
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

func toAnswer(a *Action, d *delivery) *answer {
	m := d.answer
	ans := &answer{Outcome: m.Type}
	switch m.Type {
	case stdio.TypeError:
		r := m.Retryable
		ans.Retryable = &r
		ans.Message = m.Message
		if ans.Message == "" {
			ans.Message = m.Error
		}
	case stdio.TypeAbstain:
		ans.Reason = m.Reason
	case stdio.TypeDone:
		for _, e := range d.emits {
			outlet := e.Outlet
			if name, _, ok := a.DefaultOutlet(); outlet == "" && ok {
				outlet = name
			}
			ans.Emits = append(ans.Emits, emitOut{Outlet: outlet, Key: e.Key, KeyBase64: e.KeyBase64, Payload: e.Payload, Headers: e.Headers})
		}
	}
	return ans
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
		for _, warn := range f.Warnings {
			fmt.Fprintf(&b, "  warning: %s\n", warn)
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
