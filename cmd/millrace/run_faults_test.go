package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestRunFailsFast: millrace run ends a fault that can only repeat with exit status 1 and one
// line naming the cause and the fix, instead of waiting for the stall: a command it cannot
// execute (checked before anything starts), a program that exits at start every time or never
// readies, a record the action refuses on every delivery (with no --dead-letter). millrace
// test, fixtures or conformance, names a command it cannot execute in the same words.
func TestRunFailsFast(t *testing.T) {
	testkit.NeedTools(t, "python3")
	const shebang = "#!/usr/bin/env python3\n"
	tests := []struct {
		name    string
		command string // the end of the config line: the command after --, or flags, -- and the command
		main    string // main.py
		mode    os.FileMode
		input   string
		want    []string
	}{
		{"not-found", "no-such-runtime-x main.py", "", 0o644, `{"payload":{}}`, []string{`command "no-such-runtime-x" is not found on PATH: install it (the runtime the action needs), or check PATH`}},
		{"not-executable", "./main.py", shebang, 0o644, `{"payload":{}}`, []string{"./main.py is not executable (permission denied): chmod +x main.py"}},
		{"no-shebang", "./main.py", "import sys\n", 0o755, `{"payload":{}}`, []string{"./main.py has no #! line, so it cannot be executed (exec format error): add #!/usr/bin/env python3 as its first line"}},
		{"env-interpreter-missing", "./main.py", "#!/usr/bin/env no-such-python\n", 0o755, `{"payload":{}}`, []string{`./main.py runs "no-such-python" (its #! line), which is not found on PATH: install it, or correct the #! line`}},
		{"interpreter-missing", "./main.py", "#!/no/such/python3\n", 0o755, `{"payload":{}}`, []string{"./main.py runs /no/such/python3 (its #! line), which does not exist: install it, or write #!/usr/bin/env python3"}},
		{"bare-name", "main.py", shebang, 0o755, `{"payload":{}}`, []string{`command "main.py" is not found on PATH, but main.py is in the action's folder: write ./main.py after --`}},
		{"exits-at-start", "python3 main.py", "import sys\nsys.stderr.write('boom: no model file\\n')\nsys.exit(3)\n", 0o644, `{"payload":{}}`, []string{"the program exits before answering ready, every time", "exit status 3", "boom: no model file"}},
		{"never-ready", "--ready-timeout 1s -- python3 main.py", "import time\ntime.sleep(60)\n", 0o644, `{"payload":{}}`, []string{"the program never answered hello with ready within its ready timeout", "within 1s (the ready timeout)", "flush stdout"}},
		{"refused", "python3 main.py", refuser, 0o644, `{"payload":{"id":4}}`, []string{`the action refuses record t.in/0/0 on every delivery ("payload has no name")`, "--dead-letter PORT"}},
		// A protocol violation is the action's bug: it ends the run at its second occurrence
		// (the retry), not after the stall.
		{"debug-print", "python3 main.py", testkit.PythonAnswerer(`print("debug: got", m["delivery"]); send({"type": "done", "delivery": m["delivery"]})`), 0o644, `{"payload":{}}`,
			[]string{"the action breaks the protocol (not-json) on record t.in/0/0", `"debug: got dl_`, "fix: stdout carries protocol lines only: write logs and debug prints to stderr"}},
		{"invalid-json", "python3 main.py", testkit.PythonAnswerer(`out.write('{"type":"done","delivery":' + m["delivery"] + '}\n'); out.flush()`), 0o644, `{"payload":{}}`,
			[]string{"the action breaks the protocol (invalid-json) on record t.in/0/0", `"{\"type\":\"done\",\"delivery\":dl_`, "fix: write each message with a JSON encoder"}},
		{"invalid-utf8", "python3 main.py", testkit.PythonAnswerer(`out.buffer.write(b'{"type":"emit","delivery":"' + m["delivery"].encode() + b'","payload":"Zo\xeb"}\n'); send({"type": "done", "delivery": m["delivery"]})`), 0o644, `{"payload":{}}`,
			[]string{"the action breaks the protocol (not-utf8) on record t.in/0/0", `Zo\xeb`, "fix: encode stdout as UTF-8"}},
		{"not-in-flight", "python3 main.py", testkit.PythonAnswerer(`send({"type": "done", "delivery": "dl-x"})`), 0o644, `{"payload":{}}`,
			[]string{"the action breaks the protocol (not-in-flight) on record t.in/0/0", `"{\"type\": \"done\", \"delivery\": \"dl-x\"}"`, "fix: answer each delivery exactly once, copying \"delivery\" from its item"}},
		{"undeclared-outlet", "python3 main.py", testkit.PythonAnswerer(`send({"type": "emit", "delivery": m["delivery"], "outlet": "nope", "payload": {}}); send({"type": "done", "delivery": m["delivery"]})`), 0o644, `{"payload":{}}`,
			[]string{"the action breaks the protocol (undeclared-outlet) on record t.in/0/0", `emit 1 names outlet "nope"`, "fix: emit to a declared outlet"}},
		{"hello-answered-with-text", "python3 main.py", "import sys\nprint('starting up', flush=True)\nsys.stdin.read()\n", 0o644, `{"payload":{}}`,
			[]string{"the program's answer to hello breaks the protocol (not-json)", `"starting up"`, "fix: stdout carries protocol lines only"}},
	}
	// the commands that cannot be executed: found before anything starts, by test too
	unrunnable := map[string]bool{"not-found": true, "not-executable": true, "no-shebang": true, "env-interpreter-missing": true, "interpreter-missing": true, "bare-name": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "t")
			command := tt.command
			if !strings.Contains(command, "-- ") {
				command = "-- " + command
			}
			conf := "t --in in=t-in.v1 --out out=t-out.v1 " + command + "\n"
			files := map[string]string{"action.conf": conf, "in.jsonl": tt.input + "\n", "fixtures/x.in.jsonl": tt.input + "\n"}
			if tt.main != "" {
				files["main.py"] = tt.main
			}
			if err := os.MkdirAll(filepath.Join(dir, "fixtures"), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, text := range files {
				mode := os.FileMode(0o644)
				if name == "main.py" {
					mode = tt.mode
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
					t.Fatal(err)
				}
			}
			// A regression to waiting for the stall or the retries ends the run's context first.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code, _, errOut := runCmdCtx(ctx, t, "run", dir, "--input", filepath.Join(dir, "in.jsonl"))
			if tt.name == "refused" {
				// once a conversation started, the bridge's warnings are not held back: the
				// action's own error is logged for each delivery before the one line (the
				// author reads it there: the text is the product)
				if !strings.Contains(errOut, `msg="record failed for good"`) {
					t.Errorf("run (refused) logged no warning of the failed record:\n%s", errOut)
				}
				errOut = errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
			}
			if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "millrace run: streamlet t: ") {
				t.Fatalf("run (%s) = %d with stderr\n%s\nwant 1 and one line", tt.name, code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("run (%s) said %q; want it to say %q", tt.name, errOut, w)
				}
			}
			if !unrunnable[tt.name] {
				return
			}
			for _, args := range [][]string{{"test", "action", dir}, {"test", "action", dir, "--conformance"}} {
				code, out, errOut := runCmd(t, args...)
				if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "millrace test: streamlet t: ") {
					t.Fatalf("%v (%s) = %d with stdout %q, stderr\n%s\nwant 1 and one line on stderr", args, tt.name, code, out, errOut)
				}
				for _, w := range tt.want {
					if !strings.Contains(errOut, w) {
						t.Errorf("%v (%s) said %q; want it to say %q, as run does", args, tt.name, errOut, w)
					}
				}
			}
		})
	}
}

