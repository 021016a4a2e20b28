package engine

import (
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/internal/errtext"

	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/goccy/go-json"
)

// DefaultStateMaxBytes is the most one state may be when StateLimits.MaxValueBytes is 0, and
// MaxStateBytes the most it may ever be (--state PORT,max-bytes=SIZE).
const (
	DefaultStateMaxBytes = 64 << 10
	MaxStateBytes        = 1 << 20
)

// StateLimits are one stateful inlet's limits, from its --state word and the changelog.
type StateLimits struct {
	TTL            time.Duration // for hello only: the sidecar expires states (0: never)
	MaxValueBytes  int           // a state's JSON (0: DefaultStateMaxBytes)
	MaxRecordBytes int           // key and state together, as the changelog record (0: no bound)
}

func (l StateLimits) maxValue() int {
	if l.MaxValueBytes <= 0 {
		return DefaultStateMaxBytes
	}
	return l.MaxValueBytes
}

// Hello is what hello's "state" says of an inlet with these limits: its max-bytes (the
// default filled in) and its TTL, if any. A host that writes its own hello (the conformance
// kit) takes it from here, so that it says what the engine says.
func (l StateLimits) Hello() stdio.StateInlet {
	in := stdio.StateInlet{MaxBytes: l.maxValue()}
	if l.TTL > 0 {
		in.TTL = l.TTL.String()
	}
	return in
}

// SubmitOption changes how SubmitBatch runs its items.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	stateOf func(i int) json.RawMessage
}

// WithState gives the items of one SubmitBatch their state: stateOf(i) is the state an
// attempt of keyed item i sees (nil: none), which replaces the item's State. The pool calls it
// as it writes the attempt, after the previous item of the key in Submit order has its final
// Result and its done callback has returned, so a state the caller recorded in done is seen;
// a retry calls it again. It is never called for a keyless item. It must not block, and must
// return a JSON value (null and nothing mean none).
func WithState(stateOf func(i int) json.RawMessage) SubmitOption {
	return func(o *submitOptions) { o.stateOf = stateOf }
}

// helloState is hello's "state": one member per stateful inlet; nil when none.
func helloState(inlets map[string]StateLimits) json.RawMessage {
	if len(inlets) == 0 {
		return nil
	}
	m := make(map[string]stdio.StateInlet, len(inlets))
	for name, l := range inlets {
		m[name] = l.Hello()
	}
	b, _ := json.Marshal(m) // strings and ints only: it cannot fail
	return b
}

// readyState checks what a ready line says of state against the pool's config: a pool that
// keeps state needs a process that declared it.
func (p *Pool) readyState(m *stdio.Message, line []byte) (bool, error) {
	switch v := string(bytes.TrimSpace(m.State)); v {
	case "", "false", "true":
	default:
		return false, stdio.NewProtocolError(stdio.RuleBadField, line, `a ready line whose "state" is not a boolean (true: the action keeps state)`)
	}
	declared := m.DeclaresState()
	if len(p.cfg.State) > 0 && !declared {
		port := ""
		for name := range p.cfg.State {
			if port == "" || name < port {
				port = name
			}
		}
		return false, fmt.Errorf(`%w, but the action line keeps state for inlet %s (--state %s): use an SDK that keeps state, or add "state":true to the ready line`, ErrStateUndeclared, port, port)
	}
	return declared, nil
}

// readState sets the state of t's next attempt from its batch's hook.
func (t *task) readState() {
	if t.stateOf == nil || !t.keyed {
		return
	}
	v := bytes.TrimSpace(t.stateOf(t.index))
	switch {
	case len(v) == 0 || string(v) == "null":
		v = nil
	case bytes.IndexByte(v, '\n') >= 0:
		var b bytes.Buffer
		if json.Compact(&b, v) == nil {
			v = b.Bytes()
		}
	}
	t.item.State = v
}

// stageStateLocked stages the state message line (its "state" raw, nil when missing) for t
// and unlocks pr.mu.
func (pr *process) stageStateLocked(t *task, line, raw []byte) error {
	if !pr.state {
		pr.mu.Unlock()
		return stdio.NewProtocolError(stdio.RuleUndeclaredState, line, `a state message from an action that did not declare "state": true in its ready line (declare it there to stage state, or send no state messages)`)
	}
	if err := pr.stagedLocked(t, line); err != nil {
		pr.mu.Unlock()
		return err
	}
	switch raw = bytes.TrimSpace(raw); {
	case raw == nil:
		t.stateErr = fmt.Errorf(`%w: delivery %s wrote a state message without "state": a state message carries "state": the new state, or null to delete it`, ErrState, t.item.Delivery)
	case string(raw) == "null":
		t.state = &stdio.StagedState{}
	default:
		t.state = &stdio.StagedState{Value: append(json.RawMessage(nil), raw...)}
	}
	pr.mu.Unlock()
	return nil
}

// checkState says why the state t staged cannot be kept, or nil. A delivery done with such
// a state fails for good: the same input would stage the same state.
func (p *Pool) checkState(t *task) error {
	if t.stateErr != nil || t.state == nil {
		return t.stateErr
	}
	it := t.item
	if !t.keyed {
		return fmt.Errorf("%w: item %s has no key, so it has no state: a state message is only for keyed records (route keyless ones elsewhere, or stage no state for them)", ErrState, it.ID)
	}
	lim, ok := p.cfg.State[it.Inlet]
	if !ok {
		return fmt.Errorf("%w: inlet %s keeps no state: add --state %s to the action line, or stage no state for its items", ErrState, it.Inlet, it.Inlet)
	}
	v := t.state.Value
	if v == nil {
		return nil
	}
	key, keyLen := it.KeyBase64, 0
	if it.Key != nil {
		key, keyLen = *it.Key, len(*it.Key)
	} else if b, err := base64.StdEncoding.DecodeString(it.KeyBase64); err == nil {
		keyLen = len(b)
	}
	if max := lim.maxValue(); len(v) > max {
		return fmt.Errorf("%w: the state staged for key %q is %s bytes, over max-bytes %s (--state %s,max-bytes=…): keep less per key, or raise max-bytes (at most %s)", ErrState, key, thousands(len(v)), sizeText(max), it.Inlet, sizeText(MaxStateBytes))
	}
	if lim.MaxRecordBytes > 0 && keyLen+len(v) > lim.MaxRecordBytes {
		return fmt.Errorf("%w: the state staged for key %q is %s bytes, and with its %s-byte key over the %s a changelog record of inlet %s may be: keep less per key, or raise the changelog topic's max.message.bytes", ErrState, key, thousands(len(v)), thousands(keyLen), sizeText(lim.MaxRecordBytes), it.Inlet)
	}
	return nil
}

// sizeText names a limit as the --state word writes it: "64 KiB", else as errtext.Size does.
func sizeText(n int) string {
	if n%(1<<20) != 0 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + " KiB"
	}
	return errtext.Size(n)
}

// thousands writes n with a comma between each three digits, as a person reads a byte count.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
