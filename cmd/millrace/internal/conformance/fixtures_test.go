package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const basicIn = `{"key": "k1", "payload": {"n": 1, "text": "héllo"}}
{"payload": [1, 2.50, {"x": null}], "headers": [{"key": "h", "value": "v"}]}
{"key": "k3", "payload": {"n": 3}, "offset": 42}
`

// TestFixturesUpdateThenPass: --update writes the golden file from the answers; the next run
// passes; a run against an edited golden file fails with the difference named by path.
func TestFixturesUpdateThenPass(t *testing.T) {
	a := testAction(t, "good")
	writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.in.jsonl"), basicIn)
	ctx := context.Background()

	rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass || !strings.Contains(rep.Files[0].Error, "--update") {
		t.Fatalf("RunFixtures with no golden file = pass %v, error %q; want a failure telling to run --update", rep.Pass, rep.Files[0].Error)
	}

	if rep, err = conformance.RunFixtures(ctx, a, conformance.FixtureOptions{Update: true}); err != nil || !rep.Pass {
		t.Fatalf("RunFixtures(--update) = %+v, %v; want pass", rep, err)
	}
	golden, err := os.ReadFile(filepath.Join(a.Dir, "fixtures", "basic.out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	wantGolden := `{"outcome":"done","emits":[{"key":"k1","payload":{"n":1,"text":"héllo"}}]}
{"outcome":"done","emits":[{"payload":[1,2.5,{"x":null}]}]}
{"outcome":"done","emits":[{"key":"k3","payload":{"n":3}}]}
`
	if string(golden) != wantGolden {
		t.Fatalf("golden file =\n%s\nwant\n%s", golden, wantGolden)
	}

	if rep, err = conformance.RunFixtures(ctx, a, conformance.FixtureOptions{}); err != nil || !rep.Pass {
		t.Fatalf("RunFixtures after --update = %+v, %v; want pass", rep, err)
	}

	// by value: 2.5 == 2.50, key order, blanks; absent fields (key, outlet) not compared
	writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.out.jsonl"), `{"outcome": "done", "emits": [{"payload": {"text": "héllo", "n": 1.0}}]}
{"emits": [{"outlet": "out", "payload": [1, 2.5, {"x": null}]}], "outcome": "done"}
{"outcome":"done","emits":[{"key":"k3","payload":{"n":4,"extra":true}}]}
`)
	rep, err = conformance.RunFixtures(ctx, a, conformance.FixtureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass || len(rep.Files[0].Failures) != 1 {
		t.Fatalf("RunFixtures(edited golden) = %+v; want exactly line 3 failing", rep.Files[0])
	}
	f := rep.Files[0].Failures[0]
	wantProblems := []string{`emits[0].payload.extra: want true, got nothing`, `emits[0].payload.n: want 4, got 3`}
	if strings.Join(f.Problems, "|") != strings.Join(wantProblems, "|") || f.Source != "fixtures/basic.in.jsonl:3" {
		t.Fatalf("failure = %s %q; want fixtures/basic.in.jsonl:3 %q", f.Source, f.Problems, wantProblems)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	for _, want := range []string{"FAIL basic: 1 of 3 items differs", "emits[0].payload.n: want 4, got 3", `want {"outcome":"done","emits":[{"key":"k3","payload":{"n":4,"extra":true}}]}`, `got  {"outcome":"done","emits":[{"outlet":"out","key":"k3","payload":{"n":3}}]}`, "--update"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil || !bytes.Contains(js, []byte(`"pass":false`)) || !bytes.Contains(js, []byte(`"source":"fixtures/basic.in.jsonl:3"`)) {
		t.Fatalf("JSON report = %s, %v", js, err)
	}
}

// TestCompare covers the golden comparison rules on single answers.
func TestCompare(t *testing.T) {
	tests := []struct {
		name   string
		child  string
		config string // NAME.config.json, "" for none
		in     string
		golden string
		want   string // the problems joined by |, "" = pass
	}{
		{name: "error-by-config", child: "good", config: `{"n":"x"}`, in: `{"payload":{}}`, golden: `{"outcome":"error","retryable":false}`},
		{name: "error-message", child: "good", config: `{"n":"x"}`, in: `{"payload":{}}`, golden: `{"outcome":"error","message":"other"}`, want: `message: want "other", got "config n must be a number"`},
		{name: "outcome", child: "good", config: `{"n":"x"}`, in: `{"payload":{}}`, golden: `{"outcome":"done"}`, want: `outcome: want "done", got error ("config n must be a number")`},
		{name: "count", child: "good", in: `{"payload":{}}`, golden: `{"outcome":"done"}`, want: `emits: want 0, got 1`},
		{name: "typo", child: "good", in: `{"payload":{}}`, golden: `{"outcome":"done","emits":[{"paylod":{}}]}`, want: `emits[0].paylod: unknown field in the golden emit (want outlet, key, keyBase64, payload, headers)`},
		{name: "outlet", child: "good", in: `{"payload":{}}`, golden: `{"outcome":"done","emits":[{"outlet":"other","payload":{}}]}`, want: `emits[0].outlet: want "other", got "out"`},
		{name: "no-key", child: "good", in: `{"payload":{}}`, golden: `{"outcome":"done","emits":[{"key":null,"payload":{}}]}`},
		{name: "key", child: "good", in: `{"key":"a","payload":{}}`, golden: `{"outcome":"done","emits":[{"key":null,"payload":{}}]}`, want: `emits[0].key: want null, got "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := testAction(t, tt.child)
			writeFile(t, filepath.Join(a.Dir, "fixtures", "x.in.jsonl"), tt.in+"\n")
			writeFile(t, filepath.Join(a.Dir, "fixtures", "x.out.jsonl"), tt.golden+"\n")
			if tt.config != "" {
				writeFile(t, filepath.Join(a.Dir, "fixtures", "x.config.json"), tt.config)
			}
			rep, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if fs := rep.Files[0].Failures; len(fs) > 0 {
				got = strings.Join(fs[0].Problems, "|")
			}
			if got != tt.want || rep.Pass != (tt.want == "") {
				t.Fatalf("RunFixtures(%s vs %s) = %q (pass %v); want %q", tt.in, tt.golden, got, rep.Pass, tt.want)
			}
		})
	}
}

