package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestExampleActions runs the conformance kit and the fixtures on every directory under
// actions/, the stateful ones (--state on their line) with their state kept per key as the
// line says. A missing runtime (python3, node, bash, jq, go) skips its test, or fails it in CI.
func TestExampleActions(t *testing.T) {
	entries, err := os.ReadDir("../../../../actions")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n++
		dir := filepath.Join("..", "..", "..", "..", "actions", e.Name())
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel()
			a, err := actiondir.Load(dir)
			if err != nil {
				t.Fatalf("Load(%s) = %v", dir, err)
			}
			progs := []string{a.Command[0]}
			if a.Command[0] == "bash" {
				progs = append(progs, "jq")
			}
			testkit.NeedTools(t, progs...)
			fx, err := conformance.LoadFixtures(a.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(fx) == 0 {
				t.Fatalf("%s has no fixtures: write fixtures/NAME.in.jsonl and NAME.out.jsonl (see docs/cli.md, millrace test action)", dir)
			}
			if len(a.State) > 0 { // a stateful example's golden files say each key's state after each item
				for _, f := range fx {
					golden, err := os.ReadFile(f.Out)
					if err != nil {
						t.Fatal(err)
					}
					for i, l := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
						if !strings.Contains(l, `"state":`) {
							t.Errorf("%s line %d holds no \"state\": a stateful example's golden line says the key's state after the item", f.Out, i+1)
						}
					}
				}
			}
			checkAction(t, dir)
		})
	}
	if n == 0 {
		t.Fatal("no action directory under actions/")
	}
}
