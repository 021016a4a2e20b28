package protocol_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// update rewrites the expected parts of the fixtures from what this package computes:
// go test ./protocol -run Fixture -update. Review the diff before committing it: the fixtures
// are the contract every SDK reproduces.
var update = flag.Bool("update", false, "rewrite the expectations in protocol/fixtures")

// readFixture decodes fixtures/name into v, refusing unknown keys so a typo in a fixture fails.
func readFixture(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("fixtures/%s: %v", name, err)
	}
}

// writeFixture writes v back to fixtures/name, indented by two spaces, non-ASCII as itself.
func writeFixture(t *testing.T, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("fixtures", name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// problemsJSON is a Problems list as the fixtures hold it; never null, so "no problem" is [].
func problemsJSON(ps protocol.Problems) []problemJSON {
	out := []problemJSON{}
	for _, p := range ps {
		out = append(out, problemJSON{Path: p.Path, Message: p.Message})
	}
	return out
}

type problemJSON struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func TestFixtureDescriptors(t *testing.T) {
	inputs, err := filepath.Glob("fixtures/descriptors/*.json")
	if err != nil {
		t.Fatal(err)
	}
	inputs = slices.DeleteFunc(inputs, func(p string) bool { return strings.HasSuffix(p, ".canonical.json") })
	if len(inputs) < 4 {
		t.Fatalf("fixtures/descriptors holds %d descriptors; want at least 4", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := protocol.UnmarshalDescriptor(data)
			if err != nil {
				t.Fatalf("UnmarshalDescriptor(%s) = %v", in, err)
			}
			if ps := protocol.Validate(spec); ps != nil {
				t.Errorf("Validate(%s) = %v; want a valid descriptor in every descriptor fixture", in, ps)
			}
			got, err := protocol.MarshalDescriptor(spec)
			if err != nil {
				t.Fatalf("MarshalDescriptor(%s) = %v", in, err)
			}
			canonicalPath := strings.TrimSuffix(in, ".json") + ".canonical.json"
			if *update {
				if err := os.WriteFile(canonicalPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(canonicalPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("MarshalDescriptor(%s) =\n%s\nwant (%s)\n%s", in, got, canonicalPath, want)
			}
			// The canonical form is a fixed point, and any proto3 JSON reader reads it.
			again, err := protocol.UnmarshalDescriptor(want)
			if err != nil {
				t.Fatalf("UnmarshalDescriptor(%s) = %v", canonicalPath, err)
			}
			if b, _ := protocol.MarshalDescriptor(again); !bytes.Equal(b, want) {
				t.Errorf("MarshalDescriptor(UnmarshalDescriptor(%s)) =\n%s\nwant it unchanged", canonicalPath, b)
			}
			if !json.Valid(want) {
				t.Errorf("%s is not valid JSON", canonicalPath)
			}
		})
	}
}

func TestFixtureFingerprints(t *testing.T) {
	var cases []struct {
		SchemaName  string `json:"schemaName"`
		Fingerprint string `json:"fingerprint"`
	}
	readFixture(t, "fingerprints.json", &cases)
	for i, c := range cases {
		got := protocol.Fingerprint(c.SchemaName)
		if *update {
			cases[i].Fingerprint = got
		} else if got != c.Fingerprint {
			t.Errorf("Fingerprint(%q) = %q; want %q", c.SchemaName, got, c.Fingerprint)
		}
	}
	if *update {
		writeFixture(t, "fingerprints.json", cases)
	}
}

func TestFixtureVersions(t *testing.T) {
	var cases []struct {
		Ours     string `json:"ours"`
		Theirs   string `json:"theirs"`
		Accepted bool   `json:"accepted"`
	}
	readFixture(t, "versions.json", &cases)
	for i, c := range cases {
		err := protocol.CheckVersionAgainst(c.Ours, c.Theirs)
		if *update {
			cases[i].Accepted = err == nil
		} else if (err == nil) != c.Accepted {
			t.Errorf("CheckVersionAgainst(%q, %q) = %v; want accepted %v", c.Ours, c.Theirs, err, c.Accepted)
		}
	}
	if *update {
		writeFixture(t, "versions.json", cases)
	}
}

func TestFixtureInvalid(t *testing.T) {
	var cases []struct {
		Name     string          `json:"name"`
		Spec     json.RawMessage `json:"spec"`
		Problems []problemJSON   `json:"problems"`
	}
	readFixture(t, "invalid.json", &cases)
	for i, c := range cases {
		spec, err := protocol.UnmarshalDescriptor(c.Spec)
		if err != nil {
			t.Fatalf("invalid.json %q: UnmarshalDescriptor = %v", c.Name, err)
		}
		got := problemsJSON(protocol.Validate(spec))
		if *update {
			cases[i].Problems = got
		} else if !slices.Equal(got, c.Problems) {
			t.Errorf("Validate(%s) =\n%v\nwant\n%v", c.Name, got, c.Problems)
		}
		if len(got) == 0 {
			t.Errorf("Validate(%s) found no problem; every case of invalid.json must have one", c.Name)
		}
	}
	if *update {
		writeFixture(t, "invalid.json", cases)
	}
}

func TestFixtureCompare(t *testing.T) {
	var cases []struct {
		Name       string          `json:"name"`
		Deployed   json.RawMessage `json:"deployed"`
		Discovered json.RawMessage `json:"discovered"`
		Problems   []problemJSON   `json:"problems"`
	}
	readFixture(t, "compare.json", &cases)
	for i, c := range cases {
		var deployed, discovered flowv1.StreamletDescriptor
		if err := protojson.Unmarshal(c.Deployed, &deployed); err != nil {
			t.Fatalf("compare.json %q: deployed: %v", c.Name, err)
		}
		if err := protojson.Unmarshal(c.Discovered, &discovered); err != nil {
			t.Fatalf("compare.json %q: discovered: %v", c.Name, err)
		}
		got := problemsJSON(protocol.Compare(&deployed, &discovered))
		if *update {
			cases[i].Problems = got
		} else if !slices.Equal(got, c.Problems) {
			t.Errorf("Compare(%s) =\n%v\nwant\n%v", c.Name, got, c.Problems)
		}
	}
	if *update {
		writeFixture(t, "compare.json", cases)
	}
}

func TestFixtureConfigValues(t *testing.T) {
	var cases []struct {
		Type  string  `json:"type"`
		Value string  `json:"value"`
		JSON  *string `json:"json"`  // the canonical JSON of the value; null when refused
		Error *string `json:"error"` // the refusal; null when accepted
	}
	readFixture(t, "config-values.json", &cases)
	for i, c := range cases {
		typ, ok := flowv1.ConfigType_value[c.Type]
		if !ok {
			t.Fatalf("config-values.json: unknown type %q", c.Type)
		}
		// The canonical JSON of one value is what config_json holds for it.
		var gotJSON, gotErr *string
		b, ps := protocol.ResolveConfig([]*flowv1.ConfigParameter{{Key: "k", Type: flowv1.ConfigType(typ)}}, map[string]string{"k": c.Value})
		if ps == nil {
			s := strings.TrimSuffix(strings.TrimPrefix(string(b), `{"k":`), "}")
			gotJSON = &s
		}
		if _, err := protocol.ParseConfigValue(flowv1.ConfigType(typ), c.Value); err != nil {
			s := strings.TrimPrefix(err.Error(), protocol.ErrConfigValue.Error()+": ")
			gotErr = &s
		}
		if *update {
			cases[i].JSON, cases[i].Error = gotJSON, gotErr
			continue
		}
		if str(gotJSON) != str(c.JSON) || str(gotErr) != str(c.Error) {
			t.Errorf("ParseConfigValue(%s, %q) = json %s, error %s; want json %s, error %s",
				c.Type, c.Value, str(gotJSON), str(gotErr), str(c.JSON), str(c.Error))
		}
	}
	if *update {
		writeFixture(t, "config-values.json", cases)
	}
}

func TestFixtureConfig(t *testing.T) {
	var cases []struct {
		Name       string            `json:"name"`
		Parameters []json.RawMessage `json:"parameters"`
		Values     map[string]string `json:"values"`
		ConfigJSON *string           `json:"configJson"` // null when there are problems
		Problems   []problemJSON     `json:"problems"`
	}
	readFixture(t, "config.json", &cases)
	for i, c := range cases {
		var params []*flowv1.ConfigParameter
		for _, raw := range c.Parameters {
			p := new(flowv1.ConfigParameter)
			if err := protojson.Unmarshal(raw, p); err != nil {
				t.Fatalf("config.json %q: parameter: %v", c.Name, err)
			}
			params = append(params, p)
		}
		b, ps := protocol.ResolveConfig(params, c.Values)
		var gotJSON *string
		if b != nil {
			s := string(b)
			gotJSON = &s
		}
		got := problemsJSON(ps)
		if *update {
			cases[i].ConfigJSON, cases[i].Problems = gotJSON, got
			continue
		}
		if str(gotJSON) != str(c.ConfigJSON) || !slices.Equal(got, c.Problems) {
			t.Errorf("ResolveConfig(%s) = %s,\n%v\nwant %s,\n%v", c.Name, str(gotJSON), got, str(c.ConfigJSON), c.Problems)
		}
	}
	if *update {
		writeFixture(t, "config.json", cases)
	}
}

// str renders an optional string for messages.
func str(s *string) string {
	if s == nil {
		return "null"
	}
	return "`" + *s + "`"
}

func TestFixtureState(t *testing.T) {
	var cases []struct {
		Name       string                        `json:"name"`
		Inlets     []string                      `json:"inlets"`
		Changelogs map[string]protocol.Changelog `json:"changelogs"`
		Open       []protocol.OpenInlet          `json:"open"`
		Opened     []protocol.OpenedInlet        `json:"opened,omitempty"`
		Problems   []string                      `json:"problems"`
	}
	readFixture(t, "state.json", &cases)
	for i, c := range cases {
		opened, ps := protocol.CheckStateOpen(c.Inlets, c.Changelogs, c.Open)
		if ps == nil {
			ps = []string{}
		}
		if *update {
			cases[i].Opened, cases[i].Problems = opened, ps
			continue
		}
		if !slices.Equal(ps, c.Problems) {
			t.Errorf("%s: problems\n  %q\nwant\n  %q", c.Name, ps, c.Problems)
		}
		if !slices.Equal(opened, c.Opened) {
			t.Errorf("%s: opened %+v; want %+v", c.Name, opened, c.Opened)
		}
		if (len(ps) == 0) == (len(opened) == 0 && len(c.Open) > 0) {
			t.Errorf("%s: both or neither of opened %v and problems %q", c.Name, opened, ps)
		}
	}
	if *update {
		writeFixture(t, "state.json", cases)
	}
}
