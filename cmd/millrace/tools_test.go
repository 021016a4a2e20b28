package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code = dispatch(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

// TestDescribe: describe prints the canonical descriptor the bridge's discovery answers, from
// a directory, a config line, or to a file.
func TestDescribe(t *testing.T) {
	a, err := actionconf.ParseFile("../../actions/route-orders/action.conf")
	if err != nil {
		t.Fatal(err)
	}
	want, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "describe", "../../actions/route-orders"); code != 0 || out != string(want)+"\n" {
		t.Fatalf("describe route-orders = %d, %q (stderr %s); want 0, %s and a newline", code, out, errOut, want)
	}
	file := filepath.Join(t.TempDir(), "descriptor.json")
	if code, _, errOut := runCmd(t, "describe", "-o", file, "../../actions/route-orders/action.conf"); code != 0 {
		t.Fatalf("describe -o = %d (%s)", code, errOut)
	}
	if got, _ := os.ReadFile(file); !bytes.Equal(got, want) {
		t.Fatalf("describe -o wrote %s; want %s", got, want)
	}
	if code, out, _ := runCmd(t, "describe", "tiny --in a=a.v1 --out b=b.v1 -- cat"); code != 0 || !strings.Contains(out, `"name":"tiny"`) {
		t.Fatalf("describe LINE = %d, %s", code, out)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"describe"}, 2, "expected one action directory"},
		{[]string{"describe", "no-such-dir"}, 1, "is not an action directory"},
		{[]string{"describe", "x --in a=a.v1 --bogus -- cat"}, 1, `word 4 "--bogus": unknown flag`},
		{[]string{"test", "actions"}, 2, "expected: millrace test action DIR|LINE"},
		{[]string{"test", "action", "a", "b"}, 2, "expected one action directory"},
		{[]string{"init", "action", "x"}, 2, "--lang is required"},
	}
	for _, tt := range tests {
		code, _, errOut := runCmd(t, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("millrace %q = %d, %q; want %d and %q", tt.args, code, errOut, tt.code, tt.want)
		}
	}
}

// TestDescribeState: for a line with --state, describe's stdout is still the descriptor alone
// (1.1 when state is on) and its stderr names each changelog topic to create, compacted with
// the inlet's partitions, and the variable binding it; --group names them after the group.
func TestDescribeState(t *testing.T) {
	line := "count --in events=event.v1 --in clicks=click.v1 --out counts=count.v1 --state events,ttl=720h --state clicks -- python3 main.py"
	a, err := actionconf.ParseString(line)
	if err != nil {
		t.Fatal(err)
	}
	want, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "describe", line)
	if code != 0 || out != string(want)+"\n" {
		t.Fatalf("describe LINE = %d, %q (stderr %s); want 0 and the descriptor %s", code, out, errOut, want)
	}
	for _, w := range []string{
		"kafka-topics.sh --bootstrap-server BROKERS --create --topic PIPELINE.count.events.state --partitions N --config cleanup.policy=compact",
		"FLOW_INLET_EVENTS_STATE_TOPIC=PIPELINE.count.events.state",
		"FLOW_INLET_CLICKS_STATE_TOPIC=PIPELINE.count.clicks.state",
		"give --group GROUP",
		"Read, Write, Describe and DescribeConfigs",
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("describe LINE's stderr =\n%s\nlacks %q", errOut, w)
		}
	}
	_, _, errOut = runCmd(t, "describe", "--group", "listings.count", line)
	if w := "FLOW_INLET_EVENTS_STATE_TOPIC=listings.count.events.state"; !strings.Contains(errOut, w) || strings.Contains(errOut, "PIPELINE") {
		t.Errorf("describe --group listings.count LINE's stderr =\n%s\nwant %q and no placeholder", errOut, w)
	}
	if code, out, errOut := runCmd(t, "describe", "tiny --in a=a.v1 --out b=b.v1 -- cat"); code != 0 || errOut != "" || !strings.HasSuffix(out, "}\n") {
		t.Errorf("describe of a stateless line = %d, %q, stderr %q; want the descriptor and nothing on stderr", code, out, errOut)
	}
	if code, out, errOut := runCmd(t, "describe", "--group", "g", "tiny --in a=a.v1 --out b=b.v1 -- cat"); code != 2 || !strings.Contains(errOut, "keeps no state") || out != "" {
		t.Errorf("describe --group on a stateless line = %d, stdout %q, stderr %q; want 2, saying it keeps no state, and no descriptor", code, out, errOut)
	}
}

