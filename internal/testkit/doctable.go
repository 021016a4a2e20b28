package testkit

import (
	"os"
	"strings"
	"testing"
)

// DocTable holds a Markdown table of a docs page to the one the code generates: in file, the
// first table after the line that begins with after must be want. With update, the page's
// table is rewritten to want instead (review the change with git diff).
func DocTable(t testing.TB, file, after, want string, update bool) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	at := strings.Index(page, "\n"+after)
	if at < 0 {
		t.Fatalf("%s has no line beginning %q, after which its table is", file, after)
	}
	start := strings.Index(page[at:], "\n|")
	if start < 0 {
		t.Fatalf("%s has no table after %q", file, after)
	}
	start += at + 1
	end := start
	for end < len(page) && page[end] == '|' {
		nl := strings.IndexByte(page[end:], '\n')
		if nl < 0 {
			end = len(page)
			break
		}
		end += nl + 1
	}
	got := page[start:end]
	if got == want {
		return
	}
	if update {
		if err := os.WriteFile(file, []byte(page[:start]+want+page[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gotLines), len(wantLines)); i++ {
		g, w := "", ""
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("%s: the table after %q differs from the generated one at its line %d:\n got %s\nwant %s\n(rerun the test with -update to rewrite it)", file, after, i+1, g, w)
			return
		}
	}
}
