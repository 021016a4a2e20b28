package local_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/local"
)

// echoKeySh is a bash and jq action that emits each item's key and payload as they came.
const echoKeySh = `while IFS= read -r line; do
  out=$(jq -c 'if .type == "hello" then {type: "ready"} elif .type == "shutdown" then "shutdown" elif .type == "item" then ({type: "emit", delivery, key, payload}, {type: "done", delivery}) else empty end' <<<"$line")
  [ "$out" = '"shutdown"' ] && exit 0
  [ -n "$out" ] && printf '%s\n' "$out"
done
`

// writeAction writes files (path → text) under a new directory and loads it as an action.
func writeAction(t *testing.T, files map[string]string) *actiondir.Action {
	t.Helper()
	for _, prog := range []string{"bash", "jq"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("this test's action needs %s on PATH (scripts/setup installs it): %v", prog, err)
		}
	}
	dir := t.TempDir()
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runFixtures runs a's fixtures with their round trip through the schemas, as millrace test
// does.
func runFixtures(t *testing.T, a *actiondir.Action, update bool) *conformance.FixtureReport {
	t.Helper()
	rt, stop, err := local.FixtureRoundTrip(a, nil, testLogger(t))
	if err != nil || rt == nil {
		t.Fatalf("FixtureRoundTrip = %v, %v; want the round trip of an encoded action", rt != nil, err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := conformance.RunFixtures(ctx, a.Conformance("test"), conformance.FixtureOptions{Update: update, RoundTrip: rt})
	if err != nil {
		t.Fatalf("RunFixtures = %v", err)
	}
	return rep
}

// TestFixtureRoundTripKeys: `millrace test` passes encoded keys through their schemas as the
// bridge does: a fixture's key is encoded and decoded before the program sees it (it arrives
// as the decoder writes it), a key that does not fit its inlet's key schema fails the file
// naming the line, and an emit's key that does not fit its outlet's key schema is the item's
// non-retryable error.
func TestFixtureRoundTripKeys(t *testing.T) {
	const keyAvsc = `{"type":"record","name":"K","namespace":"t","fields":[{"name":"id","type":"long"}]}`
	files := func(outKey string) map[string]string {
		m := map[string]string{
			"action.conf":            "echo-key --in in=x.v1 --out out=x.v1 --decode in=avro --decode in.key=avro --encode out=avro --encode out.key=avro -- bash main.sh\n",
			"main.sh":                echoKeySh,
			"schemas/in.avsc":        `"long"`,
			"schemas/in.key.avsc":    keyAvsc,
			"schemas/out.avsc":       `"long"`,
			"schemas/out.key.avsc":   outKey,
			"fixtures/keys.in.jsonl": `{"key": "{ \"id\" :  7 }", "payload": 1}` + "\n",
		}
		return m
	}
	a := writeAction(t, files(keyAvsc))
	if rep := runFixtures(t, a, true); !rep.Pass {
		t.Fatalf("RunFixtures --update = %+v; want the golden file written", rep)
	}
	golden, err := os.ReadFile(filepath.Join(a.Dir, "fixtures/keys.out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"key":"{\"id\":7}"`; !strings.Contains(string(golden), want) {
		t.Errorf("golden file\n%s\nwant the key as its decoder writes it, %s", golden, want)
	}
	if rep := runFixtures(t, a, false); !rep.Pass {
		t.Errorf("RunFixtures = %+v; want the fixture to pass against its golden file", rep)
	}

	bad := files(keyAvsc)
	bad["fixtures/keys.in.jsonl"] = `{"key": "{\"id\": \"seven\"}", "payload": 1}` + "\n"
	rep := runFixtures(t, writeAction(t, bad), true)
	if rep.Pass || len(rep.Files) != 1 || !strings.Contains(rep.Files[0].Error, "fixtures/keys.in.jsonl:1: the key does not fit the schema of inlet in's keys") || !strings.Contains(rep.Files[0].Error, "fix the fixture's key") {
		t.Errorf("RunFixtures of a key that does not fit = %+v; want its file failed naming the line and the fix", rep)
	}

	misfit := writeAction(t, files(`"string"`))
	rep = runFixtures(t, misfit, true)
	if !rep.Pass {
		t.Fatalf("RunFixtures --update = %+v", rep)
	}
	golden, err = os.ReadFile(filepath.Join(misfit.Dir, "fixtures/keys.out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `emit 1 to outlet \"out\" does not fit its keys' schema`; !strings.Contains(string(golden), want) || !strings.Contains(string(golden), `"retryable":false`) {
		t.Errorf("golden file\n%s\nwant the item's non-retryable error %s", golden, want)
	}
}