// TestInitThenTest is an author's first minutes, through the commands, for every language
// with an SDK and for raw: init, then conformance, fixtures and a run on the sample all pass
// (the time of the four is logged: under 10 s on a quiet machine); a broken golden file makes
// `test action` exit 1 with the difference, and --update puts it right.
func TestInitThenTest(t *testing.T) {
	for _, lang := range []string{"python", "node", "ruby", "raw"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			testkit.NeedTools(t, langTools[lang]...)
			dir := filepath.Join(t.TempDir(), "x")
			t0 := time.Now()
			code, out, errOut := runCmd(t, "init", "action", dir, "--lang", lang)
			if code != 0 || !strings.Contains(out, "The action protocol: ") {
				t.Fatalf("init = %d: %s%s", code, out, errOut)
			}
			if code, out, errOut := runCmd(t, "test", "action", dir, "--conformance"); code != 0 || !strings.HasSuffix(out, "x: conformant\n") {
				t.Fatalf("test --conformance = %d:\n%s%s", code, out, errOut)
			}
			if code, out, errOut := runCmd(t, "test", "action", dir); code != 0 || !strings.Contains(out, "all pass") {
				t.Fatalf("test = %d:\n%s%s", code, out, errOut)
			}
			code, out, errOut = runCmd(t, "run", dir, "--input", filepath.Join(dir, "sample.jsonl"))
			if code != 0 || !strings.Contains(out, "Hello, Ada!") {
				t.Fatalf("run = %d:\n%s%s", code, out, errOut)
			}
			t.Logf("%s: init, test --conformance, test, run in %s", lang, time.Since(t0).Round(10*time.Millisecond))
			if lang != "python" {
				return
			}
			golden := filepath.Join(dir, "fixtures", "formal.out.jsonl")
			if err := os.WriteFile(golden, []byte(`{"outcome":"done","emits":[{"payload":{"message":"Good evening, Dr. Hopper!"}}]}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, _ = runCmd(t, "test", "action", dir, "--json")
			if code != 1 || !strings.Contains(out, `"emits[0].payload.message: want \"Good evening, Dr. Hopper!\", got \"Good morning, Dr. Hopper!\""`) {
				t.Fatalf("test --json with a wrong golden = %d:\n%s", code, out)
			}
			if code, _, errOut := runCmd(t, "test", "action", dir, "--update"); code != 0 {
				t.Fatalf("test --update = %d: %s", code, errOut)
			}
			if code, out, _ := runCmd(t, "test", "action", dir); code != 0 {
				t.Fatalf("test after --update = %d:\n%s", code, out)
			}
		})
	}
}

// TestInitStateThenTest: `init --state` writes a line keeping state on the inlet it names;
// `millrace test` runs that line's fixtures with state kept per key (the golden files' "state"
// compared) and the kit's state check with the line's limits, and `millrace run` keeps it.
func TestInitStateThenTest(t *testing.T) {
	for _, lang := range []string{"bash", "python"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			testkit.NeedTools(t, langTools[lang]...)
			dir := filepath.Join(t.TempDir(), "x")
			if code, out, errOut := runCmd(t, "init", "action", dir, "--lang", lang, "--state", "events,ttl=24h"); code != 0 {
				t.Fatalf("init --state = %d: %s%s", code, out, errOut)
			}
			conf, err := os.ReadFile(filepath.Join(dir, "action.conf"))
			if err != nil || !strings.Contains(string(conf), "--in events=x-request.v1") || !strings.Contains(string(conf), " --state events,ttl=24h ") {
				t.Fatalf("action.conf = %s, %v; want inlet events and --state events,ttl=24h on the line", conf, err)
			}
			if code, out, errOut := runCmd(t, "test", "action", dir, "--conformance"); code != 0 || !strings.Contains(out, "PASS state: ") || !strings.HasSuffix(out, "x: conformant\n") {
				t.Fatalf("test --conformance = %d:\n%s%s", code, out, errOut)
			}
			if code, out, errOut := runCmd(t, "test", "action", dir); code != 0 || !strings.Contains(out, "all pass") {
				t.Fatalf("test = %d:\n%s%s", code, out, errOut)
			}
			// the sample greets u1 twice: the second run of the key sees the first's state
			if code, out, errOut := runCmd(t, "run", dir, "--input", filepath.Join(dir, "sample.jsonl")); code != 0 || !strings.Contains(out, `"key":"u1","payload":{"message":"Hello, Ada!","visits":2}`) {
				t.Fatalf("run = %d:\n%s%s", code, out, errOut)
			}
			// a golden state the action does not reach fails the file, naming the field
			golden := filepath.Join(dir, "fixtures", "formal.out.jsonl")
			if err := os.WriteFile(golden, []byte(`{"outcome":"done","state":{"visits":41}}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, out, _ := runCmd(t, "test", "action", dir); code != 1 || !strings.Contains(out, "state.visits: want 41, got 42") {
				t.Fatalf("test with a wrong golden state = %d:\n%s", code, out)
			}
		})
	}
}

