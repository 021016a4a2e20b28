package e2e_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// startProc starts bin.millrace with args and the extra environment env in dir, its output in
// dir/name.log; it is stopped when the test ends (SIGTERM, then SIGKILL after 15 s, then the
// action processes it started).
func startProc(t testing.TB, dir, name string, env []string, args ...string) *testkit.Proc {
	t.Helper()
	return testkit.StartProc(t, testkit.ProcSpec{
		Name: name,
		Argv: append([]string{bin.millrace}, args...),
		Env:  env,
		Dir:  dir,
		Log:  filepath.Join(dir, name+".log"),
	})
}

// stop stops p within grace; a kill or an exit error is logged, not failed on: the cases
// judge the processes by what reached Kafka.
func stop(t testing.TB, p *testkit.Proc, grace time.Duration) {
	if err := p.Stop(grace); err != nil {
		t.Log(err)
	}
}
