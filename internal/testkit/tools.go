package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Setup is what installs every program and module the tests run (their Debian packages, pip's
// confluent-kafka): a missing one's message names it.
const Setup = "scripts/setup installs it"

// CI reports whether the tests run in CI (CI set to true, 1 or anything but false and 0), where
// every test must run: a missing program fails the test instead of skipping it.
func CI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// missing gathers what the package's tests lacked, for Main's summary.
var missing struct {
	sync.Mutex
	what []string
}

// NeedTools skips t when a program it runs is not on PATH, naming it and what installs it, so
// that `go test ./...` on a machine with only Go runs the pure-Go tests; in CI it fails t.
func NeedTools(t testing.TB, progs ...string) {
	t.Helper()
	var absent []string
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			absent = append(absent, p)
		}
	}
	if len(absent) > 0 {
		Lacks(t, strings.Join(absent, ", ")+" (not on PATH)")
	}
}

// NeedPython skips t (fails it in CI) unless python3 imports every module; pip is the command
// that installs them.
func NeedPython(t testing.TB, pip string, modules ...string) {
	t.Helper()
	NeedTools(t, "python3")
	if out, err := exec.Command("python3", "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		Lacks(t, fmt.Sprintf("python3 modules %s (%v: %s; or: %s)", strings.Join(modules, ", "), err, strings.TrimSpace(string(out)), pip))
	}
}

// Lacks skips t for what it lacks, saying what installs it, or fails t in CI.
func Lacks(t testing.TB, what string) {
	t.Helper()
	if CI() {
		t.Fatalf("%s: %s, and CI runs every test", what, Setup)
	}
	missing.Lock()
	if !slices.Contains(missing.what, what) {
		missing.what = append(missing.what, what)
	}
	missing.Unlock()
	t.Skipf("skipped: needs %s; %s (with CI=true this is a failure)", what, Setup)
}

// skippedSummary is the line Main prints when tests were skipped for what they lack.
func skippedSummary() string {
	missing.Lock()
	defer missing.Unlock()
	if len(missing.what) == 0 {
		return ""
	}
	return "some tests were skipped: they need " + strings.Join(missing.what, "; ") + ". scripts/setup installs them; CI=true makes them required.\n"
}
