package local_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/testkit"
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
	testkit.NeedTools(t, "bash", "jq") // this test's action
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

// refsFiles is an action from a Protobuf topic whose .proto imports another to an Avro one
// whose schema uses a named type of another .avsc: the layout the embedded registry reads
// references from.
func refsFiles() map[string]string {
	return map[string]string{
		"action.conf": "refs --in in=x.v1 --out out=x.v1 --decode in=protobuf --encode out=avro -- bash main.sh\n",
		"main.sh": `while IFS= read -r line; do
  out=$(jq -c 'if .type == "hello" then {type: "ready"} elif .type == "shutdown" then "shutdown" elif .type == "item" then ({type: "emit", delivery, payload: {id: .payload.id, price: {cents: (.payload.price.cents | tonumber)}}}, {type: "done", delivery}) else empty end' <<<"$line")
  [ "$out" = '"shutdown"' ] && exit 0
  [ -n "$out" ] && printf '%s\n' "$out"
done
`,
		"schemas/in.proto": `syntax = "proto3";
package acme;
import "shop/money.proto";
message In {
  string id = 1;
  shop.Money price = 2;
}
`,
		"schemas/shop/money.proto":  "syntax = \"proto3\";\npackage shop;\nmessage Money { int64 cents = 1; }\n",
		"schemas/out.avsc":          `{"type":"record","name":"Out","namespace":"acme","fields":[{"name":"id","type":"string"},{"name":"price","type":"shop.Money"}]}`,
		"schemas/shop.Money.avsc":   `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}`,
		"fixtures/refs.in.jsonl":    `{"payload": {"id": "p-1", "price": {"cents": "120"}}}` + "\n",
		"fixtures/refs.out.jsonl":   `{"outcome": "done", "emits": [{"outlet": "out", "payload": {"id": "p-1", "price": {"cents": 120}}}]}` + "\n",
		"schemas/unused/README.txt": "files the schemas do not refer to are not registered\n",
	}
}

// TestRunReferences: locally, a .proto that imports another file (found by its import path
// under schemas/) and an Avro schema that uses a named type of another file
// (schemas/FULLNAME.avsc) are registered with their references, as Confluent's serializers
// register them, and run: in millrace run and in millrace test's fixtures.
func TestRunReferences(t *testing.T) {
	a := writeAction(t, refsFiles())
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := actiondir.Single(a)
	opts := local.Options{Input: strings.NewReader(`{"payload": {"id": "p-1", "price": {"cents": "120"}}}` + "\n"), Out: &out, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	sum, err := local.Run(ctx, p, opts)
	if err != nil {
		t.Fatalf("Run = %v (summary %v)", err, sum)
	}
	if want := `{"outlet":"out","payload":{"id":"p-1","price":{"cents":120}}`; !strings.Contains(out.String(), want) {
		t.Errorf("Run printed\n%s\nwant a line with\n%s", out.String(), want)
	}
	if rep := runFixtures(t, a, false); !rep.Pass {
		t.Errorf("RunFixtures = %+v; want the fixture to pass", rep)
	}
}

// TestRunSchemaFileMistakes: a schema file of an encoded port that is missing, unreadable, not
// JSON, does not compile, or refers to a file that is not there stops the run before anything
// runs, with an error naming the file (and the compiler's line, where it gives one) and the fix.
func TestRunSchemaFileMistakes(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(files map[string]string)
		wants []string
	}{
		{"missing", func(f map[string]string) { delete(f, "schemas/out.avsc") },
			[]string{"schemas/out.avsc does not exist: put the port's schema there, or give it with --schema out=FILE.avsc"}},
		{"unreadable", func(f map[string]string) {
			delete(f, "schemas/out.avsc")
			f["schemas/out.avsc/x"] = "a directory, not a file"
		},
			[]string{"refs port out", "is a directory", "make it a readable file"}},
		{"avro not JSON", func(f map[string]string) { f["schemas/out.avsc"] = "{\"type\": \"record\",\n \"name\": Out}" },
			[]string{"schemas/out.avsc:2: the schema is not JSON", "fix the file"}},
		{"avro does not compile", func(f map[string]string) {
			f["schemas/out.avsc"] = `{"type":"record","name":"Out","fields":[{"name":"id"}]}`
		},
			[]string{"schemas/out.avsc cannot be its schema", "does not compile", "fix the file or the action line"}},
		{"avro reference missing", func(f map[string]string) { delete(f, "schemas/shop.Money.avsc") },
			[]string{"schemas/out.avsc uses the type shop.Money, which it does not define: put the schema of shop.Money in", "schemas/shop.Money.avsc"}},
		{"proto syntax", func(f map[string]string) {
			f["schemas/in.proto"] = "syntax = \"proto3\";\nmessage In {\n  string id = ;\n}\n"
		},
			[]string{"schemas/in.proto does not compile", "in.proto:3:", "fix it"}},
		{"proto import missing", func(f map[string]string) { delete(f, "schemas/shop/money.proto") },
			[]string{"schemas/in.proto does not compile", "shop/money.proto", "its imports are read from"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := refsFiles()
			tt.edit(files)
			p := actiondir.Single(writeAction(t, files))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := local.Options{Input: strings.NewReader(""), Logger: testLogger(t), Version: "test"}
			prepare(t, p, &opts)
			_, err := local.Run(ctx, p, opts)
			t.Log(err)
			for _, want := range tt.wants {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Run = %v; want an error with %q", err, want)
				}
			}
		})
	}
}
