package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// FixtureTimestamp is the timestamp of a fixture item that gives none: 2026-01-01T00:00:00Z in
// milliseconds, fixed so golden files do not change from run to run.
const FixtureTimestamp = 1767225600000

// FixtureTopic is the topic of a fixture item that gives none.
const FixtureTopic = "fixtures"

// Fixture is one fixtures/NAME.in.jsonl with its optional NAME.config.json and its golden
// NAME.out.jsonl.
type Fixture struct {
	Name       string
	In         string          // path of NAME.in.jsonl
	Out        string          // path of NAME.out.jsonl (it may not exist yet)
	ConfigPath string          // path of NAME.config.json, "" when there is none
	Config     json.RawMessage // its content
	lines      []inLine
}

// inLine is one line of an .in.jsonl file, as the test author writes it: every field but the
// payload is optional.
type inLine struct {
	line      int
	Key       *string         `json:"key"`
	KeyBase64 string          `json:"keyBase64"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers"`
	ID        *string         `json:"id"`
	Inlet     *string         `json:"inlet"`
	Topic     *string         `json:"topic"`
	Partition *int32          `json:"partition"`
	Offset    *int64          `json:"offset"`
	Timestamp *int64          `json:"timestamp"`
}

// LoadFixtures reads every fixtures/*.in.jsonl under dir, sorted by name. No fixtures folder
// means none. A line that is not a JSON object, or a config that is not JSON, is an error
// wrapping ErrFixture that names the file and line.
func LoadFixtures(dir string) ([]*Fixture, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "fixtures", "*.in.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*Fixture
	for _, p := range paths {
		base := strings.TrimSuffix(p, ".in.jsonl")
		f := &Fixture{Name: filepath.Base(base), In: p, Out: base + ".out.jsonl"}
		if data, err := os.ReadFile(base + ".config.json"); err == nil {
			if !json.Valid(data) {
				return nil, fmt.Errorf("%w: %s is not valid JSON: write the config object hello carries, e.g. {\"min-rooms\": 2}", ErrFixture, base+".config.json")
			}
			f.ConfigPath, f.Config = base+".config.json", bytes.TrimSpace(data)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrFixture, err)
		}
		lines, err := readLines(p)
		if err != nil {
			return nil, err
		}
		for i, l := range lines {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			in := inLine{line: i + 1}
			if err := json.Unmarshal(l, &in); err != nil || bytes.TrimSpace(l)[0] != '{' {
				return nil, fmt.Errorf("%w: %s:%d: not a JSON object (%v); write one item per line: {\"key\": \"k1\", \"payload\": {…}}", ErrFixture, p, i+1, errText(err))
			}
			if len(in.Payload) == 0 {
				in.Payload = json.RawMessage("null")
			}
			f.lines = append(f.lines, in)
		}
		out = append(out, f)
	}
	return out, nil
}

func errText(err error) string {
	if err == nil {
		return "not an object"
	}
	return err.Error()
}

func readLines(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFixture, err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, stdio.MaxLineBytes+1)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFixture, path, err)
	}
	return lines, nil
}

// Inputs returns the fixture's items, filled as the runner sends them.
func (f *Fixture) Inputs(a *Action) []Input {
	var in []Input
	for i, l := range f.lines {
		it := stdio.Item{Key: l.Key, KeyBase64: l.KeyBase64, Payload: l.Payload, Headers: l.Headers}
		it = fillItem(a, it, int64(i), "")
		if l.Inlet != nil {
			it.Inlet = *l.Inlet
		}
		if l.Topic != nil {
			it.Topic = *l.Topic
		}
		if l.Partition != nil {
			it.Partition = *l.Partition
		}
		if l.Offset != nil {
			it.Offset = *l.Offset
		}
		if l.Timestamp != nil {
			it.Timestamp = *l.Timestamp
		}
		it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
		if l.ID != nil {
			it.ID = *l.ID
		}
		it.IdempotencyKey = a.idempotencyKey(&it)
		in = append(in, Input{Item: it, Source: fmt.Sprintf("%s:%d", filepath.Join("fixtures", filepath.Base(f.In)), l.line)})
	}
	return in
}

// fillItem fills what the test author left out: run, inlet, topic, partition 0, offset, a
// fixed timestamp, id and idempotencyKey.
func fillItem(a *Action, it stdio.Item, offset int64, topic string) stdio.Item {
	if topic == "" {
		topic = FixtureTopic
	}
	it.Run = "fixtures"
	it.Inlet = a.inlet()
	it.Topic = topic
	it.Offset = offset
	it.Timestamp = FixtureTimestamp
	it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
	it.IdempotencyKey = a.idempotencyKey(&it)
	it.Attempt = 1
	return it
}

