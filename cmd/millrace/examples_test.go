package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// runBlock finds, in a page, the `go run ./cmd/millrace run …` command and the output block
// that follows the word "prints".
var (
	// traceValue is a traceparent's value, which the pages show as 00-…: the bridge draws its
	// ids per run.
	traceValue  = regexp.MustCompile(`"traceparent","value":"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"`)
	runLine     = regexp.MustCompile("(?m)^go run \\./cmd/millrace (run [^\\n#]*)$")
	printsBlock = regexp.MustCompile("(?s)prints[^`]*?\\n\\n```\\n(.*?)\\n```")
)

// TestDocumentedExamples runs the `millrace run` command of every example page that shows its
// output, from the repository's root as the page says, and checks that it prints exactly that
// output, so the pages cannot drift from the programs.
func TestDocumentedExamples(t *testing.T) {
	pages, err := filepath.Glob("../../actions/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../actions/README.md")
	checked := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		cmd, want := runLine.FindSubmatch(data), printsBlock.FindSubmatch(data)
		if cmd == nil || want == nil {
			continue
		}
		checked++
		t.Run(filepath.Base(filepath.Dir(page)), func(t *testing.T) {
			args := strings.Fields(string(cmd[1]))
			for i, a := range args {
				if strings.HasPrefix(a, "actions/") {
					args[i] = "../../" + a // the page's paths are from the repository's root
				}
			}
			for _, a := range args {
				if strings.HasPrefix(a, "../../actions/") && !strings.HasSuffix(a, ".jsonl") {
					needRuntime(t, a)
				}
			}
			code, stdout, stderr := runCmd(t, args...)
			if code != 0 {
				t.Fatalf("millrace %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
			}
			// Records of one topic print in offset order; across topics, in the order they were
			// committed, which varies: compare the lines as a multiset.
			got, wantLines := lines(traceValue.ReplaceAllString(stdout, `"traceparent","value":"00-…"`)), lines(string(want[1]))
			if !slices.Equal(got, wantLines) {
				t.Errorf("millrace %s printed (sorted)\n%s\nwant, as %s documents (sorted),\n%s", strings.Join(args, " "), strings.Join(got, "\n"), page, strings.Join(wantLines, "\n"))
			}
		})
	}
	if checked < 4 {
		t.Errorf("found %d example pages with a run command and its output; want at least 4 (the pipeline and three actions)", checked)
	}
}

// lines returns the non-empty lines of s, sorted.
func lines(s string) []string {
	var ls []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	slices.Sort(ls)
	return ls
}
