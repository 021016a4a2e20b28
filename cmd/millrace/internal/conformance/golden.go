package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"slices"
	"sort"
	"strings"
)

// readGolden reads NAME.out.jsonl: one JSON object per line.
func readGolden(path string) ([]json.RawMessage, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for i, l := range lines {
		t := bytes.TrimSpace(l)
		if len(t) == 0 {
			continue
		}
		if t[0] != '{' || !json.Valid(t) {
			return nil, fmt.Errorf("%w: %s:%d: not a JSON object; each line is an answer such as {\"outcome\": \"done\", \"emits\": [{\"payload\": {}}]}", errFixture, path, i+1)
		}
		out = append(out, json.RawMessage(t))
	}
	return out, nil
}

// writeGolden writes the answers as NAME.out.jsonl, with every error's message and abstain's
// reason (a test of an error names which one). The outlet is left out when the action has one.
func writeGolden(path string, got []*answer, outlets int) error {
	var buf bytes.Buffer
	for _, ans := range got {
		a := *ans
		if outlets == 1 {
			a.Emits = slices.Clone(a.Emits)
			for j := range a.Emits {
				a.Emits[j].Outlet = ""
			}
		}
		line, err := marshal(&a)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing golden file %s: %w", path, err)
	}
	return nil
}

// marshal writes v as compact JSON without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

var (
	answerFields = []string{"outcome", "emits", "retryable", "message", "reason", "state"}
	emitFields   = []string{"outlet", "key", "keyBase64", "payload", "headers"}
)

// compareAnswer compares a golden line with an answer, by value, fields absent from the golden
// line left out; it returns the differences, one line each, or nil.
func compareAnswer(a *Action, wantRaw json.RawMessage, got *answer) []string {
	var want map[string]any
	if err := decodeNumbers(wantRaw, &want); err != nil {
		return []string{"the golden line is not a JSON object: " + err.Error()}
	}
	var gotV map[string]any
	gotRaw, _ := marshal(got)
	_ = decodeNumbers(gotRaw, &gotV)
	var p []string
	for k := range want {
		if !slices.Contains(answerFields, k) {
			p = append(p, fmt.Sprintf("%s: unknown field in the golden line (want %s)", k, strings.Join(answerFields, ", ")))
		}
	}
	wo, _ := want["outcome"].(string)
	if wo != got.Outcome {
		extra := ""
		if got.Message != "" {
			extra = fmt.Sprintf(" (%q)", got.Message)
		} else if got.Reason != "" {
			extra = fmt.Sprintf(" (%q)", got.Reason)
		}
		return append(p, fmt.Sprintf("outcome: want %s, got %s%s", show(want["outcome"]), got.Outcome, extra))
	}
	for _, k := range []string{"retryable", "message", "reason", "state"} {
		if w, ok := want[k]; ok {
			diff(k, w, gotV[k], &p)
		}
	}
	var wantEmits []any
	if w, ok := want["emits"]; ok {
		if wantEmits, ok = w.([]any); !ok && w != nil {
			return append(p, "emits: the golden line's emits is not a list")
		}
	}
	gotEmits, _ := gotV["emits"].([]any)
	if len(wantEmits) != len(gotEmits) {
		p = append(p, fmt.Sprintf("emits: want %d, got %d", len(wantEmits), len(gotEmits)))
	}
	for i := range min(len(wantEmits), len(gotEmits)) {
		we, ok := wantEmits[i].(map[string]any)
		if !ok {
			p = append(p, fmt.Sprintf("emits[%d]: the golden emit is not an object", i))
			continue
		}
		ge, _ := gotEmits[i].(map[string]any)
		path := fmt.Sprintf("emits[%d]", i)
		for k := range we {
			if !slices.Contains(emitFields, k) {
				p = append(p, fmt.Sprintf("%s.%s: unknown field in the golden emit (want %s)", path, k, strings.Join(emitFields, ", ")))
			}
		}
		if _, ok := we["outlet"]; !ok {
			switch name, n, ok := a.DefaultOutlet(); {
			case ok:
				we["outlet"] = name
			case n == 0 && len(a.Outlets) == 0:
			default:
				p = append(p, fmt.Sprintf("%s.outlet: the golden emit names no outlet, but the action has %d outlets besides --dead-letter and --fallback (%s): name it", path, n, strings.Join(a.outlets(), ", ")))
			}
		}
		for _, k := range emitFields {
			if w, ok := we[k]; ok {
				diff(path+"."+k, w, ge[k], &p)
			}
		}
	}
	return p
}

func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// diff appends the differences between want and got, by value, with their paths.
func diff(path string, want, got any, p *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
			return
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !gok:
				*p = append(*p, fmt.Sprintf("%s.%s: want %s, got nothing", path, k, show(wv)))
			case !wok:
				*p = append(*p, fmt.Sprintf("%s.%s: not expected, got %s", path, k, show(gv)))
			default:
				diff(path+"."+k, wv, gv, p)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
			return
		}
		if len(w) != len(g) {
			*p = append(*p, fmt.Sprintf("%s: want %d elements, got %d: want %s, got %s", path, len(w), len(g), show(want), show(got)))
			return
		}
		for i := range w {
			diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], p)
		}
	case json.Number:
		g, ok := got.(json.Number)
		if !ok || !sameNumber(w, g) {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
		}
	default:
		if want != got {
			*p = append(*p, fmt.Sprintf("%s: want %s, got %s", path, show(want), show(got)))
		}
	}
}

func sameNumber(a, b json.Number) bool {
	x, ok1 := new(big.Float).SetString(string(a))
	y, ok2 := new(big.Float).SetString(string(b))
	if !ok1 || !ok2 {
		return a == b
	}
	return x.Cmp(y) == 0
}

// show writes a value for a diff line: compact JSON, shortened.
func show(v any) string {
	if v == nil {
		return "null"
	}
	b, err := marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return shorten(string(b), 120)
}