// TestRunProtocolFaultVerbose: with -v, the run that ends on a protocol violation keeps the
// whole story in its log (every attempt and the processes it killed) before the one line.
func TestRunProtocolFaultVerbose(t *testing.T) {
	testkit.NeedTools(t, "python3")
	dir := filepath.Join(t.TempDir(), "t")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"action.conf": "t --in in=t-in.v1 --out out=t-out.v1 -- python3 main.py\n",
		"in.jsonl":    `{"payload":{}}` + "\n",
		"main.py":     testkit.PythonAnswerer(`print("debug: got", m["delivery"]); send({"type": "done", "delivery": m["delivery"]})`),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, _, errOut := runCmdCtx(ctx, t, "run", dir, "--input", filepath.Join(dir, "in.jsonl"), "-v")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	last := lines[len(lines)-1]
	if code != 1 || !strings.HasPrefix(last, "millrace run: streamlet t: the action breaks the protocol (not-json)") {
		t.Fatalf("run -v = %d with last line %q; want 1 and the fault's line", code, last)
	}
	// What -v prints is for the author to read: its text is the product.
	for _, w := range []string{`msg="action attempt failed"`, `msg="action process ended"`, "protocol violation"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("run -v logged no %s before the fault's line:\n%s", w, errOut)
		}
	}
}

// runCmdCtx is runCmd under ctx.
func runCmdCtx(ctx context.Context, t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code = dispatch(ctx, e, args)
	return code, out.String(), errOut.String()
}

// refuser answers ready, then error (not retryable) for every item: a payload it does not
// take.
const refuser = `import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        print(json.dumps({"type": "ready"}), flush=True)
    elif m["type"] == "item":
        print(json.dumps({"type": "error", "delivery": m["delivery"], "message": "payload has no name", "retryable": False}), flush=True)
    elif m["type"] == "shutdown":
        break
`
