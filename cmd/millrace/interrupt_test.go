package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// slowGreet writes a raw (Python) greet action that records the pid of each of its processes
// in the folder $GREET_PIDS and takes a minute over a record named "slow" (over every record
// with GREET_SLOW set).
func slowGreet(t *testing.T) string {
	t.Helper()
	testkit.NeedTools(t, "python3") // the raw action
	dir := filepath.Join(t.TempDir(), "greet")
	if err := actiondir.Init(context.Background(), dir, "raw", actiondir.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "main.py")
	src, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), "import sys\n", "import sys\nimport os, time\nopen(os.path.join(os.environ[\"GREET_PIDS\"], str(os.getpid())), \"w\").close()\n", 1)
	s = strings.Replace(s, "    elif kind == \"item\":\n", "    elif kind == \"item\":\n        if (msg.get(\"payload\") or {}).get(\"name\") == \"slow\" or os.environ.get(\"GREET_SLOW\"):\n            open(os.path.join(os.environ[\"GREET_PIDS\"], \"slow\"), \"w\").close()\n            time.sleep(60)\n", 1)
	if s == string(src) {
		t.Fatal("the raw template changed: update slowGreet")
	}
	if err := os.WriteFile(main, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// millraceBinary builds this command into the test's temporary folder.
func millraceBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "millrace")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// interrupted is one run of the binary in its own process group, with a TMPDIR of its own.
type interrupted struct {
	t      *testing.T
	cmd    *exec.Cmd
	tmp    string
	pids   string
	stdout *testkit.SyncBuffer
	stderr *testkit.SyncBuffer
	stdin  io.WriteCloser
	exited chan struct{}
}

func startInterrupted(t *testing.T, bin string, env []string, args ...string) *interrupted {
	t.Helper()
	r := &interrupted{t: t, tmp: t.TempDir(), pids: t.TempDir(), stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = append(append(os.Environ(), "TMPDIR="+r.tmp, "GREET_PIDS="+r.pids), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := r.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin = stdin
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // only if the test failed midway
		<-r.exited
		r.stdin.Close()
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout.String(), r.stderr.String())
		}
	})
	return r
}

// waitFor polls cond (the files and output of another process: no signal to wait on).
func (r *interrupted) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("never saw %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *interrupted) actionPids() []int {
	es, _ := os.ReadDir(r.pids)
	var pids []int
	for _, e := range es {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (r *interrupted) signal(sig syscall.Signal) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v: %v", sig, err)
	}
}

// exit waits for the command's exit and checks that nothing of it remains: no file in its
// TMPDIR, no process in its group, no process of the action alive.
func (r *interrupted) exit(wantCode int) {
	r.t.Helper()
	select {
	case <-r.exited:
	case <-time.After(time.Minute):
		r.t.Fatal("the command did not exit within a minute of the signal")
	}
	if code := r.cmd.ProcessState.ExitCode(); code != wantCode {
		r.t.Errorf("exit status %d; want %d", code, wantCode)
	}
	if es, _ := os.ReadDir(r.tmp); len(es) > 0 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		r.t.Errorf("left in TMPDIR: %s", strings.Join(names, ", "))
	}
	deadline := time.Now().Add(10 * time.Second) // a killed process is gone once reaped
	for _, pid := range append(r.actionPids(), -r.cmd.Process.Pid) {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				r.t.Errorf("process %d still runs after the command exited", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestInterruptLeavesNothing: `millrace run` and `millrace test action`, interrupted by
// SIGINT, SIGTERM or a second Ctrl-C, leave no MILLSTREAM_WORKDIR and no process; the run's
// last words agree with its summary.
func TestInterruptLeavesNothing(t *testing.T) {
	dir := slowGreet(t)
	bin := millraceBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("run/"+sig.String(), func(t *testing.T) {
			r := startInterrupted(t, bin, nil, "run", dir, "--bare", "--input", "-")
			io.WriteString(r.stdin, "{\"name\":\"Ada\"}\n{\"name\":\"Grace\"}\n") // stdin stays open
			r.waitFor("both greetings", func() bool { return strings.Count(r.stdout.String(), "Hello, ") == 2 })
			r.signal(sig)
			r.exit(130)
			errText := r.stderr.String()
			if !strings.Contains(errText, "2 records in, 2 committed") || !strings.Contains(errText, "every record read was committed; the input was not read to its end") || strings.Contains(errText, "before every output was committed") {
				t.Errorf("stderr:\n%s\nwant the summary (2 committed) and an interruption that agrees with it", errText)
			}
		})
	}
	t.Run("run/second Ctrl-C", func(t *testing.T) {
		r := startInterrupted(t, bin, nil, "run", dir, "--bare", "--input", "-")
		io.WriteString(r.stdin, "{\"name\":\"Ada\"}\n")
		r.waitFor("the first greeting", func() bool { return strings.Contains(r.stdout.String(), "Hello, Ada!") })
		io.WriteString(r.stdin, "{\"name\":\"slow\"}\n") // a minute in the action: the clean stop waits for it
		r.waitFor("the slow record in the action", func() bool { _, err := os.Stat(filepath.Join(r.pids, "slow")); return err == nil })
		r.signal(syscall.SIGINT)
		// The lines on stderr are what the person at the terminal reads: their words are the product.
		r.waitFor("the stopping line", func() bool { return strings.Contains(r.stderr.String(), "Ctrl-C again to quit at once") })
		r.signal(syscall.SIGINT)
		r.exit(130)
		if !strings.Contains(r.stderr.String(), "the action's processes were killed and their work folders removed") {
			t.Errorf("stderr:\n%s\nwant it to say what the quit did", r.stderr.String())
		}
	})
	for _, tt := range []struct {
		name string
		sigs []syscall.Signal
	}{
		{"SIGINT", []syscall.Signal{syscall.SIGINT}},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}},
		{"second Ctrl-C", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}},
	} {
		t.Run("test action/"+tt.name, func(t *testing.T) {
			r := startInterrupted(t, bin, []string{"GREET_SLOW=1"}, "test", "action", dir)
			r.waitFor("an item in the action", func() bool { _, err := os.Stat(filepath.Join(r.pids, "slow")); return err == nil })
			for _, sig := range tt.sigs { // the test stops in moments: the second signal may find it gone
				_ = r.cmd.Process.Signal(sig)
			}
			r.exit(130)
		})
	}
}
