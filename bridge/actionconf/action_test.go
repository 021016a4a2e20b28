package actionconf_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{``, nil},
		{`a b  c`, []string{"a", "b", "c"}},
		{"a\tb\r\nc", []string{"a", "b", "c"}},
		{`'a b' "c d"`, []string{"a b", "c d"}},
		{`'it''s'`, []string{"its"}},
		{`'a\b'`, []string{`a\b`}},
		{`"a\"b\\c\d"`, []string{`a"b\c\d`}},
		{`a\ b`, []string{"a b"}},
		{`a"b c"d'e'`, []string{"ab cde"}},
		{`'' ""`, []string{"", ""}},
		{"a \\\nb", []string{"a", "b"}},
		{"a\\\nb", []string{"ab"}},
		{"# comment\na # another\nb#c", []string{"a", "b#c"}},
		{`$HOME ~ *`, []string{"$HOME", "~", "*"}},
		{`sh -c 'echo "$1"'`, []string{"sh", "-c", `echo "$1"`}},
		{"'line\none'", []string{"line\none"}},
	}
	for _, tt := range tests {
		got, err := actionconf.Split(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSplitErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`a 'b`, "line 1: the quote ' opened there is never closed"},
		{"a\n\"b", `line 2: the quote " opened there is never closed`},
		{`a \`, "line 1 ends in a lone backslash"},
	}
	for _, tt := range tests {
		_, err := actionconf.Split(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, actionconf.ErrConfig) {
			t.Errorf("Split(%q) = %v; want an ErrConfig containing %q", tt.in, err, tt.want)
		}
	}
}

func TestJoinRoundTrip(t *testing.T) {
	words := []string{"", "plain", "a b", "it's", `back\slash`, `"dq"`, "#hash", "new\nline", "$x", "tab\t"}
	line := actionconf.Join(words)
	got, err := actionconf.Split(line)
	if err != nil || !reflect.DeepEqual(got, words) {
		t.Errorf("Split(Join(%q)) = %q, %v; want the same words (line %s)", words, got, err, line)
	}
}

const example = `score-listing --in listings=listing.v1 --out scores=score.v1 --out rejects=listing.v1 \
  --param min-rooms:integer=2 --param city:string --dead-letter rejects -- python3 score.py`

func TestParseStringExample(t *testing.T) {
	a, err := actionconf.ParseString(example)
	if err != nil {
		t.Fatal(err)
	}
	want := &actionconf.Action{
		Name:         "score-listing",
		Inlets:       []actionconf.Port{{Name: "listings", Schema: "listing.v1"}},
		Outlets:      []actionconf.Port{{Name: "scores", Schema: "score.v1"}, {Name: "rejects", Schema: "listing.v1"}},
		Params:       []actionconf.Param{{Key: "min-rooms", Type: flowv1.ConfigType_INTEGER, Default: "2"}, {Key: "city", Type: flowv1.ConfigType_STRING}},
		Concurrency:  1,
		Timeout:      actionconf.DefaultTimeout,
		ReadyTimeout: actionconf.DefaultReadyTimeout,
		Retries:      actionconf.DefaultRetries,
		DeadLetter:   "rejects",
		Command:      []string{"python3", "score.py"},
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("ParseString(example) = %+v; want %+v", a, want)
	}
	spec := a.Spec("1.2.3")
	if probs := protocol.Validate(spec); len(probs) > 0 {
		t.Errorf("Validate(Spec) = %v; want no problem", probs)
	}
	d := spec.GetStreamlet()
	if got, want := d.GetOutlets()[1].GetContract().GetFingerprint(), protocol.Fingerprint("listing.v1"); got != want {
		t.Errorf("fingerprint of rejects = %q; want %q", got, want)
	}
	if spec.GetProtocolVersion() != protocol.BaseVersion || spec.GetSdk().GetName() != "millrace" || spec.GetSdk().GetVersion() != "1.2.3" {
		t.Errorf("Spec = %v; want protocol %s (it keeps no state), sdk millrace 1.2.3", spec, protocol.BaseVersion)
	}
	// The canonical line reads back into the same action.
	b, err := actionconf.ParseString(a.Line())
	if err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("ParseString(Line()) = %+v, %v; want %+v (line %s)", b, err, a, a.Line())
	}
}

func TestParseLineFlags(t *testing.T) {
	line := []string{"x", "--in=a=s.v1", "--out", "b=t.v1", "--out", "c=t.v1", "--concurrency", "4", "--timeout=5s",
		"--ready-timeout", "2s", "--window", "8", "--retries=0", "--fallback", "c", "--effects", "external",
		"--description", "does x = y", "--metrics", ":9090", "--", "./x", "--in", "--"}
	a, err := actionconf.ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if a.Concurrency != 4 || a.Timeout != 5*time.Second || a.ReadyTimeout != 2*time.Second || a.Window != 8 ||
		a.Retries != 0 || a.Fallback != "c" || !a.External || a.Description != "does x = y" || a.Metrics != ":9090" ||
		!reflect.DeepEqual(a.Command, []string{"./x", "--in", "--"}) {
		t.Errorf("ParseLine(%q) = %+v", line, a)
	}
	b, err := actionconf.ParseString(a.Line())
	if err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("ParseString(Line()) = %+v, %v; want %+v", b, err, a)
	}
	p, err := actionconf.ParseLine([]string{"y", "--in", "a=s", "--per-item", "--", "cat"})
	if err != nil || !p.PerItem {
		t.Errorf("ParseLine(--per-item) = %+v, %v; want PerItem", p, err)
	}
}

func TestParseLineErrors(t *testing.T) {
	tests := []struct {
		line string
		word int // the word the error names, from 1; 0 for the whole line
		want string
	}{
		{``, 0, "no streamlet line"},
		{`--in a=b -- x`, 1, "expected the streamlet name first"},
		{`Score -- x`, 1, "a streamlet name is 1 to 63 characters"},
		{`s --in a=b`, 0, "no command"},
		{`s --in a=b --`, 4, "expected the command after --"},
		{`s -- x`, 1, "declares no inlet"},
		{`s --in -- x`, 2, "--in expects PORT=SCHEMA"},
		{`s --in a -- x`, 3, "--in expects PORT=SCHEMA"},
		{`s --in A=b -- x`, 3, `port name "A"`},
		{`s --in a=b --out a=c -- x`, 5, `port "a" is declared twice (first in word 3)`},
		{`s --in a=b --param k -- x`, 5, "--param expects KEY:TYPE[=DEFAULT]"},
		{`s --in a=b --param K:string -- x`, 5, `parameter key "K"`},
		{`s --in a=b --param k:int -- x`, 5, `parameter type "int": expected string, integer`},
		{`s --in a=b --param k:integer=two -- x`, 5, `default "two" of parameter "k" is not a valid integer`},
		{`s --in a=b --param k:string= -- x`, 5, `empty default`},
		{`s --in a=b --param k:string --param k:integer -- x`, 7, `parameter "k" is declared twice`},
		{`s --in a=b --concurrency 0 -- x`, 5, "--concurrency expects a whole number from 1"},
		{`s --in a=b --retries -1 -- x`, 5, "--retries expects a whole number from 0"},
		{`s --in a=b --retries 1 --retries 2 -- x`, 6, "--retries is given twice (first as word 4)"},
		{`s --in a=b --timeout 5 -- x`, 5, "--timeout expects a positive duration"},
		{`s --in a=b --ready-timeout 0s -- x`, 5, "--ready-timeout expects a positive duration"},
		{`s --in a=b --per-item=yes -- x`, 4, "--per-item takes no value"},
		{`s --in a=b --dead-letter dl -- x`, 5, "--dead-letter names no outlet"},
		{`s --in a=b --out o=c --fallback f -- x`, 7, "--fallback names no outlet: declare it with --out f=SCHEMA, or name one of o"},
		{`s --in a=b --effects some -- x`, 5, "--effects expects external"},
		{`s --in a=b --metrics nowhere -- x`, 5, "--metrics expects HOST:PORT"},
		{`s --in a=b --colour red -- x`, 4, "unknown flag"},
		{`s --in a=b python3 x.py`, 4, "expected a flag or -- before the command"},
		{`s --in a=b --per-item --window 4 -- x`, 5, "--window has no use with --per-item"},
		{`s --in a=b --state -- x`, 4, "--state expects PORT[,ttl=DURATION][,max-bytes=SIZE]"},
		{`s --in a=b --state ,ttl=1h -- x`, 5, "--state expects PORT"},
		{`s --in a=b --state c -- x`, 5, "--state names no inlet: declare it with --in c=SCHEMA, or name one of a"},
		{`s --in a=b --out o=b --state o -- x`, 7, `--state names outlet "o": state is kept per key of an inlet's records; name one of the inlets a`},
		{`s --in a=b --state a --in c=d --state a,ttl=1h -- x`, 9, `inlet "a" keeps state twice (first in word 5)`},
		{`s --state a,ttl=1h --in a=b --state=a -- x`, 6, `inlet "a" keeps state twice (first in word 3)`},
		{`s --in events=b --state events,ttl=5 -- x`, 5, `word 5 "events,ttl=5": ttl: "5" is not a duration (write e.g. 24h)`},
		{`s --in a=b --state a,ttl=500ms -- x`, 5, "ttl: 500ms is under 1s"},
		{`s --in a=b --state a,ttl=0s -- x`, 5, "ttl: 0s is under 1s"},
		{`s --in a=b --state a,ttl=-1h -- x`, 5, "ttl: -1h is under 1s"},
		{`s --in a=b --state a,ttl=1h,ttl=2h -- x`, 5, "ttl is given twice in one --state word"},
		{`s --in a=b --state a,max-bytes=0 -- x`, 5, "max-bytes: 0 is out of range: a state may be from 1 byte to 1Mi"},
		{`s --in a=b --state a,max-bytes=2Mi -- x`, 5, "max-bytes: 2Mi is out of range"},
		{`s --in a=b --state a,max-bytes=1048577 -- x`, 5, "max-bytes: 1048577 is out of range"},
		{`s --in a=b --state a,max-bytes=lots -- x`, 5, `max-bytes: "lots" is not a size (write e.g. 64Ki)`},
		{`s --in a=b --state a,max-bytes=1Ki,max-bytes=2Ki -- x`, 5, "max-bytes is given twice"},
		{`s --in a=b --state a,size=1Ki -- x`, 5, `unknown option "size=1Ki" of --state: expected ttl=DURATION or max-bytes=SIZE`},
		{`s --in a=b --state a,ttl -- x`, 5, `unknown option "ttl" of --state`},
		{`s --in a=b --state a, -- x`, 5, `unknown option "" of --state`},
		{"s --in a=b -- x\nt --in a=b -- x", 0, "2 lines (starting on lines 1 and 2)"},
		{"# only a comment\n", 0, "no streamlet line"},
	}
	for _, tt := range tests {
		_, err := actionconf.ParseString(tt.line)
		var le *actionconf.LineError
		if !errors.As(err, &le) || !errors.Is(err, actionconf.ErrConfig) {
			t.Errorf("ParseString(%q) = %v; want a *LineError", tt.line, err)
			continue
		}
		if le.Index+1 != tt.word || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseString(%q) = %v (word %d); want word %d and %q", tt.line, err, le.Index+1, tt.word, tt.want)
		}
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "action.conf")
	conf := "# the score-listing action\n\n" + example + "\n# end\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := actionconf.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir != dir || a.Name != "score-listing" {
		t.Errorf("ParseFile(%s) = Dir %q, Name %q; want %q, score-listing", path, a.Dir, a.Name, dir)
	}
	if err := os.WriteFile(path, []byte("s --in a=b --colour -- x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := actionconf.ParseFile(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `word 4 "--colour"`) {
		t.Errorf("ParseFile(bad) = %v; want the path and the word", err)
	}
	if _, err := actionconf.ParseFile(filepath.Join(dir, "missing.conf")); err == nil {
		t.Errorf("ParseFile(missing) = nil; want an error")
	}
}

