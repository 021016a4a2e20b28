package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/protocol"
)

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		theirs string
		ok     bool
		says   []string // the refusal names these
	}{
		{"1.0", true, nil},
		{"1.1", true, nil},
		{"1.2", false, []string{"1.2", "1.1", "later", "upgrade the sidecar"}},
		{"0.9", false, []string{"0.9", "1.1", "major"}},
		{"2.0", false, []string{"2.0", "1.1", "major"}},
		{"", false, []string{`""`, "MAJOR.MINOR", "1.1", "fix the protocol_version"}},
		{"1", false, []string{`"1"`, "MAJOR.MINOR"}},
		{"1.0.0", false, []string{`"1.0.0"`, "MAJOR.MINOR"}},
		{"v1.0", false, []string{`"v1.0"`}},
		{"01.0", false, []string{`"01.0"`}},
		{"1.00", false, []string{`"1.00"`}},
		{" 1.0", false, []string{`" 1.0"`}},
		{"1.-1", false, []string{`"1.-1"`}},
		{"99999999999999999999.0", false, []string{"MAJOR.MINOR"}},
	}
	for _, tt := range tests {
		err := protocol.CheckVersion(tt.theirs)
		if tt.ok {
			if err != nil {
				t.Errorf("CheckVersion(%q) = %v; want nil", tt.theirs, err)
			}
			continue
		}
		if !errors.Is(err, protocol.ErrVersion) {
			t.Errorf("CheckVersion(%q) = %v; want an error wrapping ErrVersion", tt.theirs, err)
			continue
		}
		for _, s := range tt.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("CheckVersion(%q) = %q; want it to contain %q", tt.theirs, err, s)
			}
		}
	}
}

func TestCheckVersionAgainst(t *testing.T) {
	tests := []struct {
		ours, theirs string
		ok           bool
	}{
		{"1.2", "1.0", true},
		{"1.2", "1.2", true},
		{"1.2", "1.3", false},
		{"0.0", "0.0", true},
		{"10.10", "10.9", true},
		{"10.9", "10.10", false}, // numbers, not strings
		{"1", "1.0", false},      // a malformed ours is refused too
	}
	for _, tt := range tests {
		err := protocol.CheckVersionAgainst(tt.ours, tt.theirs)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, protocol.ErrVersion)) {
			t.Errorf("CheckVersionAgainst(%q, %q) = %v; want accepted %v", tt.ours, tt.theirs, err, tt.ok)
		}
	}
}

func TestProblems(t *testing.T) {
	ps := protocol.Problems{
		{Path: "outlets[1].contract.fingerprint", Message: "wrong"},
		{Message: "whole"},
	}
	if got, want := ps.Error(), "outlets[1].contract.fingerprint: wrong\nwhole"; got != want {
		t.Errorf("Problems.Error() = %q; want %q", got, want)
	}
	if err := ps.Err(); err == nil {
		t.Errorf("Problems.Err() = nil; want the problems")
	}
	if err := protocol.Problems(nil).Err(); err != nil {
		t.Errorf("Problems(nil).Err() = %v; want nil", err)
	}
	var as protocol.Problems
	if !errors.As(ps.Err(), &as) || len(as) != 2 {
		t.Errorf("errors.As(Problems.Err()) = %v; want the two problems", as)
	}
}

func TestVersionKeepsState(t *testing.T) {
	for _, tt := range []struct {
		version   string
		keeps, ok bool
	}{
		{"1.0", false, true},
		{"1.1", true, true},
		{"1.12", true, true},
		{"2.0", false, false},
		{"2.1", false, false},
		{"0.1", false, false},
		{"1.0.0", false, false},
		{"", false, false},
	} {
		keeps, ok := protocol.VersionKeepsState(tt.version)
		if keeps != tt.keeps || ok != tt.ok {
			t.Errorf("VersionKeepsState(%q) = %v, %v; want %v, %v", tt.version, keeps, ok, tt.keeps, tt.ok)
		}
	}
}
