package actionconf

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
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

// TestDocsDefaults: docs/action-config.md's table of the config line shows the defaults of the one table.
func TestDocsDefaults(t *testing.T) {
	readme, err := os.ReadFile("../../docs/action-config.md")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"--concurrency N":   "1",
		"--timeout D":       "`" + short(defaults.Timeout) + "`",
		"--ready-timeout D": "`" + short(defaults.ReadyTimeout) + "`",
		"--window N":        "0",
		"--retries N":       "3",
	}
	if defaults.Concurrency != 1 || defaults.Window != 0 || defaults.Retries != 3 {
		t.Fatalf("defaults = %+v: update this test and docs/action-config.md's table together", defaults)
	}
	for flag, def := range want {
		re := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(flag) + "` \\|.*\\| ([^|]+) \\|$")
		m := re.FindSubmatch(readme)
		if m == nil {
			t.Errorf("docs/action-config.md: no row for %s in the config line's table", flag)
			continue
		}
		if got := strings.TrimSpace(string(m[1])); got != def {
			t.Errorf("docs/action-config.md: default of %s is %s, the parser's is %s", flag, got, def)
		}
	}
}

// short writes d as the docs do: 1m, 10s.
func short(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
