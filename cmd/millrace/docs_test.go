package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocLinks: every relative link of every Markdown file of the module (README.md, docs/ and
// docs/design/, the example pages, the SDKs' pages, BENCHMARKS.md, CHANGELOG.md,
// bench/results/) points at a file that exists, and every #anchor at a heading of the file it
// names.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := markdownFiles(t, root)
	for _, must := range []string{"README.md", "docs/README.md", "CHANGELOG.md", "BENCHMARKS.md"} {
		if !slices.Contains(docs, filepath.Join(root, must)) {
			t.Errorf("%s is missing: the docs index and the pages it links are checked from it", must)
		}
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel(root, doc), target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(t, file), anchor) {
				t.Errorf("%s links to %s: %s has no heading #%s", rel(root, doc), target, rel(root, file), anchor)
			}
		}
	}
}

// markdownFiles lists the Markdown files under root, leaving out hidden folders, testdata and
// node_modules (files of other projects).
func markdownFiles(t *testing.T, root string) []string {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// anchors are the ids GitHub gives the headings of a Markdown file.
func anchors(t *testing.T, file string) []string {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
				b.WriteRune(r)
			}
		}
		ids = append(ids, b.String())
	}
	return ids
}

func isLetter(r rune) bool {
	return strings.ContainsRune("àâäéèêëîïôöùûüçñåøæß", r)
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

// TestDocsRunSynopsis: docs/cli.md's synopsis of millrace run names every flag run -h shows.
func TestDocsRunSynopsis(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "**`millrace run ")
	synopsis, _, _ := strings.Cut(rest, "`**")
	if !ok {
		t.Fatal("docs/cli.md has no **`millrace run …`** synopsis")
	}
	code, out, _ := runCmd(t, "run", "-h")
	if code != 0 {
		t.Fatalf("run -h = %d", code)
	}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out, -1) {
		name := "--" + m[1]
		if m[1] == "v" {
			name = "-v"
		}
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `\b`).MatchString(synopsis) {
			t.Errorf("docs/cli.md's synopsis of millrace run, %q, does not name %s, which run -h shows", synopsis, name)
		}
	}
}

// TestReadmeNamesWhatSetupInstalls: the README's "Two commands" paragraph names every Debian
// package scripts/setup installs, by the word a reader knows it by.
func TestReadmeNamesWhatSetupInstalls(t *testing.T) {
	word := map[string]string{
		"protobuf-compiler": "protoc", "jq": "jq", "python3": "Python", "nodejs": "Node.js", "ruby": "Ruby",
		"default-jdk-headless": "Java", "maven": "Maven", "openssl": "OpenSSL", "prometheus": "Prometheus",
		"python3-pip": "pip", "curl": "curl", "npm": "npm", "rake": "rake", "chromium": "Chromium",
	}
	setup, err := os.ReadFile(filepath.Join("..", "..", "scripts", "setup"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, _ := strings.Cut(string(readme), "## Two commands")
	para, _, _ = strings.Cut(para, "```")
	pkgs := regexp.MustCompile(`need\+=\(([a-z0-9.+-]+)\)`).FindAllStringSubmatch(string(setup), -1)
	if len(pkgs) == 0 {
		t.Fatal("scripts/setup installs no package this test can read (need+=(PKG))")
	}
	for _, m := range pkgs {
		w, ok := word[m[1]]
		switch {
		case !ok:
			t.Errorf("scripts/setup installs %s, which this test has no word for: add it here and to the README's \"Two commands\"", m[1])
		case !strings.Contains(para, w):
			t.Errorf("the README's \"Two commands\" paragraph does not name %s (package %s), which scripts/setup installs:\n%s", w, m[1], para)
		}
	}
}
