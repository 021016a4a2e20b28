package local_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// FuzzRecord: any input line is either refused with ErrInput or becomes a record on a topic
// whose value is empty or valid JSON.
func FuzzRecord(f *testing.F) {
	for _, s := range []string{
		`{"key": "k", "payload": {"a": [1, 2]}, "headers": [{"key": "h", "value": "v"}]}`,
		`{"keyBase64": "AAE=", "payload": null, "topic": "t"}`,
		`{"payload": 1} trailing`,
		`{"paylaod": 1}`,
		`[1, 2]`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, line []byte, bare bool) {
		rec, err := local.Record(line, bare, 1, "in")
		if err != nil {
			if !errors.Is(err, local.ErrInput) {
				t.Fatalf("Record(%q) = %v; want an ErrInput error", line, err)
			}
			return
		}
		if rec.Topic == "" || (len(rec.Value) > 0 && !json.Valid(rec.Value)) {
			t.Fatalf("Record(%q) = topic %q, value %q; want a topic and a JSON value", line, rec.Topic, rec.Value)
		}
	})
}