func TestFixtureErrors(t *testing.T) {
	a := testAction(t, "good")
	if _, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{}); !errors.Is(err, conformance.ErrFixture) || !strings.Contains(err.Error(), "no fixture") {
		t.Fatalf("RunFixtures(no fixtures) = %v; want ErrFixture naming the missing fixtures", err)
	}
	writeFile(t, filepath.Join(a.Dir, "fixtures", "bad.in.jsonl"), "{\"payload\":1}\nnot json\n")
	if _, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{}); !errors.Is(err, conformance.ErrFixture) || !strings.Contains(err.Error(), "bad.in.jsonl:2") {
		t.Fatalf("RunFixtures(bad line) = %v; want ErrFixture naming bad.in.jsonl:2", err)
	}
	a.Command = []string{filepath.Join(a.Dir, "no-such-program")}
	writeFile(t, filepath.Join(a.Dir, "fixtures", "bad.in.jsonl"), "{\"payload\":1}\n")
	if _, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{}); !errors.Is(err, conformance.ErrAction) || strings.Contains(err.Error(), "conformance:") {
		t.Fatalf("RunFixtures(missing program) = %v; want ErrAction, its text without the package's name", err)
	}
}

// TestConformanceUsesFixtures: without Inputs, the items come from the action's fixtures.
func TestConformanceUsesFixtures(t *testing.T) {
	a := testAction(t, "good")
	writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.in.jsonl"), basicIn)
	rep, err := conformance.Run(context.Background(), a, conformance.Options{Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Conformant || !strings.Contains(rep.Checks[3].Detail, "3 items answered exactly once") {
		t.Fatalf("Run with fixtures = %+v; want conformant, 3 items from the fixture", rep.Checks[3])
	}
}

// TestFixturesStrict: a fixture fails an action that writes a line on stdout that is no
// protocol message, naming the line, as `millrace run` and production stop it; --update
// records nothing from it.
func TestFixturesStrict(t *testing.T) {
	for _, update := range []bool{false, true} {
		a := testAction(t, "stdout-log")
		writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.in.jsonl"), basicIn)
		golden := `{"outcome":"done"}` + "\n"
		writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.out.jsonl"), golden)
		rep, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{Update: update})
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		_ = rep.WriteText(&text)
		if rep.Pass || !strings.Contains(rep.Files[0].Error, `fixtures/basic.in.jsonl:1: no answer: the action broke the protocol (not-json): a line that is not a JSON object (one object per line; logs go to stderr): "processing fixtures/0/0"`) || !strings.Contains(rep.Files[0].Error, "production stop the process") {
			t.Fatalf("RunFixtures(stdout-log, update %v) =\n%s\nwant a failure naming the stray line", update, text.String())
		}
		if got, _ := os.ReadFile(filepath.Join(a.Dir, "fixtures", "basic.out.jsonl")); string(got) != golden {
			t.Fatalf("RunFixtures(stdout-log, update %v) rewrote the golden file: %s", update, got)
		}
	}
}

// TestFixturesUpdateKeepsMessages: --update writes each error's message and abstain's reason,
// whatever the old golden line held.
func TestFixturesUpdateKeepsMessages(t *testing.T) {
	a := testAction(t, "good")
	writeFile(t, filepath.Join(a.Dir, "fixtures", "x.in.jsonl"), `{"payload":{}}`+"\n")
	writeFile(t, filepath.Join(a.Dir, "fixtures", "x.config.json"), `{"n":"x"}`)
	if rep, err := conformance.RunFixtures(context.Background(), a, conformance.FixtureOptions{Update: true}); err != nil || !rep.Pass {
		t.Fatalf("RunFixtures(--update) = %+v, %v", rep, err)
	}
	got, _ := os.ReadFile(filepath.Join(a.Dir, "fixtures", "x.out.jsonl"))
	if want := `{"outcome":"error","retryable":false,"message":"config n must be a number"}` + "\n"; string(got) != want {
		t.Fatalf("golden after --update = %s; want %s", got, want)
	}
}

// pythonAction is a raw Python action in a folder of its own (testkit.PythonAnswerer).
func pythonAction(t *testing.T, answer string) conformance.Action {
	t.Helper()
	testkit.NeedTools(t, "python3")
	a := testAction(t, "python")
	a.Name, a.Command, a.Env = "py", []string{"python3", "main.py"}, nil
	writeFile(t, filepath.Join(a.Dir, "main.py"), testkit.PythonAnswerer(answer))
	return a
}

// TestFixturesProtocolFaults: a fixture run ends at the first answer that breaks the protocol,
// as production does (it stops the process on such a line, and fails a record emitted to an
// undeclared outlet), with one line naming the item, the rule, the line and the fix for that
// fault: no waiting for the item timeout, no advice that does not fit, no golden file written.
func TestFixturesProtocolFaults(t *testing.T) {
	const stopped = "millrace run and production stop the process on such a line"
	tests := []struct {
		name   string
		answer string
		want   []string
	}{
		{"debug-print", `print("debug: got", m["delivery"]); send({"type": "done", "delivery": m["delivery"]})`,
			[]string{"no answer: the action broke the protocol (not-json): a line that is not a JSON object", `"debug: got `, "fix: stdout carries protocol lines only: write logs and debug prints to stderr", stopped}},
		{"invalid-json", `out.write('{"type":"done","delivery":' + m["delivery"] + '}\n'); out.flush()`,
			[]string{"no answer: the action broke the protocol (invalid-json): a line that is not a valid JSON object", `"{\"type\":\"done\",\"delivery\":dl_`, "fix: write each message with a JSON encoder", stopped}},
		{"invalid-utf8", `out.buffer.write(b'{"type":"emit","delivery":"' + m["delivery"].encode() + b'","payload":"Zo\xeb"}\n'); send({"type": "done", "delivery": m["delivery"]})`,
			[]string{"no answer: the action broke the protocol (not-utf8): a line that is not valid UTF-8", `Zo\xeb`, "fix: encode stdout as UTF-8", stopped}},
		{"undeclared-outlet", `send({"type": "emit", "delivery": m["delivery"], "outlet": "nope", "payload": {}}); send({"type": "done", "delivery": m["delivery"]})`,
			[]string{`the action broke the protocol (undeclared-outlet): emit 1 names outlet "nope", which the action config does not declare`, `"{\"type\":\"emit\",\"outlet\":\"nope\"`, "fix: emit to a declared outlet", "production fails such a record for good"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := pythonAction(t, tt.answer)
			writeFile(t, filepath.Join(a.Dir, "fixtures", "x.in.jsonl"), `{"payload":{"name":"Zoë"}}`+"\n"+`{"payload":{}}`+"\n")
			golden := `{"outcome":"done"}` + "\n" + `{"outcome":"done"}` + "\n"
			writeFile(t, filepath.Join(a.Dir, "fixtures", "x.out.jsonl"), golden)
			// The item timeout is 30 s: a run that waited for it ends here first.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, update := range []bool{false, true} {
				rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{Update: update})
				if err != nil {
					t.Fatalf("RunFixtures(%s, update %v) = %v; want a report", tt.name, update, err)
				}
				var text bytes.Buffer
				_ = rep.WriteText(&text)
				lines := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
				if rep.Pass || len(lines) != 2 || !strings.HasPrefix(lines[0], "FAIL x: fixtures/x.in.jsonl:1: ") {
					t.Fatalf("RunFixtures(%s, update %v) =\n%s\nwant one FAIL line for item 1 and the summary", tt.name, update, text.String())
				}
				for _, w := range tt.want {
					if !strings.Contains(lines[0], w) {
						t.Errorf("RunFixtures(%s) said %q; want it to say %q", tt.name, lines[0], w)
					}
				}
				if strings.Contains(lines[0], "flush stdout") {
					t.Errorf("RunFixtures(%s) said %q; want no advice to flush stdout for a line that came", tt.name, lines[0])
				}
				if got, _ := os.ReadFile(filepath.Join(a.Dir, "fixtures", "x.out.jsonl")); string(got) != golden {
					t.Errorf("RunFixtures(%s, update %v) rewrote the golden file: %s", tt.name, update, got)
				}
			}
		})
	}
}
