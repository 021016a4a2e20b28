package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ankka-flow/millrace/stdio"
)

// fixtureTimestamp is the timestamp of a fixture item that gives none: 2026-01-01T00:00:00Z in
// milliseconds, fixed so golden files do not change from run to run.
const fixtureTimestamp = 1767225600000

// fixtureTopic is the topic of a fixture item that gives none.
const fixtureTopic = "fixtures"

// Fixture is one fixtures/NAME.in.jsonl with its optional NAME.config.json and its golden
// NAME.out.jsonl.
type Fixture struct {
	Name       string
	In         string          // path of NAME.in.jsonl
	Out        string          // path of NAME.out.jsonl (it may not exist yet)
	ConfigPath string          // path of NAME.config.json, "" when there is none
	Config     json.RawMessage // its content
	lines      []inLine
}

// inLine is one line of an .in.jsonl file, as the test author writes it: every field but the
// payload is optional.
type inLine struct {
	line      int
	Key       *string         `json:"key"`
	KeyBase64 string          `json:"keyBase64"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers"`
	ID        *string         `json:"id"`
	Inlet     *string         `json:"inlet"`
	Topic     *string         `json:"topic"`
	Partition *int32          `json:"partition"`
	Offset    *int64          `json:"offset"`
	Timestamp *int64          `json:"timestamp"`
	// State is the state the item sees, overriding what the file kept so far: nil when the
	// line has none, "null" for no state.
	State json.RawMessage `json:"state"`
}

// LoadFixtures reads every fixtures/*.in.jsonl under dir, sorted by name. No fixtures folder
// means none. A line that is not a JSON object, or a config that is not JSON, is an error
// wrapping errFixture that names the file and line.
func LoadFixtures(dir string) ([]*Fixture, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "fixtures", "*.in.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*Fixture
	for _, p := range paths {
		base := strings.TrimSuffix(p, ".in.jsonl")
		f := &Fixture{Name: filepath.Base(base), In: p, Out: base + ".out.jsonl"}
		if data, err := os.ReadFile(base + ".config.json"); err == nil {
			if !json.Valid(data) {
				return nil, fmt.Errorf("%w: %s is not valid JSON: write the config object hello carries, e.g. {\"min-rooms\": 2}", errFixture, base+".config.json")
			}
			f.ConfigPath, f.Config = base+".config.json", bytes.TrimSpace(data)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", errFixture, err)
		}
		lines, err := readLines(p)
		if err != nil {
			return nil, err
		}
		for i, l := range lines {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			in := inLine{line: i + 1}
			if err := json.Unmarshal(l, &in); err != nil || bytes.TrimSpace(l)[0] != '{' {
				return nil, fmt.Errorf("%w: %s:%d: not a JSON object (%v); write one item per line: {\"key\": \"k1\", \"payload\": {…}}", errFixture, p, i+1, errText(err))
			}
			if len(in.Payload) == 0 {
				in.Payload = json.RawMessage("null")
			}
			f.lines = append(f.lines, in)
		}
		out = append(out, f)
	}
	return out, nil
}

func errText(err error) string {
	if err == nil {
		return "not an object"
	}
	return err.Error()
}

func readLines(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errFixture, err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, stdio.MaxLineBytes+1)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errFixture, path, err)
	}
	return lines, nil
}

// Inputs returns the fixture's items, filled as the runner sends them.
func (f *Fixture) Inputs(a *Action) []Input {
	var in []Input
	for i, l := range f.lines {
		it := stdio.Item{Key: l.Key, KeyBase64: l.KeyBase64, Payload: l.Payload, Headers: l.Headers}
		it = fillItem(a, it, int64(i), "")
		if l.Inlet != nil {
			it.Inlet = *l.Inlet
		}
		if l.Topic != nil {
			it.Topic = *l.Topic
		}
		if l.Partition != nil {
			it.Partition = *l.Partition
		}
		if l.Offset != nil {
			it.Offset = *l.Offset
		}
		if l.Timestamp != nil {
			it.Timestamp = *l.Timestamp
		}
		it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
		if l.ID != nil {
			it.ID = *l.ID
		}
		it.IdempotencyKey = a.idempotencyKey(&it)
		if l.State != nil && string(bytes.TrimSpace(l.State)) != "null" {
			it.State = bytes.TrimSpace(l.State)
		}
		in = append(in, Input{Item: it, Source: fmt.Sprintf("%s:%d", filepath.Join("fixtures", filepath.Base(f.In)), l.line), stateSet: l.State != nil})
	}
	return in
}

// fillItem fills what the test author left out: run, inlet, topic, partition 0, offset, a
// fixed timestamp, id and idempotencyKey.
func fillItem(a *Action, it stdio.Item, offset int64, topic string) stdio.Item {
	if topic == "" {
		topic = fixtureTopic
	}
	it.Run = "fixtures"
	it.Inlet = a.inlet()
	it.Topic = topic
	it.Offset = offset
	it.Timestamp = fixtureTimestamp
	it.ID = fmt.Sprintf("%s/%d/%d", it.Topic, it.Partition, it.Offset)
	it.IdempotencyKey = a.idempotencyKey(&it)
	it.Attempt = 1
	return it
}
