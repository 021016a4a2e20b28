package engine_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestTeardown: Teardown kills every child's process group and removes every
// MILLSTREAM_WORKDIR and tracked folder at once, for a program about to exit.
func TestTeardown(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	pids := make(chan int, 8)
	p := start(t, config("hang", func(c *engine.Config) {
		c.Hooks.ProcessStarted = func(pid int) { pids <- pid }
		c.RestartBackoff = time.Hour // no replacement during the test
	}))
	submit(t, p, item("h", `1`))
	pid := <-pids
	tracked, err := os.MkdirTemp("", "tracked-")
	if err != nil {
		t.Fatal(err)
	}
	defer engine.TrackDir(tracked)()
	if es, _ := os.ReadDir(tmp); len(es) != 2 {
		t.Fatalf("TMPDIR holds %d folders; want the process's workdir and the tracked one", len(es))
	}
	engine.Teardown()
	defer engine.UndoTeardown()
	if es, _ := os.ReadDir(tmp); len(es) != 0 {
		t.Errorf("TMPDIR holds %v after Teardown; want nothing", es)
	}
	if !testkit.Eventually(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) { // until the pool reaps it
		t.Fatalf("process %d alive 10 s after Teardown", pid)
	}
}
