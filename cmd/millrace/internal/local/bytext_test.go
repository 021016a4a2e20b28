package local_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// byText are the ways code decides by a log message or an error's text, which parts must not
// do: they tell each other what happened through typed events and errors (errors.Is/As).
var byText = regexp.MustCompile(`Message == "[^"]|strings\.(Contains|HasPrefix|Cut|Index)\([a-zA-Z_.]*[eE]rr[a-zA-Z_]*\.Error\(\)|\.Error\(\) == `)

// TestNothingDecidesByText: no Go file of internal/ or cmd/ (tests aside) matches a log
// message or cuts an error's text to decide anything.
func TestNothingDecidesByText(t *testing.T) {
	files := 0
	for _, root := range []string{"../../../../internal", "../../../../cmd"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			files++
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for n := 1; sc.Scan(); n++ {
				if byText.MatchString(sc.Text()) {
					t.Errorf("%s:%d decides by text: %s\n\t(use the typed event or errors.Is/As instead)", path, n, strings.TrimSpace(sc.Text()))
				}
			}
			return sc.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 20 {
		t.Fatalf("read %d Go files under internal/ and cmd/; want all of them (is the test run from its package folder?)", files)
	}
	// The pattern itself finds what it is meant to find.
	for _, bad := range []string{`if rec.Message == "started" {`, `strings.Contains(err.Error(), "x")`, `strings.Cut(e.err.Error(), ": ")`, `if err.Error() == "x"`} {
		if !byText.MatchString(bad) {
			t.Errorf("the pattern misses %q", bad)
		}
	}
}