// FixtureOptions tune RunFixtures.
type FixtureOptions struct {
	// Update rewrites every NAME.out.jsonl with the answers the action gave, instead of
	// comparing. A "message" or "reason" the old golden line held is kept (updated).
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
		return nil, fmt.Errorf("conformance: a work folder: %w", err)
	}
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
	old, oldErr := readGolden(f.Out)
	if opts.Update {
		if err := writeGolden(f.Out, got, old, len(a.Outlets)); err != nil {
			return res, err
		}
		res.Pass = true
		return res, nil
	}
	switch {
	case errors.Is(oldErr, fs.ErrNotExist):
		res.Error = fmt.Sprintf("no golden file %s: run with --update to write it from the answers, then check them", filepath.Join("fixtures", filepath.Base(f.Out)))
		return res, nil
	case oldErr != nil:
		return res, oldErr
	case len(old) != len(inputs):
		res.Error = fmt.Sprintf("%s has %d lines for %d items in %s: one answer per item; run with --update to rewrite it", filepath.Base(f.Out), len(old), len(inputs), filepath.Base(f.In))
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
			if outlet == "" && len(a.Outlets) == 1 {
				outlet = a.Outlets[0].Name
			}
			ans.Emits = append(ans.Emits, emitOut{Outlet: outlet, Key: e.Key, KeyBase64: e.KeyBase64, Payload: e.Payload, Headers: e.Headers})
		}
	}
	return ans
}

// readGolden reads NAME.out.jsonl: one JSON object per line.
func readGolden(path string) ([]json.RawMessage, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for i, l := range lines {
		t := bytes.TrimSpace(l)
		if len(t) == 0 {
			continue
		}
		if t[0] != '{' || !json.Valid(t) {
			return nil, fmt.Errorf("%w: %s:%d: not a JSON object; each line is an answer such as {\"outcome\": \"done\", \"emits\": [{\"payload\": {}}]}", ErrFixture, path, i+1)
		}
		out = append(out, json.RawMessage(t))
	}
	return out, nil
}

// writeGolden writes the answers as NAME.out.jsonl. The outlet is left out when the action
// has one; an error's message and an abstain's reason are kept only where the old golden line
// had them.
func writeGolden(path string, got []*answer, old []json.RawMessage, outlets int) error {
	var buf bytes.Buffer
	for i, ans := range got {
		a := *ans
		var prev map[string]json.RawMessage
		if i < len(old) {
			_ = json.Unmarshal(old[i], &prev)
		}
		if _, ok := prev["message"]; !ok {
			a.Message = ""
		}
		if _, ok := prev["reason"]; !ok {
			a.Reason = ""
		}
		if outlets == 1 {
			a.Emits = slices.Clone(a.Emits)
			for j := range a.Emits {
				a.Emits[j].Outlet = ""
			}
		}
		line, err := marshal(&a)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("conformance: writing golden file: %w", err)
	}
	return nil
}

// marshal writes v as compact JSON without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

var (
	answerFields = []string{"outcome", "emits", "retryable", "message", "reason"}
	emitFields   = []string{"outlet", "key", "keyBase64", "payload", "headers"}
)

