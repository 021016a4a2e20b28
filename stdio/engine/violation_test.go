package engine_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestProtocolViolationHook: every line that breaks the protocol is reported to
// Hooks.ProtocolViolation before its process is killed, as a *stdio.ProtocolError naming the
// rule and quoting the line, charged to the delivery in flight; the attempt's error carries the
// same value.
func TestProtocolViolationHook(t *testing.T) {
	tests := []struct {
		mode string
		rule stdio.Rule
		line string // the start of the offending line kept ("" when no line is at fault)
	}{
		{"badutf8", stdio.RuleNotUTF8, "{\"type\":\"done\",\"delivery\":\"\xff\xfe\"}"},
		{"nonobject", stdio.RuleNotObject, "[1,2,3]"},
		{"wrongdelivery", stdio.RuleNotInFlight, `{"type":"done","delivery":"dl_someone_else"}`},
		{"nonewline", stdio.RuleNoNewline, `{"type":"done","delivery":"`},
		{"chatty", stdio.RuleStagedTooMuch, ""},
		{"batchundeclared", stdio.RuleUndeclaredBatch, `{"type":"batch"`},
	}
	type report struct {
		pid  int
		item string
		err  error
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			var mu sync.Mutex
			var got []report
			p := start(t, config(tt.mode, func(c *engine.Config) {
				c.Retries = 1
				c.MaxStagedBytes = 50000
				c.Hooks.ProtocolViolation = func(pid int, it *stdio.Item, err error) {
					mu.Lock()
					defer mu.Unlock()
					r := report{pid: pid, err: err}
					if it != nil {
						r.item = it.ID
					}
					got = append(got, r)
				}
			}))
			r := run(t, p, keyed("it-1", "k", `{"x":1}`))
			var pe *stdio.ProtocolError
			if !errors.As(r.Err, &pe) || pe.Rule != tt.rule || !errors.Is(r.Err, stdio.ErrProtocol) {
				t.Fatalf("result err = %v; want a *stdio.ProtocolError of rule %s matching ErrProtocol", r.Err, tt.rule)
			}
			if tt.line == "" && pe.Line != nil || tt.line != "" && (len(pe.Line) < len(tt.line) || string(pe.Line[:len(tt.line)]) != tt.line) {
				t.Errorf("ProtocolError.Line = %q; want it to start %q", pe.Line, tt.line)
			}
			if pe.Rule.Fix() == "" {
				t.Errorf("Rule(%s).Fix() = \"\"; want advice", pe.Rule)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 {
				t.Fatalf("ProtocolViolation called %d times; want once for each of the 2 attempts", len(got))
			}
			for _, g := range got {
				var ge *stdio.ProtocolError
				if g.item != "it-1" || g.pid <= 0 || !errors.As(g.err, &ge) || ge.Rule != tt.rule {
					t.Errorf("ProtocolViolation(%d, %q, %v); want the pid, item it-1 and rule %s", g.pid, g.item, g.err, tt.rule)
				}
			}
		})
	}
}
