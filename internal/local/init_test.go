package local_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/sdk"
)

// runtimes are the programs each language's action needs on PATH. CI installs them all; a
// missing one fails the test rather than skipping a language silently.
var runtimes = map[string][]string{
	"raw": {"python3"}, "python": {"python3"}, "node": {"node"}, "ruby": {"ruby"}, "go": {"go"}, "bash": {"bash", "jq"},
}

// checkAction runs the conformance kit and the fixtures on the action directory dir and fails
// t unless both pass.
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
	for _, prog := range runtimes[lang] {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("%s actions need %s on PATH (scripts/setup installs it): %v", lang, prog, err)
		}
	}
}

// TestInitPassesItsOwnTests: every language's new action passes conformance and its
// fixtures the moment it is written.
func TestInitPassesItsOwnTests(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range actiondir.Langs {
		t.Run(l.Name, func(t *testing.T) {
			t.Parallel()
			needRuntimes(t, l.Name)
			dir := filepath.Join(t.TempDir(), "greet-"+l.Name)
			if err := actiondir.Init(context.Background(), dir, l.Name, actiondir.InitOptions{Source: root}); err != nil {
				t.Fatalf("Init(%s) = %v", l.Name, err)
			}
			for _, f := range []string{"action.conf", l.Program, "README.md", "sample.jsonl", "fixtures/basic.in.jsonl", "fixtures/basic.out.jsonl"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("Init(%s) wrote no %s", l.Name, f)
				}
			}
			prog, err := os.ReadFile(filepath.Join(dir, l.Program))
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(prog, []byte("\n")); n >= 40 && l.Name != "raw" {
				t.Errorf("Init(%s) wrote a %s of %d lines; want under 40 (the protocol is the SDK's)", l.Name, l.Program, n)
			}
			checkAction(t, dir)
		})
	}
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
		want, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(f.Path)))
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
		text := strings.ReplaceAll(string(data), "{{.Name}}", "greet")
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