// TestRunCommand: millrace run reads stdin when no --input is given, prints the outputs on
// stdout and the summary on stderr, and exits 1 with the reason on a bad input line.
func TestRunCommand(t *testing.T) {
	testkit.NeedTools(t, "python3")
	sample, err := os.ReadFile("../../actions/score-listing/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		return dispatch(context.Background(), e, args), out.String(), errOut.String()
	}
	lines := strings.Count(string(sample), "\n")
	code, out, errOut := run(string(sample), "run", "../../actions/score-listing")
	if code != 0 || strings.Count(out, "\n") != lines || !strings.Contains(errOut, fmt.Sprintf("score-listing: %d records in, %d committed", lines, lines)) {
		t.Fatalf("run score-listing = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, _, errOut = run("not json\n", "run", "../../actions/score-listing")
	if code != 1 || !strings.Contains(errOut, "bad input line 1") {
		t.Fatalf("run with a bad line = %d, %s; want 1 naming line 1", code, errOut)
	}
	code, _, errOut = run("", "run", "../../actions/score-listing", "--set", "x")
	if code != 2 || !strings.Contains(errOut, "want KEY=VALUE") {
		t.Fatalf("run --set x = %d, %s; want a usage error", code, errOut)
	}
}

// needRuntime skips t outside CI (fails it in CI) when the program an action directory or a
// pipeline file runs is not on PATH: bash actions need jq too, Go ones go.
func needRuntime(t *testing.T, path string) {
	t.Helper()
	var commands [][]string
	if strings.HasSuffix(path, ".pipeline") {
		p, err := actiondir.LoadPipeline(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Streamlets {
			commands = append(commands, s.Action.Command)
		}
	} else {
		a, err := actiondir.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		commands = append(commands, a.Command)
	}
	for _, c := range commands {
		progs := []string{c[0]}
		if c[0] == "bash" {
			progs = append(progs, "jq")
		}
		if strings.HasPrefix(c[0], "./") || strings.HasPrefix(c[0], "/") {
			continue // a program of the action's own
		}
		testkit.NeedTools(t, progs...)
	}
}

// langTools are the programs an action `millrace init` writes in a language runs.
var langTools = map[string][]string{"python": {"python3"}, "raw": {"python3"}, "node": {"node"}, "ruby": {"ruby"}, "bash": {"bash", "jq"}, "go": {"go"}}
