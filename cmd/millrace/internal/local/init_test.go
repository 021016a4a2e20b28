package local_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sdk"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// runtimes are the programs each language's action needs on PATH. CI installs them all; a
// missing one fails the test rather than skipping a language silently.
var runtimes = map[string][]string{
	"raw": {"python3"}, "python": {"python3"}, "node": {"node"}, "ruby": {"ruby"}, "go": {"go"}, "bash": {"bash", "jq"},
}

// checkAction runs the conformance kit and the fixtures on the action directory dir and fails
// t unless both pass. A line with --state must also have its state check run in full (the
// kit's state items fed with the line's limits), not only its fixtures pass.
func checkAction(t *testing.T, dir string) {
	t.Helper()
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatalf("Load(%s) = %v", dir, err)
	}
	if a.ConfigErr != nil {
		t.Fatal(a.ConfigErr)
	}
	ctx := context.Background()
	rep, err := conformance.Run(ctx, a.Conformance("test"), conformance.Options{})
	if err != nil {
		t.Fatalf("conformance.Run(%s) = %v", dir, err)
	}
	var out bytes.Buffer
	_ = rep.WriteText(&out)
	if !rep.Conformant {
		t.Errorf("%s is not conformant:\n%s", dir, out.String())
	}
	if len(a.State) > 0 && !slices.ContainsFunc(rep.Checks, func(c conformance.Check) bool {
		return c.Name == "state" && strings.Contains(c.Detail, "answered: states of every JSON type")
	}) {
		t.Errorf("%s keeps state (--state %s), but the kit's state check did not run in full:\n%s", dir, a.State[0].Port, out.String())
	}
	frep, err := conformance.RunFixtures(ctx, a.Conformance("test"), conformance.FixtureOptions{})
	if err != nil {
		t.Fatalf("conformance.RunFixtures(%s) = %v", dir, err)
	}
	out.Reset()
	_ = frep.WriteText(&out)
	if !frep.Pass {
		t.Errorf("%s fails its fixtures:\n%s", dir, out.String())
	}
}

func needRuntimes(t *testing.T, lang string) {
	t.Helper()
	testkit.NeedTools(t, runtimes[lang]...)
}

// TestInitPassesItsOwnTests: every language's new action passes conformance and its
// fixtures the moment it is written; with --state too, its inlet named after the word's port,
// the line keeping state there, and its fixtures holding each key's state after each item.
func TestInitPassesItsOwnTests(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range actiondir.Langs {
		for _, state := range []string{"", "names,ttl=24h"} {
			name := l.Name
			if state != "" {
				name += "/state"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				needRuntimes(t, l.Name)
				initPassesItsOwnTests(t, root, l.Name, l.Program, state)
			})
		}
	}
}

