package stdio_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
)

// TestDecodeMessageRule: each line DecodeMessage refuses is a *stdio.ProtocolError naming the
// rule it breaks and keeping the start of the line, matching ErrProtocol; every rule has a fix.
func TestDecodeMessageRule(t *testing.T) {
	long := `{"type":"emit","payload":"` + strings.Repeat("x", 1000) + `"}`
	tests := []struct {
		line string
		rule stdio.Rule
	}{
		{``, stdio.RuleEmptyLine},
		{`debug: got dl-1`, stdio.RuleNotObject},
		{`[1,2]`, stdio.RuleNotObject},
		{`{"type":"done","delivery":dl-x}`, stdio.RuleInvalidJSON},
		{`{"type":"done"} trailing`, stdio.RuleInvalidJSON},
		{`{"type":7}`, stdio.RuleBadField},
		{"{\"type\":\"done\",\"delivery\":\"\xff\"}", stdio.RuleNotUTF8},
		{`{"delivery":"d1"}`, stdio.RuleNoType},
		{`{"type":"launch"}`, stdio.RuleUnknownType},
		{long[:len(long)-1], stdio.RuleInvalidJSON},
	}
	for _, tt := range tests {
		var m stdio.Message
		err := stdio.DecodeMessage([]byte(tt.line), &m)
		var pe *stdio.ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, stdio.ErrProtocol) {
			t.Errorf("DecodeMessage(%.40q) = %v; want a *stdio.ProtocolError matching ErrProtocol", tt.line, err)
			continue
		}
		if pe.Rule != tt.rule {
			t.Errorf("DecodeMessage(%.40q).Rule = %s; want %s", tt.line, pe.Rule, tt.rule)
		}
		if tt.line != "" && !strings.HasPrefix(tt.line, string(pe.Line)) || len(pe.Line) > 256 || tt.line != "" && len(pe.Line) == 0 {
			t.Errorf("DecodeMessage(%.40q).Line = %.40q (%d bytes); want the line's start, at most 256 bytes", tt.line, pe.Line, len(pe.Line))
		}
		if strings.HasPrefix(pe.Rule.Fix(), "follow the action protocol") {
			t.Errorf("Rule(%s).Fix() = %q; want advice for the rule", pe.Rule, pe.Rule.Fix())
		}
	}
}

// TestLineTooLongRule: an over-long line is a ProtocolError of RuleLineTooLong that also
// matches ErrLineTooLong.
func TestLineTooLongRule(t *testing.T) {
	lr := stdio.NewLineReader(strings.NewReader(strings.Repeat("y", 100)+"\n"), 10)
	_, err := lr.ReadLine()
	var pe *stdio.ProtocolError
	if !errors.As(err, &pe) || pe.Rule != stdio.RuleLineTooLong || !errors.Is(err, stdio.ErrLineTooLong) || !errors.Is(err, stdio.ErrProtocol) {
		t.Fatalf("ReadLine() = %v; want a ProtocolError of %s matching ErrLineTooLong and ErrProtocol", err, stdio.RuleLineTooLong)
	}
}

// TestBatchRule: an envelope that breaks its own rules is a ProtocolError of
// RuleMalformedBatch matching ErrMalformedBatch; a message in it that DecodeMessage would refuse
// keeps its own rule and matches ErrMalformedBatch too.
func TestBatchRule(t *testing.T) {
	_, err := stdio.SplitBatch([]byte(`{"type":"batch"}`), func([]byte) error { return nil })
	var pe *stdio.ProtocolError
	if !errors.As(err, &pe) || pe.Rule != stdio.RuleMalformedBatch || !errors.Is(err, stdio.ErrMalformedBatch) || !errors.Is(err, stdio.ErrProtocol) {
		t.Errorf("SplitBatch(no messages) = %v; want a ProtocolError of %s matching ErrMalformedBatch", err, stdio.RuleMalformedBatch)
	}
	var m stdio.Message
	err = stdio.DecodeInBatch([]byte(`{"type":"done","delivery":dl-x}`), &m)
	if !errors.As(err, &pe) || pe.Rule != stdio.RuleInvalidJSON || !errors.Is(err, stdio.ErrMalformedBatch) {
		t.Errorf("DecodeInBatch(invalid JSON) = %v; want a ProtocolError of %s matching ErrMalformedBatch", err, stdio.RuleInvalidJSON)
	}
}
