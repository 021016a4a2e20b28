package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestHelpIsComplete: every -h exits 0 and names every flag: run's usage line lists each flag
// it defines, bridge's lists each flag of the config line the parser knows, and `help -h` is
// help too.
func TestHelpIsComplete(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  (-[a-z-]+)`)
	for _, c := range commands {
		code, out, errOut := runCmd(t, c.name, "-h")
		if code != 0 || !strings.HasPrefix(out, "Usage: millrace "+c.name) {
			t.Errorf("%s -h = %d, %q (stderr %q); want 0 and its usage", c.name, code, out, errOut)
			continue
		}
		usage, _, _ := strings.Cut(out, "\n")
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			if strings.HasPrefix(m[1], "--") { // the config line's flags, in bridge -h
				continue
			}
			if !strings.Contains(usage, "-"+m[1]) && !strings.Contains(usage, m[1]+" ") && !strings.HasSuffix(usage, m[1]+"]") {
				t.Errorf("%s -h: the usage line %q does not name its flag %s", c.name, usage, m[1])
			}
		}
	}
	if code, out, _ := runCmd(t, "help", "-h"); code != 0 || !strings.Contains(out, "Commands:") {
		t.Errorf("help -h = %d, %q; want 0 and the usage", code, out)
	}
	// the parser's own list of flags, from its error for an unknown one
	_, err := actionconf.ParseLine([]string{"x", "--in", "a=a.v1", "--bogus", "--", "cat"})
	_, list, ok := strings.Cut(errString(err), "expected one of ")
	if !ok {
		t.Fatalf("ParseLine(--bogus) = %v; want the list of flags", err)
	}
	_, out, _ := runCmd(t, "bridge", "-h")
	for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(list, -1) {
		if !strings.Contains(out, "\n  "+f) {
			t.Errorf("bridge -h does not show the config-line flag %s:\n%s", f, out)
		}
	}
	if !strings.Contains(out, "(default 10s)") || !strings.Contains(out, "(default 1m)") {
		t.Errorf("bridge -h shows no defaults of the config line (--ready-timeout, --timeout):\n%s", out)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDescribePipeline: describe of a pipeline file says describe takes one action and how to
// describe each streamlet, not a parse error about continuation lines.
func TestDescribePipeline(t *testing.T) {
	code, _, errOut := runCmd(t, "describe", "../../actions/orders.pipeline")
	if code != 1 || strings.Contains(errOut, `\`) {
		t.Fatalf("describe PIPELINE = %d, %q; want 1 and no word of continuation lines", code, errOut)
	}
	for _, want := range []string{"is a pipeline file; describe takes one action", "millrace describe ../../actions/route-orders", "millrace describe ../../actions/convert-currency"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("describe PIPELINE said %q; want %q", errOut, want)
		}
	}
}

// TestRunPartitionsOnExistingData: --partitions that differs from the partitions of the
// topics an existing --data folder holds is an error naming the topic, not ignored.
func TestRunPartitionsOnExistingData(t *testing.T) {
	testkit.NeedTools(t, "python3") // actions/score-listing
	data := filepath.Join(t.TempDir(), "data")
	sample := "../../actions/score-listing/sample.jsonl"
	if code, _, errOut := runCmd(t, "run", "../../actions/score-listing", "--input", sample, "--data", data); code != 0 {
		t.Fatalf("run --data (first) = %d: %s", code, errOut)
	}
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("run --data left no data folder: %v", err)
	}
	code, _, errOut := runCmd(t, "run", "../../actions/score-listing", "--input", sample, "--data", data, "--partitions", "3")
	if code != 1 || !strings.Contains(errOut, "--partitions 3, but topic ") || !strings.Contains(errOut, "exists in --data "+data+" with 1") {
		t.Fatalf("run --data --partitions 3 (second) = %d, %q; want 1 naming the topic and its 1 partition", code, errOut)
	}
	if code, _, errOut := runCmd(t, "run", "../../actions/score-listing", "--input", sample, "--data", data, "--partitions", "1"); code != 0 {
		t.Fatalf("run --data --partitions 1 (the same) = %d: %s", code, errOut)
	}
}

// TestVersionFlag: millrace --version is millrace version.
func TestVersionFlag(t *testing.T) {
	_, want, _ := runCmd(t, "version")
	for _, arg := range []string{"--version", "-version"} {
		if code, out, errOut := runCmd(t, arg); code != 0 || out != want || !strings.HasPrefix(out, "millrace ") {
			t.Errorf("millrace %s = %d, %q (stderr %q); want 0 and %q", arg, code, out, errOut, want)
		}
	}
	if code, _, errOut := runCmd(t, "--version", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("millrace --version extra = %d, %q; want 2, naming the argument", code, errOut)
	}
}
