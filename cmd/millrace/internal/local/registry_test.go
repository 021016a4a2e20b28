package local_test

import (
	"bytes"
	"context"
	"errors"
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

// TestRunEncoded: an action from an Avro topic to a Protobuf one (actions/price-band, in bash)
// runs on the embedded broker and schema registry: its JSON input lines are encoded with
// schemas/listings.avsc, its outputs printed decoded, the dead letter (the input record, still
// Avro) too.
func TestRunEncoded(t *testing.T) {
	testkit.NeedTools(t, "bash", "jq") // actions/price-band
	a, err := actiondir.Load("../../../../actions/price-band")
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile("../../../../actions/price-band/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := actiondir.Single(a)
	opts := local.Options{Input: bytes.NewReader(in), Out: &out, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	sum, err := local.Run(ctx, p, opts)
	if err != nil {
		t.Fatalf("Run = %v (summary %v)", err, sum)
	}
	got := maskTrace(out.String())
	for _, want := range []string{
		`{"outlet":"bands","key":"l-1","payload":{"listingId":"l-1","city":"Oslo","rooms":3,"pricePerRoom":120000,"band":"MID"},"headers":[{"key":"traceparent","value":"00-…"}]}`,
		`{"outlet":"bands","key":"l-2","payload":{"listingId":"l-2","rooms":2,"pricePerRoom":75000,"band":"LOW"},"headers":[{"key":"traceparent","value":"00-…"}]}`,
		`{"outlet":"bands","key":"l-3","payload":{"listingId":"l-3","city":"Bergen","rooms":4,"pricePerRoom":247500,"band":"HIGH"},"headers":[{"key":"traceparent","value":"00-…"}]}`,
		`{"outlet":"rejects","key":"l-4","payload":{"id":"l-4","price":80000,"rooms":0,"city":{"string":"Tromsø"}},"headers":[{"key":"millrace-error","value":"action answered non-retryable error: listing l-4 has no rooms: no price per room"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Run printed\n%s\nwant a line with\n%s", got, want)
		}
	}
	if !sum.Complete || sum.In != 4 || sum.Out["bands"] != 3 || sum.Out["rejects"] != 1 {
		t.Errorf("summary = %+v; want complete, 4 in, 3 bands, 1 reject", sum)
	}
}

// TestRunEncodedMistakes: each mistake of an encoded run is one error naming the fix, before
// anything runs (a schema missing, a --schema for no encoded port) or at the input line that
// does not fit its schema.
func TestRunEncodedMistakes(t *testing.T) {
	avsc, err := filepath.Abs("../../../../actions/price-band/schemas/listings.avsc")
	if err != nil {
		t.Fatal(err)
	}
	line := func(t *testing.T, s string) *actiondir.Pipeline {
		a, err := actiondir.Load(s)
		if err != nil {
			t.Fatal(err)
		}
		return actiondir.Single(a)
	}
	tests := []struct {
		name, line, input string
		schemas           map[string]string
		want              string
	}{
		{"no schema", `x --in in=l.v1 --out out=l.v1 --decode in=avro -- cat`, "", nil, "give its schema with --schema in=FILE.avsc"},
		{"wrong extension", `x --in in=l.v1 --out out=l.v1 --decode in=avro -- cat`, "", map[string]string{"in": "l.proto"}, "whose schemas are .avsc files"},
		{"unused", `x --in in=l.v1 --out out=l.v1 --decode in=avro -- cat`, "", map[string]string{"in": avsc, "out": avsc}, "no action declares port out encoded"},
		{"plain", `x --in in=l.v1 --out out=l.v1 -- cat`, "", map[string]string{"in": avsc}, "no action declares an encoded port"},
		{"misfit", "../../../../actions/price-band", `{"payload": {"id": "l-1"}}` + "\n", nil, "input line 1: its payload does not fit the avro schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := line(t, tt.line)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := local.Options{Input: strings.NewReader(tt.input), Logger: testLogger(t), Version: "test", Schemas: tt.schemas}
			prepare(t, p, &opts)
			_, err := local.Run(ctx, p, opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v; want an error with %q", err, tt.want)
			}
			if tt.name == "misfit" && !errors.Is(err, local.ErrInput) {
				t.Errorf("Run = %v; want it to match ErrInput", err)
			}
		})
	}
}

func TestParseSchemaFlag(t *testing.T) {
	files := map[string]string{}
	for _, v := range []string{"listings=a.avsc", "listings.key=k.avsc"} {
		if err := local.ParseSchemaFlag(files, v); err != nil {
			t.Fatalf("ParseSchemaFlag(%q) = %v", v, err)
		}
	}
	if files["listings"] != "a.avsc" || files["listings.key"] != "k.avsc" {
		t.Errorf("files = %v", files)
	}
	for v, want := range map[string]string{
		"listings":            "expected PORT=FILE",
		"listings.value=a":    "after the port comes .key",
		"listings=again.avsc": "given twice",
	} {
		if err := local.ParseSchemaFlag(files, v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchemaFlag(%q) = %v; want %q", v, err, want)
		}
	}
}

// TestFixtureRoundTrip: `millrace test` passes fixture payloads through the encoded ports'
// schemas, as the bridge does: price-band's fixtures pass after the round trip, an input that
// does not fit its inlet's schema fails its file naming the line, and an emit that does not fit
// its outlet's is the non-retryable error.
func TestFixtureRoundTrip(t *testing.T) {
	testkit.NeedTools(t, "bash", "jq") // actions/price-band
	a, err := actiondir.Load("../../../../actions/price-band")
	if err != nil {
		t.Fatal(err)
	}
	rt, stop, err := local.FixtureRoundTrip(a, nil, testLogger(t))
	if err != nil || rt == nil {
		t.Fatalf("FixtureRoundTrip = %v, %v; want the round trip of an encoded action", rt != nil, err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := conformance.RunFixtures(ctx, a.Conformance("test"), conformance.FixtureOptions{RoundTrip: rt})
	if err != nil || !rep.Pass {
		t.Fatalf("RunFixtures = %+v, %v; want every fixture to pass", rep, err)
	}
	out, err := rt(ctx, "bands", false, false, []byte(`{"listingId":"l-1","rooms":"three"}`))
	if err == nil {
		t.Errorf("round trip of an emit that does not fit = %s; want an error", out)
	}

	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../../../actions/price-band")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixtures/basic.in.jsonl"), []byte(`{"key": "l-9", "payload": {"id": "l-9"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rt2, stop2, err := local.FixtureRoundTrip(b, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	rep, err = conformance.RunFixtures(ctx, b.Conformance("test"), conformance.FixtureOptions{RoundTrip: rt2})
	if err != nil || rep.Pass || len(rep.Files) != 1 || !strings.Contains(rep.Files[0].Error, "fixtures/basic.in.jsonl:1: the payload does not fit inlet listings's schema") {
		t.Fatalf("RunFixtures of a misfit input = %+v, %v; want its file failed naming the line", rep, err)
	}
	// an outlet schema the emits do not fit: band a number, not an enum's name
	misfit := t.TempDir()
	if err := os.CopyFS(misfit, os.DirFS("../../../../actions/price-band")); err != nil {
		t.Fatal(err)
	}
	proto, err := os.ReadFile(filepath.Join(misfit, "schemas/bands.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(misfit, "schemas/bands.proto"), []byte(strings.Replace(string(proto), "Band band = 5;", "int32 band = 5;", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := actiondir.Load(misfit)
	if err != nil {
		t.Fatal(err)
	}
	rt3, stop3, err := local.FixtureRoundTrip(m, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	rep, err = conformance.RunFixtures(ctx, m.Conformance("test"), conformance.FixtureOptions{RoundTrip: rt3})
	if err != nil || rep.Pass || len(rep.Files) != 1 || len(rep.Files[0].Failures) != 3 || !strings.Contains(string(rep.Files[0].Failures[0].Got), `"outcome":"error","retryable":false,"message":"emit 1 to outlet \"bands\" does not fit its schema`) {
		t.Fatalf("RunFixtures with emits that do not fit = %+v, %v; want the three emitting items answered with the non-retryable error", rep, err)
	}
	plain, err := actiondir.Load("../../../../actions/drop-debug")
	if err != nil {
		t.Fatal(err)
	}
	if rt, stop, err := local.FixtureRoundTrip(plain, nil, testLogger(t)); rt != nil || err != nil {
		t.Errorf("FixtureRoundTrip(plain) = %v, %v; want none", rt != nil, err)
	} else {
		stop()
	}
}

// TestRunJSONSchema: a JSON Schema port runs locally with its schemas/PORT.json, the outlet's
// schema as the latest version of its subject, as a pinned version or as a pinned id: an input
// that fits goes through; the echo of one that does not fit the outlet's schema is
// dead-lettered.
func TestRunJSONSchema(t *testing.T) {
	for _, pin := range []string{"", ",version=3", ",id=7"} {
		t.Run("encode out=jsonschema"+pin, func(t *testing.T) { runJSONSchema(t, pin) })
	}
}

func runJSONSchema(t *testing.T, pin string) {
	testkit.NeedTools(t, "bash", "jq") // this test's action
	dir := t.TempDir()
	files := map[string]string{
		"action.conf": "echo-js --in in=x.v1 --out out=x.v1 --out dlq=x.v1 --dead-letter dlq --decode in=jsonschema --encode out=jsonschema" + pin + " -- bash main.sh\n",
		"main.sh": `while IFS= read -r line; do
  out=$(jq -c 'if .type == "hello" then {type: "ready"} elif .type == "shutdown" then "shutdown" elif .type == "item" then ({type: "emit", delivery, payload}, {type: "done", delivery}) else empty end' <<<"$line")
  [ "$out" = '"shutdown"' ] && exit 0
  [ -n "$out" ] && printf '%s\n' "$out"
done
`,
		"schemas/in.json":  `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`,
		"schemas/out.json": `{"type":"object","properties":{"n":{"type":"integer","maximum":10}},"required":["n"]}`,
	}
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
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := actiondir.Single(a)
	opts := local.Options{Input: strings.NewReader(`{"payload": {"n": 3}}` + "\n" + `{"payload": {"n": 30}}` + "\n"), Out: &out, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	sum, err := local.Run(ctx, p, opts)
	if err != nil {
		t.Fatalf("Run = %v (summary %v)", err, sum)
	}
	got := out.String()
	if !strings.Contains(got, `{"outlet":"out","payload":{"n":3}`) || !strings.Contains(got, `{"outlet":"dlq","payload":{"n":30},"headers":[{"key":"millrace-error","value":"emit 1 to outlet \"out\"`) {
		t.Errorf("Run printed\n%s\nwant n 3 on out and n 30 dead-lettered for its emit", got)
	}
}
