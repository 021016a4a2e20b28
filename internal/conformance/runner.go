package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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
		main: map[int]string{}, mainCounts: map[string]int{},
	}
}

// readyWait is how long a conversation waits for ready before giving up on it: longer than the
// ready timeout, so that a slow start fails the ready check alone and the rest still runs.
func (r *runner) readyWait() time.Duration { return 2*r.a.ReadyTimeout + 5*time.Second }

func (r *runner) fail(check, detail string) {
	r.fails[check] = append(r.fails[check], detail)
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
	if r.notRun == "" {
		for _, step := range []func(){r.unknownKeys, r.badConfig, r.nonASCII, r.large, r.burst} {
			step()
			if r.fatal != nil {
				return r.fatal
			}
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

const (
	unknownHelloKeys = `,"lessons":[{"text":"keep answers short"}],"x-conformance-future":{"nested":[1,"two",{"three":null}],"flag":true}`
	unknownItemKeys  = `,"artifacts":[],"x-conformance-future":{"nested":[1,"two",{"three":null}],"n":1.5e3}`
)

// unknownKeys: the same inputs, with keys the action cannot know in hello and every item; the
// answers must be the same as without them.
func (r *runner) unknownKeys() {
	t0 := time.Now()
	s := r.open(CheckUnknownKeys, r.a.Config, unknownHelloKeys)
	n := 0
	for _, i := range r.answeredInputs() {
		d := s.deliver(i, r.inputs[i].Item, CheckUnknownKeys)
		if d == nil || d.answer == nil {
			break
		}
		n++
		if got, want := d.outcome(), r.main[i]; got != want {
			r.fail(CheckUnknownKeys, fmt.Sprintf("%s was answered %s with unknown keys in hello and the item, but %s without them%s: ignore keys you do not know", r.inputs[i].Source, got, want, answerText(d.answer)))
		}
	}
	s.shutdown()
	r.elapsed[CheckUnknownKeys] = time.Since(t0)
	r.pass[CheckUnknownKeys] = fmt.Sprintf("hello and %d items with unknown keys answered as without them", n)
}

func answerText(m *stdio.Message) string {
	switch {
	case m.Message != "":
		return fmt.Sprintf(" (%q)", m.Message)
	case m.Error != "":
		return fmt.Sprintf(" (%q)", m.Error)
	case m.Reason != "":
		return fmt.Sprintf(" (%q)", m.Reason)
	}
	return ""
}

// badConfig: the same inputs under a config whose every value has the wrong type.
func (r *runner) badConfig() {
	t0 := time.Now()
	cfg := malform(r.a.Config)
	if cfg == nil {
		r.pass[CheckConfig] = "the action declares no parameter: nothing to malform"
		return
	}
	s := r.open(CheckConfig, cfg, "")
	got := map[string]int{}
	for _, i := range r.answeredInputs() {
		d := s.deliver(i, r.inputs[i].Item, CheckConfig)
		if d == nil || d.answer == nil {
			break
		}
		got[d.outcome()]++
	}
	s.shutdown()
	r.elapsed[CheckConfig] = time.Since(t0)
	r.pass[CheckConfig] = fmt.Sprintf("config %s answered item by item (%s)", shorten(string(cfg), 80), counts(got))
}

// malform returns cfg with every value replaced by one of another JSON type, or nil when cfg
// is not an object with at least one key.
func malform(cfg json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(cfg, &m) != nil || len(m) == 0 {
		return nil
	}
	for k, v := range m {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) == 0:
		case v[0] == '"':
			m[k] = json.RawMessage(`12345`)
		case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
			m[k] = json.RawMessage(`"not-a-number"`)
		case v[0] == 't' || v[0] == 'f':
			m[k] = json.RawMessage(`"not-a-boolean"`)
		default:
			m[k] = json.RawMessage(`"malformed"`)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return out
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// exemplar is the input the made-up items of the later checks are built on: the first the
// main conversation answered done, else the first answered, else the first.
func (r *runner) exemplar() stdio.Item {
	idx := r.answeredInputs()
	for _, i := range idx {
		if r.main[i] == stdio.TypeDone {
			return r.inputs[i].Item
		}
	}
	if len(idx) > 0 {
		return r.inputs[idx[0]].Item
	}
	return r.inputs[0].Item
}

const marker = "conformance-"

// withField returns payload with a field added when it is an object; a string payload is
// replaced by value when it is a string; anything else becomes an object with the field.
func withField(payload json.RawMessage, name string, value string) json.RawMessage {
	v, _ := json.Marshal(value)
	p := bytes.TrimSpace(payload)
	switch {
	case len(p) > 0 && p[0] == '{':
		inner := bytes.TrimSpace(p[1:])
		out := append([]byte(`{"`+name+`":`), v...)
		if len(inner) > 0 && inner[0] != '}' {
			out = append(out, ',')
		}
		return append(out, inner...)
	case len(p) > 0 && p[0] == '"':
		return v
	default:
		return append(append([]byte(`{"`+name+`":`), v...), '}')
	}
}

// nonASCII: an item whose key, a header and a payload field carry non-ASCII text; whatever of
// it comes back in the outputs must come back unchanged.
func (r *runner) nonASCII() {
	t0 := time.Now()
	it := r.exemplar()
	key := marker + "clé-ключ-键-🔑"
	header := marker + "naïve café — ελληνικά, עברית, 日本語 🙂"
	// a long run of multi-byte text crosses the buffer boundaries of the usual line readers
	text := marker + "ünïcödé ✓ e\u0301 \u2028 tab\t \"quoted\" back\\slash " + strings.Repeat("日本語 ελληνικά 🙂 ", 800)
	it.Key, it.KeyBase64 = &key, ""
	it.Headers = append(slices.Clone(it.Headers), stdio.Header{Key: "x-conformance-note", Value: &header})
	it.Payload = withField(it.Payload, "x-conformance-text", text)
	s := r.open(CheckNonASCII, r.a.Config, "")
	d := s.deliver(-1, it, CheckNonASCII)
	s.shutdown()
	r.elapsed[CheckNonASCII] = time.Since(t0)
	if d == nil || d.answer == nil {
		return
	}
	echoed := roundTrip(r, d, CheckNonASCII, []string{key, header, text})
	if echoed == 0 {
		r.pass[CheckNonASCII] = fmt.Sprintf("answered %s; none of the text came back in its outputs, so only the answer was checked", d.outcome())
		return
	}
	r.pass[CheckNonASCII] = fmt.Sprintf("answered %s; %d of the non-ASCII strings sent came back unchanged", d.outcome(), echoed)
}

// roundTrip compares every string of d's outputs that starts with the marker with the strings
// sent, charging check with any that changed; it returns how many came back unchanged. A
// string that holds a sent one whole, or is part of one, is unchanged: the action may add to
// the text or cut it, but not alter its characters.
func roundTrip(r *runner, d *delivery, check string, sent []string) int {
	echoed := 0
	visit := func(where, s string) {
		if !strings.HasPrefix(s, marker) {
			return
		}
		for _, t := range sent {
			// the action may add to the text or take part of it, but not change it
			if strings.Contains(s, t) || strings.Contains(t, s) {
				echoed++
				return
			}
		}
		want := ""
		for _, t := range sent {
			if len(t) > len(want) && commonPrefix(s, t) > commonPrefix(s, want) {
				want = t
			}
		}
		r.fail(check, fmt.Sprintf("text sent as %s came back changed in %s: %s (%d bytes) instead of %s (%d bytes); read stdin and write stdout as UTF-8", shortQ(want), where, shortQ(s), len(s), shortQ(want), len(want)))
	}
	for i, e := range d.emits {
		if e.Key != nil {
			visit(fmt.Sprintf("emits[%d].key", i), *e.Key)
		}
		for j, h := range e.Headers {
			if h.Value != nil {
				visit(fmt.Sprintf("emits[%d].headers[%d]", i, j), *h.Value)
			}
		}
		var v any
		if json.Unmarshal(e.Payload, &v) == nil {
			walkStrings(v, fmt.Sprintf("emits[%d].payload", i), visit)
		}
	}
	return echoed
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func shortQ(s string) string {
	if len(s) > 60 {
		cut := 60
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

func walkStrings(v any, path string, visit func(where, s string)) {
	switch t := v.(type) {
	case string:
		visit(path, t)
	case []any:
		for i, x := range t {
			walkStrings(x, fmt.Sprintf("%s[%d]", path, i), visit)
		}
	case map[string]any:
		for k, x := range t {
			walkStrings(x, path+"."+k, visit)
		}
	}
}

// padding returns an ASCII text of about n bytes that starts with the marker (non-ASCII text
// is the non-ascii check's: a fault there should fail that check alone).
func padding(n int) string {
	unit := "lorem ipsum dolor sit amet, consectetur adipiscing elit "
	var b strings.Builder
	b.Grow(n + len(unit))
	b.WriteString(marker + "padding ")
	for b.Len() < n {
		b.WriteString(unit)
	}
	s := b.String()
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// large: the exemplar with a payload of about 1 MiB.
func (r *runner) large() {
	t0 := time.Now()
	it := r.exemplar()
	pad := padding(r.opts.PayloadSize)
	it.Payload = withField(it.Payload, "x-conformance-padding", pad)
	s := r.open(CheckLarge, r.a.Config, "")
	d := s.deliver(-1, it, CheckLarge)
	s.shutdown()
	r.elapsed[CheckLarge] = time.Since(t0)
	if d == nil || d.answer == nil {
		return
	}
	echoed := roundTrip(r, d, CheckLarge, []string{pad})
	what := ""
	if echoed > 0 {
		what = ", and it came back unchanged"
	}
	r.pass[CheckLarge] = fmt.Sprintf("a %s payload answered %s in %s%s", sizeName(len(it.Payload)), d.outcome(), roundDur(d.latency), what)
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// burst: many copies of the exemplar written at once; every one answered, in order.
func (r *runner) burst() {
	if r.a.PerItem {
		r.pass[CheckBurst] = "does not apply with --per-item (one process per item)"
		return
	}
	t0 := time.Now()
	s := r.open(CheckBurst, r.a.Config, "")
	if !s.ok() {
		r.elapsed[CheckBurst] = time.Since(t0)
		return
	}
	ex := r.exemplar()
	var sent []*delivery
	tw := time.Now()
	for i := range r.burstSize() {
		it := ex
		it.Offset = int64(10000 + i)
		it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
		it.IdempotencyKey = r.a.idempotencyKey(&it)
		sent = append(sent, s.send(-1, it, CheckBurst))
	}
	s.await()
	took := time.Since(tw)
	s.shutdown()
	r.elapsed[CheckBurst] = time.Since(t0)
	if len(s.order) < len(sent) {
		return
	}
	for i, d := range s.order {
		if d != sent[i] {
			r.fail(CheckBurst, fmt.Sprintf("answers out of order: the answer to item %d of %d came where item %d's was due; answer items in the order they arrive (millrace writes items ahead with --window)", slices.Index(sent, d)+1, len(sent), i+1))
			return
		}
	}
	r.pass[CheckBurst] = fmt.Sprintf("%d items written at once, all answered in order in %s (%.0f items/s)", len(sent), roundDur(took), float64(len(sent))/took.Seconds())
}

// burstSize is Options.Burst, or DefaultBurst cut down for a slow action: about two seconds
// of items at the main conversation's mean answer time, at least MinBurst.
func (r *runner) burstSize() int {
	if r.opts.Burst > 0 {
		return r.opts.Burst
	}
	if r.mainItems == 0 || r.mainLatency <= 0 {
		return DefaultBurst
	}
	mean := r.mainLatency / time.Duration(r.mainItems)
	return max(MinBurst, min(DefaultBurst, int(2*time.Second/max(mean, time.Microsecond))))
}

// report assembles the checks.
func (r *runner) report() *Report {
	total := time.Since(r.start)
	var stderrLines, stderrTooLong int
	var stderrBytes int64
	for _, p := range r.procs {
		p.stderr.mu.Lock()
		stderrLines += p.stderr.lines
		stderrBytes += p.stderr.bytes
		stderrTooLong += p.stderr.tooLong
		p.stderr.mu.Unlock()
	}
	if stderrTooLong > 0 {
		r.fail(CheckStderr, fmt.Sprintf("%d stderr lines longer than %s (a progress bar redrawn with \\r, or binary data?): end each log line with \\n", stderrTooLong, sizeName(r.opts.StderrLineMax)))
	}
	var slowest time.Duration
	for _, d := range r.readyTimes {
		slowest = max(slowest, d)
	}
	r.pass[CheckReady] = fmt.Sprintf("answered hello with ready (slowest of %d processes: %s)", len(r.readyTimes), roundDur(slowest))
	r.pass[CheckFraming] = fmt.Sprintf("%d messages from %d processes, one JSON object per line", r.messages, len(r.procs))
	r.pass[CheckStdout] = "nothing but protocol lines on stdout"
	r.pass[CheckSilence] = fmt.Sprintf("nothing out of turn, over %d quiet waits and every delivery", r.quiets)
	if r.several > 0 {
		r.pass[CheckOutputs] = fmt.Sprintf("%d outputs to declared outlets; %d deliveries with several to one outlet, keyed distinctly", r.outputs, r.several)
	} else {
		r.pass[CheckOutputs] = fmt.Sprintf("%d outputs to declared outlets (no delivery had several to one outlet)", r.outputs)
	}
	r.pass[CheckStderr] = fmt.Sprintf("%d lines (%s) read as they came", stderrLines, byteSize(stderrBytes))
	r.pass[CheckShutdown] = fmt.Sprintf("%d processes exited with status 0 (slowest in %s)", r.shutdowns, roundDur(r.shutdownMax))
	for _, c := range []string{CheckFraming, CheckStdout, CheckSilence, CheckOutputs, CheckStderr} {
		r.elapsed[c] = total
	}
	r.elapsed[CheckShutdown] = r.shutdownMax

	rep := &Report{Action: r.a.Name, Conformant: true}
	for _, c := range Checks {
		ck := Check{Name: c.Name, Elapsed: r.elapsed[c.Name], Ran: true}
		switch fails := r.fails[c.Name]; {
		case len(fails) > 0:
			ck.Detail = fails[0]
			if len(fails) > 1 {
				ck.Detail += fmt.Sprintf(" (and %d more)", len(fails)-1)
			}
		case r.notRun != "" && !observer(c.Name):
			ck.Ran, ck.Detail = false, "not checked: "+r.notRun
		case c.Name == CheckShutdown && r.shutdowns == 0:
			ck.Ran, ck.Detail = false, "not checked: no conversation reached shutdown (see the failures above)"
		case r.pass[c.Name] == "":
			ck.Ran, ck.Detail = false, "not checked: another check's fault ended its conversation (see the failures above)"
		default:
			ck.Pass = true
			ck.Detail = r.pass[c.Name]
		}
		if !ck.Pass {
			rep.Conformant = false
		}
		rep.Checks = append(rep.Checks, ck)
	}
	return rep
}

// observer reports whether a check watches every conversation rather than running its own.
func observer(name string) bool {
	switch name {
	case CheckReady, CheckFraming, CheckStdout, CheckSilence, CheckOutputs, CheckStderr:
		return true
	}
	return false
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
