package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// helloState is hello's "state" for inlets, as the engine writes it; nil when none.
func helloState(inlets map[string]engine.StateLimits) json.RawMessage {
	if len(inlets) == 0 {
		return nil
	}
	m := map[string]stdio.StateInlet{}
	for name, l := range inlets {
		m[name] = l.Hello()
	}
	b, _ := json.Marshal(m) // strings and ints only: it cannot fail
	return b
}

// stateMessage charges the state check with a state message that the engine refuses
// whatever its delivery: from an action that did not declare state, or without "state".
func (s *session) stateMessage(m *stdio.Message, raw []byte) {
	switch {
	case !s.state:
		s.r.fail(checkState, fmt.Sprintf(`a state message from an action that did not declare "state": true in ready: %s; declare it in ready ({"type":"ready","state":true}) to stage state, or send no state messages (the engine stops the process on it)`, quote(raw)))
	case m.State == nil:
		s.r.fail(checkState, fmt.Sprintf(`a state message without "state": %s; a state message carries "state": the new state, or null to delete it`, quote(raw)))
	}
}

// stateValues are the states the check's items carry, one of each JSON type, and none.
func stateValues(limit int) []json.RawMessage {
	pad := max(min(60<<10, limit-64)-12, 0) // 60 KiB, or what the limit leaves

	return []json.RawMessage{
		json.RawMessage(`{"n":1,"seen":["a","b"],"nested":{"x":null}}`),
		json.RawMessage(`[1,"two",{"three":3}]`),
		json.RawMessage(`"a string state"`),
		json.RawMessage(`-12.5e3`),
		json.RawMessage(`true`),
		json.RawMessage(strings.Repeat(`[`, 64) + `1` + strings.Repeat(`]`, 64)),
		json.RawMessage(`{"text":"` + marker + `clé-ключ-键-🔑 naïve café"}`),
		json.RawMessage(`{"pad":"` + strings.Repeat("s", pad) + `"}`),
		nil,
	}
}

// stateCheck: for an action that declares "state": true, in a conversation whose hello names
// its inlets that keep state (the first inlet when the line names none: then only for an
// action whose ready declared state in the main conversation, since a stateless action never
// gets a hello that names state in production), items of one key with
// a state of every JSON type and with none, then that key three times, each time with the
// state it staged the time before, then a keyless item: all must be answered, no state staged
// for the keyless one nor over the limit. The state messages of every conversation are judged
// as they come (stateMessage, and a state after its answer).
func (r *runner) stateCheck() {
	t0 := time.Now()
	inlets := r.a.State
	if len(inlets) == 0 {
		inlets = map[string]engine.StateLimits{r.a.inlet(): {}}
	}
	names := make([]string, 0, len(inlets))
	for n := range inlets {
		names = append(names, n)
	}
	sort.Strings(names)
	inlet, max := names[0], inlets[names[0]].Hello().MaxBytes
	if !r.awaitMain(checkState, nil, false) {
		return
	}
	if len(r.a.State) == 0 && !r.mainState {
		r.passed(checkState, `does not apply: the action does not declare "state": true in ready`, time.Since(t0))
		return
	}
	s := r.openState(checkState, r.a.Config, "", inlets)
	if !s.ok() {
		return
	}
	if !s.state {
		s.finish()
		if len(r.a.State) > 0 {
			r.fail(checkState, fmt.Sprintf(`the action line keeps state for inlet %s (--state %s) but ready does not declare "state": true: use an SDK that keeps state, or add "state":true to the ready line (the engine refuses such a process at start)`, inlet, inlet))
			return
		}
		r.passed(checkState, `does not apply: the action does not declare "state": true in ready`, time.Since(t0))
		return
	}
	ex := r.exemplar()
	key := marker + "state-key"
	ex.Inlet, ex.Key, ex.KeyBase64 = inlet, &key, ""
	n := 0
	deliver := func(it stdio.Item) *delivery {
		d := s.deliver(-1, it, checkState)
		if d == nil || d.answer == nil {
			return nil
		}
		n++
		s.checkStaged(d, max)
		return d
	}
	for i, v := range stateValues(max) {
		it := r.variant(ex, 40000+i)
		it.State = v
		if deliver(it) == nil {
			s.finish()
			return
		}
	}
	state := json.RawMessage(`{"conformance":0}`)
	for i := range 3 {
		it := r.variant(ex, 40100+i)
		it.State = state
		d := deliver(it)
		if d == nil {
			s.finish()
			return
		}
		if k := len(d.states); k > 0 && d.outcome() == stdio.TypeDone {
			state = d.states[k-1].State
			if string(bytes.TrimSpace(state)) == "null" {
				state = nil
			}
		}
	}
	keyless := r.variant(ex, 40200)
	keyless.Key, keyless.KeyBase64 = nil, ""
	d := deliver(keyless)
	if d == nil {
		s.finish()
		return
	}
	if len(d.states) > 0 && d.outcome() == stdio.TypeDone {
		r.fail(checkState, fmt.Sprintf("a state staged for keyless item %s: a state lives under a key, so the engine fails such an item for good; stage no state for an item without a key", keyless.ID))
	}
	s.finish()
	r.passed(checkState, fmt.Sprintf("%s answered: states of every JSON type (up to %s) and none, one key fed its own state three times, a keyless item", plural(n, "item", "items"), sizeName(len(stateValues(max)[7]))), time.Since(t0))
}

// checkStaged charges the state check with a state d staged over the limit hello names.
func (s *session) checkStaged(d *delivery, max int) {
	for _, m := range d.states {
		if v := bytes.TrimSpace(m.State); len(v) > max && d.outcome() == stdio.TypeDone {
			s.r.fail(checkState, fmt.Sprintf("a state of %d bytes staged for item %s, over the %d bytes hello names (state.%s.maxBytes): keep less per key (the engine fails such an item for good)", len(v), d.item.ID, max, d.item.Inlet))
		}
	}
}
