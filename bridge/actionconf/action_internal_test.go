package actionconf

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestTimeoutZeroIsNone: --timeout 0s reaches the engine as no timeout (engine.Config's
// ItemTimeout 0), for the bridge and `millrace run` alike (both serve through newConversation),
// and the line keeps it.
func TestTimeoutZeroIsNone(t *testing.T) {
	a, err := ParseLine(strings.Fields("s --in in=x.v1 --timeout 0s -- prog"))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.EngineConfig().ItemTimeout; got != 0 {
		t.Errorf("engine ItemTimeout of --timeout 0s = %v, want 0 (no timeout)", got)
	}
	if !strings.Contains(a.Line(), "--timeout 0s") {
		t.Errorf("Line() = %q, lost --timeout 0s", a.Line())
	}
	d, err := ParseLine(strings.Fields("s --in in=x.v1 -- prog"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.EngineConfig().ItemTimeout; got != defaults.Timeout {
		t.Errorf("engine ItemTimeout without --timeout = %v, want the default %v", got, defaults.Timeout)
	}
}

// update rewrites the docs tables the code generates (TestDocsFlags).
var update = flag.Bool("update", false, "rewrite docs/action-config.md's table of the config line's flags from the code")

// TestDocsFlags: docs/action-config.md's table of the config line is the one the flags' rows
// print: every flag the parser reads, its meaning and its default.
func TestDocsFlags(t *testing.T) {
	testkit.DocTable(t, "../../docs/action-config.md", "The line comes from the arguments", FlagsMarkdown(), *update)
}

// TestFlagsAreTheParsers: every row's flag is read by the parser (a line with it parses, or
// fails on its value, never as an unknown flag), and the unknown-flag error lists every row.
func TestFlagsAreTheParsers(t *testing.T) {
	_, err := ParseLine([]string{"x", "--in", "a=a.v1", "--bogus", "--", "cat"})
	for _, f := range lineFlags {
		if err == nil || !strings.Contains(err.Error(), f.name+",") && !strings.Contains(err.Error(), f.name+", or --") {
			t.Errorf("the unknown-flag error %v does not list %s", err, f.name)
		}
		line := []string{"x", "--in", "a=a.v1", "--out", "b=b.v1", f.name}
		if f.form != "" {
			line = append(line, "b")
		}
		if _, err := ParseLine(append(line, "--", "cat")); err != nil && strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%s: %v", f.name, err)
		}
	}
	if defaults.Concurrency != 1 || defaults.Window != 0 || defaults.Retries != 3 || defaults.Timeout != time.Minute || defaults.ReadyTimeout != 10*time.Second {
		t.Errorf("defaults = %+v: the docs table shows them (TestDocsFlags); update both", defaults)
	}
}
