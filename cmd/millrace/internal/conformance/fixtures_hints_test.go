package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
)

// TestFixtureFaultsSuggestNoUpdate: a fixture of an action that broke the protocol fails at
// once (not after the item timeout), naming the line, and does not suggest --update: no answer
// differs, there is nothing to accept.
func TestFixtureFaultsSuggestNoUpdate(t *testing.T) {
	tests := []struct{ behaviour, want string }{
		{"stdout-log", `"processing fixtures/0/0"`},
		{"bad-json", "a line that is not a valid JSON object"},
	}
	for _, tt := range tests {
		a := testAction(t, tt.behaviour)
		a.Timeout = time.Hour // the verdict must not wait for it
		writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.in.jsonl"), basicIn)
		golden := `{"outcome":"done"}` + "\n"
		writeFile(t, filepath.Join(a.Dir, "fixtures", "basic.out.jsonl"), golden)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep, err := conformance.RunFixtures(ctx, a, conformance.FixtureOptions{})
		cancel()
		if err != nil {
			t.Fatalf("RunFixtures(%s) = %v", tt.behaviour, err)
		}
		var text bytes.Buffer
		_ = rep.WriteText(&text)
		if rep.Pass || !strings.Contains(rep.Files[0].Error, tt.want) || !strings.Contains(rep.Files[0].Error, "production stop the process") {
			t.Fatalf("RunFixtures(%s) =\n%s\nwant a failure saying %q", tt.behaviour, text.String(), tt.want)
		}
		if strings.Contains(text.String(), "--update") {
			t.Fatalf("RunFixtures(%s) suggests --update for an action that broke the protocol:\n%s", tt.behaviour, text.String())
		}
		if got, _ := os.ReadFile(filepath.Join(a.Dir, "fixtures", "basic.out.jsonl")); string(got) != golden {
			t.Fatalf("RunFixtures(%s) rewrote the golden file: %s", tt.behaviour, got)
		}
	}
}

// TestRunCannotStart: an action whose command cannot start is an error wrapping ErrAction,
// and no check's line is written before it.
func TestRunCannotStart(t *testing.T) {
	a := testAction(t, "good")
	a.Command = []string{filepath.Join(a.Dir, "no-such-program")}
	var progress bytes.Buffer
	_, err := conformance.Run(context.Background(), a, conformance.Options{Inputs: testInputs(&a), Progress: &progress})
	if !errors.Is(err, conformance.ErrAction) || progress.Len() > 0 {
		t.Fatalf("Run(missing program) = %v, progress %q; want ErrAction and no progress", err, progress.String())
	}
}