// compareAnswer compares a golden line with an answer, by value, fields absent from the golden
// line left out; it returns the differences, one line each, or nil.
func compareAnswer(a *Action, wantRaw json.RawMessage, got *answer) []string {
	var want map[string]any
	if err := decodeNumbers(wantRaw, &want); err != nil {
		return []string{"the golden line is not a JSON object: " + err.Error()}
	}
	var gotV map[string]any
	gotRaw, _ := marshal(got)
	_ = decodeNumbers(gotRaw, &gotV)
	var p []string
	for k := range want {
		if !slices.Contains(answerFields, k) {
			p = append(p, fmt.Sprintf("%s: unknown field in the golden line (want %s)", k, strings.Join(answerFields, ", ")))
		}
	}
	wo, _ := want["outcome"].(string)
	if wo != got.Outcome {
		extra := ""
		if got.Message != "" {
			extra = fmt.Sprintf(" (%q)", got.Message)
		} else if got.Reason != "" {
			extra = fmt.Sprintf(" (%q)", got.Reason)
		}
		return append(p, fmt.Sprintf("outcome: want %s, got %s%s", show(want["outcome"]), got.Outcome, extra))
	}
	for _, k := range []string{"retryable", "message", "reason"} {
		if w, ok := want[k]; ok {
			diff(k, w, gotV[k], &p)
		}
	}
	var wantEmits []any
	if w, ok := want["emits"]; ok {
		if wantEmits, ok = w.([]any); !ok && w != nil {
			return append(p, "emits: the golden line's emits is not a list")
		}
	}
	gotEmits, _ := gotV["emits"].([]any)
	if len(wantEmits) != len(gotEmits) {
		p = append(p, fmt.Sprintf("emits: want %d, got %d", len(wantEmits), len(gotEmits)))
	}
	for i := range min(len(wantEmits), len(gotEmits)) {
		we, ok := wantEmits[i].(map[string]any)
		if !ok {
			p = append(p, fmt.Sprintf("emits[%d]: the golden emit is not an object", i))
			continue
		}
		ge, _ := gotEmits[i].(map[string]any)
		path := fmt.Sprintf("emits[%d]", i)
		for k := range we {
			if !slices.Contains(emitFields, k) {
				p = append(p, fmt.Sprintf("%s.%s: unknown field in the golden emit (want %s)", path, k, strings.Join(emitFields, ", ")))
			}
		}
		if _, ok := we["outlet"]; !ok {
			switch len(a.Outlets) {
			case 1:
				we["outlet"] = a.Outlets[0].Name
			case 0:
			default:
				p = append(p, fmt.Sprintf("%s.outlet: the golden emit names no outlet, but the action has %d (%s): name it", path, len(a.Outlets), strings.Join(a.outlets(), ", ")))
			}
		}
		for _, k := range emitFields {
			if w, ok := we[k]; ok {
				diff(path+"."+k, w, ge[k], &p)
			}
		}
	}
	return p
}

func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// diff appends the differences between want and got, by value, with their paths.
func diff(path string, want, got any, p *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
			return
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !gok:
				*p = append(*p, fmt.Sprintf("%s.%s: want %s, got nothing", path, k, show(wv)))
			case !wok:
				*p = append(*p, fmt.Sprintf("%s.%s: not expected, got %s", path, k, show(gv)))
			default:
				diff(path+"."+k, wv, gv, p)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
			return
		}
		if len(w) != len(g) {
			*p = append(*p, fmt.Sprintf("%s: want %d elements, got %d: want %s, got %s", path, len(w), len(g), show(want), show(got)))
			return
		}
		for i := range w {
			diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], p)
		}
	case json.Number:
		g, ok := got.(json.Number)
		if !ok || !sameNumber(w, g) {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
		}
	default:
		if want != got {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
		}
	}
}

func sameNumber(a, b json.Number) bool {
	x, ok1 := new(big.Float).SetString(string(a))
	y, ok2 := new(big.Float).SetString(string(b))
	if !ok1 || !ok2 {
		return a == b
	}
	return x.Cmp(y) == 0
}

// show writes a value for a diff line: compact JSON, shortened.
func show(v any) string {
	if v == nil {
		return "null"
	}
	b, err := marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return shorten(string(b), 120)
}

// WriteText writes the report as `millrace test action` prints it.
func (rep *FixtureReport) WriteText(w io.Writer) error {
	var b strings.Builder
	items, bad := 0, 0
	for _, f := range rep.Files {
		items += f.Items
		switch {
		case rep.Updated && f.Error == "":
			fmt.Fprintf(&b, "UPDATED %s: %d answers written to fixtures/%s.out.jsonl (%s)\n", f.Name, f.Items, f.Name, roundDur(f.Elapsed))
		case f.Error != "":
			bad++
			fmt.Fprintf(&b, "FAIL %s: %s\n", f.Name, f.Error)
		case f.Pass:
			fmt.Fprintf(&b, "PASS %s: %d items (%s)\n", f.Name, f.Items, roundDur(f.Elapsed))
		default:
			bad += len(f.Failures)
			fmt.Fprintf(&b, "FAIL %s: %d of %d items differ from fixtures/%s.out.jsonl (%s)\n", f.Name, len(f.Failures), f.Items, f.Name, roundDur(f.Elapsed))
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
	switch {
	case rep.Updated:
		fmt.Fprintf(&b, "%s: %d fixture files, %d items: golden files updated; review them with git diff\n", rep.Action, len(rep.Files), items)
	case rep.Pass:
		fmt.Fprintf(&b, "%s: %d fixture files, %d items: all pass\n", rep.Action, len(rep.Files), items)
	default:
		fmt.Fprintf(&b, "%s: %d fixture files, %d items: %d failed (run with --update to accept the new answers)\n", rep.Action, len(rep.Files), items, bad)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