func initPassesItsOwnTests(t *testing.T, root, lang, program, state string) {
	dir := filepath.Join(t.TempDir(), "greet-"+lang)
	if err := actiondir.Init(context.Background(), dir, lang, actiondir.InitOptions{Source: root, State: state}); err != nil {
		t.Fatalf("Init(%s, --state %q) = %v", lang, state, err)
	}
	a, err := actionconf.ParseFile(filepath.Join(dir, "action.conf"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile(filepath.Join(dir, program))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join(dir, "fixtures", "basic.out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if state == "" {
		if len(a.State) != 0 || a.Inlets[0].Name != "in" || bytes.Contains(golden, []byte(`"state"`)) || bytes.Contains(prog, []byte("state")) {
			t.Errorf("Init(%s) without --state: line %+v, a golden file or a %s speaking of state; want none", lang, a.State, program)
		}
	} else {
		want := []actionconf.StatePort{{Port: "names", TTL: 24 * time.Hour, MaxBytes: engine.DefaultStateMaxBytes}}
		if !slices.Equal(a.State, want) || a.Inlets[0].Name != "names" || !bytes.Contains(golden, []byte(`"state": {"visits": 2}`)) {
			t.Errorf("Init(%s, --state %s): line's state %+v, inlet %q, golden:\n%s\nwant %+v on inlet names, and the second visit's state", lang, state, a.State, a.Inlets[0].Name, golden, want)
		}
		if lang == "bash" && !bytes.Contains(prog, []byte(`echo '{"type":"ready","state":true}'`)) {
			t.Errorf("Init(bash, --state) wrote a main.sh whose ready does not declare state:\n%s", prog)
		}
	}
	for _, f := range []string{"action.conf", program, "README.md", "sample.jsonl", "fixtures/basic.in.jsonl", "fixtures/basic.out.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("Init(%s) wrote no %s", lang, f)
		}
	}
	limit := 40
	if state != "" {
		limit = 55 // reading the key's state, counting, staging the next one
	}
	if n := bytes.Count(prog, []byte("\n")); n >= limit && lang != "raw" {
		t.Errorf("Init(%s, --state %q) wrote a %s of %d lines; want under %d (the protocol is the SDK's)", lang, state, program, n, limit)
	}
	checkAction(t, dir)
}

// TestInitVendorsTheSDK: the SDK file init writes beside the program is byte for byte the one
// in sdk/LANG/ (init takes it from package sdk, which embeds that file: no copy to drift).
func TestInitVendorsTheSDK(t *testing.T) {
	for _, lang := range []string{"python", "node", "ruby"} {
		f, ok := sdk.For(lang)
		if !ok {
			t.Fatalf("sdk.For(%s) = false", lang)
		}
		dir := filepath.Join(t.TempDir(), "v-"+lang)
		if err := actiondir.Init(context.Background(), dir, lang, actiondir.InitOptions{}); err != nil {
			t.Fatalf("Init(%s) = %v", lang, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatalf("Init(%s) vendored no %s: %v", lang, f.Name, err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "..", "..", filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Init(%s) vendored a %s (%d bytes) that differs from %s (%d bytes)", lang, f.Name, len(got), f.Path, len(want))
		}
	}
	if _, ok := sdk.For("raw"); ok {
		t.Error(`sdk.For("raw") = true; raw is the starting point without an SDK`)
	}
}

func TestInitErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir, lang, want string
	}{
		{filepath.Join(dir, "Bad_Name"), "raw", "a streamlet name is 1 to 63 characters"},
		{filepath.Join(dir, "ok"), "cobol", `unknown language "cobol": want one of raw, python, node, ruby, go, bash`},
		{dir, "raw", "exists and is not empty"},
	}
	for _, tt := range tests {
		err := actiondir.Init(context.Background(), tt.dir, tt.lang, actiondir.InitOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Init(%s, %s) = %v; want an error containing %q", tt.dir, tt.lang, err, tt.want)
		}
	}
	// a --state word the line would refuse is refused as the line words it, before anything is written
	for word, want := range map[string]string{
		"events,ttl=5":   `--state "events,ttl=5": `,
		"Events":         `--state "Events": `,
		"events,colour=": `unknown option "colour="`,
	} {
		target := filepath.Join(dir, "s")
		err := actiondir.Init(context.Background(), target, "bash", actiondir.InitOptions{State: word})
		if !errors.Is(err, actionconf.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Init(--state %s) = %v; want an action config error containing %q", word, err, want)
		}
		if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Init(--state %s) left %s behind (%v)", word, target, err)
		}
	}
	// a Go action outside any millrace checkout, with none named, cannot find the SDK
	t.Chdir(dir)
	err := actiondir.Init(context.Background(), filepath.Join(dir, "g"), "go", actiondir.InitOptions{Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), actiondir.EnvSource) || !strings.Contains(err.Error(), "--source DIR") {
		t.Errorf("Init(go, no source) = %v; want an error naming --source DIR and %s", err, actiondir.EnvSource)
	}
}

// TestTemplatesShowTheDeadLetterDoor: every template's action.conf shows, in a comment, the
// flags that set refused records aside, and those flags, added to its line, make a valid
// line whose dead-letter port is the outlet they declare.
func TestTemplatesShowTheDeadLetterDoor(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "actiondir", "templates", "*", "action.conf"))
	if err != nil || len(files) < len(actiondir.Langs) {
		t.Fatalf("templates: %v, %v", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := template.Must(template.New(file).Parse(string(data))).Execute(&out, struct{ Name, Inlet, State string }{"greet", "in", ""}); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		text := out.String()
		var door string
		for _, l := range strings.Split(text, "\n") {
			if f, ok := strings.CutPrefix(strings.TrimSpace(l), "#"); ok && strings.Contains(f, "--dead-letter") {
				door = strings.TrimSpace(f)
			}
		}
		if door == "" {
			t.Errorf("%s shows no --dead-letter line in its comments", file)
			continue
		}
		cut := strings.LastIndex(text, " -- ") // the command's, after every comment
		a, err := actionconf.ParseString(text[:cut] + " " + door + text[cut:])
		if err != nil || a.DeadLetter == "" || !slices.ContainsFunc(a.Outlets, func(p actionconf.Port) bool { return p.Name == a.DeadLetter }) {
			t.Errorf("%s with %q added: %+v, %v; want a line whose --dead-letter names a declared outlet", file, door, a, err)
		}
	}
}