// TestExampleActions: every action directory of the repository has a config line the bridge
// accepts.
func TestExampleActions(t *testing.T) {
	confs, err := filepath.Glob("../../actions/*/action.conf")
	if err != nil || len(confs) == 0 {
		t.Fatalf("Glob(../../actions/*/action.conf) = %v, %v; want the example actions", confs, err)
	}
	for _, c := range confs {
		if _, err := actionconf.ParseFile(c); err != nil {
			t.Errorf("ParseFile(%s) = %v", c, err)
		}
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if _, err := actionconf.FromEnv(getenv); !errors.Is(err, actionconf.ErrNoConfig) {
		t.Errorf("FromEnv(unset) = %v; want ErrNoConfig", err)
	}
	env[actionconf.EnvAction] = `echo --in in=x.v1 --out out=x.v1 -- 'my prog' arg`
	a, err := actionconf.FromEnv(getenv)
	if err != nil || !reflect.DeepEqual(a.Command, []string{"my prog", "arg"}) {
		t.Errorf("FromEnv = %+v, %v; want command [my prog arg]", a, err)
	}
	env[actionconf.EnvAction] = `echo --in`
	if _, err := actionconf.FromEnv(getenv); err == nil || !strings.Contains(err.Error(), actionconf.EnvAction) {
		t.Errorf("FromEnv(bad) = %v; want an error naming %s", err, actionconf.EnvAction)
	}
}

// FuzzSplit checks that Split never panics, that every word it returns survives Join and Split
// again, and that what it accepts parses or is refused with a LineError.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{example, `a 'b c' "d\"e"`, "a\\\nb # c", `''`, `"\\"`, "x --in a=b -- y", "x --in a=b --state a,ttl=2h,max-bytes=1Ki -- y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := actionconf.Split(s)
		if err != nil {
			if !errors.Is(err, actionconf.ErrConfig) {
				t.Fatalf("Split(%q) = %v; want an ErrConfig", s, err)
			}
			return
		}
		again, err := actionconf.Split(actionconf.Join(words))
		if err != nil || !reflect.DeepEqual(again, words) && len(words)+len(again) > 0 {
			t.Fatalf("Split(Join(%q)) = %q, %v; want the same words", words, again, err)
		}
		a, err := actionconf.ParseLine(words)
		if err != nil {
			var le *actionconf.LineError
			if !errors.As(err, &le) || le.Index >= len(words) || (le.Index >= 0 && le.Word != words[le.Index]) {
				t.Fatalf("ParseLine(%q) = %v; want a LineError naming one of the words", words, err)
			}
			return
		}
		if probs := protocol.Validate(a.Spec("v")); len(probs) > 0 {
			t.Fatalf("Validate(ParseLine(%q)) = %v; want none", words, probs)
		}
		b, err := actionconf.ParseString(a.Line())
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("ParseString(Line()) = %+v, %v; want %+v", b, err, a)
		}
	})
}
