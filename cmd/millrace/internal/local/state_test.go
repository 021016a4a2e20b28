package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// TestRunStateAcrossData: `millrace run` keeps state on the embedded broker: the Python SDK's
// count example counts per key; a second run on the same --data continues the counts (its
// store caught up from the first run's files and changelog), a run without --data starts
// over, and its temporary state folder is gone once it returns.
func TestRunStateAcrossData(t *testing.T) {
	needRuntimes(t, "python")
	count, err := filepath.Abs("../../../../sdk/python/examples/count.py")
	if err != nil {
		t.Fatal(err)
	}
	a, err := actiondir.Load("count --in events=event.v1 --out counts=count.v1 --state events -- python3 " + count)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where a run without --data makes its state folder
	run := func(data, in string) (map[string][]int, *local.Summary) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		p := actiondir.Single(a)
		p.Name = a.Name
		sum, err := local.Run(ctx, p, local.Options{DataDir: data, Input: strings.NewReader(in), Out: &out, Logger: testLogger(t), Version: "test"})
		if err != nil {
			t.Fatalf("Run (--data %q) = %v (summary %v)", data, err, sum)
		}
		counts := map[string][]int{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var rec struct {
				Key     string `json:"key"`
				Payload struct {
					N int `json:"n"`
				} `json:"payload"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("output line %q: %v", line, err)
			}
			counts[rec.Key] = append(counts[rec.Key], rec.Payload.N)
		}
		return counts, sum
	}
	first := `{"key":"u1","payload":{}}
{"key":"u2","payload":{}}
{"key":"u1","payload":{}}
{"key":"u1","payload":{}}
`
	second := `{"key":"u1","payload":{}}
{"key":"u2","payload":{}}
`
	data := t.TempDir()
	got, sum := run(data, first)
	if !equalCounts(got, map[string][]int{"u1": {1, 2, 3}, "u2": {1}}) {
		t.Fatalf("first run counted %v; want u1 1 2 3, u2 1", got)
	}
	if sum.State["count.events"] != 2 {
		t.Errorf("first run's summary state = %v; want count.events holding 2 keys", sum.State)
	}
	if _, err := os.Stat(filepath.Join(data, "state", "count")); err != nil {
		t.Errorf("the store folder under --data: %v; want DATA/state/count", err)
	}
	if got, _ := run(data, second); !equalCounts(got, map[string][]int{"u1": {4}, "u2": {2}}) {
		t.Errorf("second run on the same --data counted %v; want u1 4, u2 2 (continued)", got)
	}
	if got, _ := run("", second); !equalCounts(got, map[string][]int{"u1": {1}, "u2": {1}}) {
		t.Errorf("a run without --data counted %v; want u1 1, u2 1 (started over)", got)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "millrace-state-*"))
	if err != nil || len(left) > 0 {
		t.Errorf("after a run without --data, %v (%v) left in TMPDIR; want its state folder removed", left, err)
	}
}

func equalCounts(a, b map[string][]int) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]int])
}
