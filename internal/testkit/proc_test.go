package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, play, nil) }

// The roles the test binary plays for the Proc tests.
const (
	roleTerm     = "term"     // says ready, exits 0 on SIGTERM
	roleStubborn = "stubborn" // says ready, ignores SIGTERM
	roleParent   = "parent"   // starts a stubborn child, says ready, exits 0 on SIGTERM
)

func play(role string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	switch role {
	case roleTerm:
	case roleStubborn:
		signal.Ignore(syscall.SIGTERM)
	case roleParent:
		child := testkit.Command(context.Background(), roleStubborn) // outlives this process: the test kills it
		if err := child.Start(); err != nil {
			fmt.Println("start:", err)
			return 1
		}
	default:
		return 2
	}
	fmt.Println("ready")
	<-sigs
	return 0
}

func startRole(t *testing.T, role string) *testkit.Proc {
	t.Helper()
	p := testkit.StartProc(t, testkit.ProcSpec{
		Name: role, Argv: []string{os.Args[0]}, Env: []string{testkit.RoleEnv(role)},
		Log:    filepath.Join(t.TempDir(), role+".log"),
		Strict: role == roleTerm, // the others are killed, and a killed process exited with an error
	})
	if !testkit.Eventually(30*time.Second, func() bool { return p.LogHas("ready\n") || p.Exited() }) || p.Exited() {
		t.Fatalf("%s did not say ready within 30 s (exited: %v)\n%s", role, p.Exited(), p.Tail(10))
	}
	return p
}

func TestProcStopsBySIGTERM(t *testing.T) {
	p := startRole(t, roleTerm)
	if got := p.LogLines("ready", 10); len(got) != 1 {
		t.Errorf("LogLines(ready) = %q; want one line", got)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Errorf("Stop = %v; want nil (exit 0 on SIGTERM)", err)
	}
	if !p.Exited() || p.Err() != nil {
		t.Errorf("after Stop: Exited() = %v, Err() = %v; want true, nil", p.Exited(), p.Err())
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Errorf("the second Stop = %v; want nil", err)
	}
}

func TestProcKilledAfterGrace(t *testing.T) {
	p := startRole(t, roleStubborn)
	if err := p.Stop(100 * time.Millisecond); !errors.Is(err, testkit.ErrProcKilled) {
		t.Errorf("Stop of a process ignoring SIGTERM = %v; want ErrProcKilled", err)
	}
	if !p.Exited() {
		t.Error("the process is still running after Stop")
	}
}

func TestProcKillLeavesItsChildren(t *testing.T) {
	p := startRole(t, roleParent)
	if !testkit.Eventually(30*time.Second, func() bool { return len(testkit.Descendants(p.Pid())) == 1 }) {
		t.Fatalf("Descendants(parent) = %v; want its one child", testkit.Descendants(p.Pid()))
	}
	kids := p.Kill()
	if len(kids) != 1 || !testkit.Alive(kids[0]) {
		t.Fatalf("Kill = %v; want the one child, alive (SIGKILL of its parent does not reach it)", kids)
	}
	syscall.Kill(kids[0], syscall.SIGKILL)
	if !testkit.Eventually(30*time.Second, func() bool { return !testkit.Alive(kids[0]) }) {
		t.Errorf("the child %d is alive 30 s after SIGKILL", kids[0])
	}
}

func TestProcStatus(t *testing.T) {
	p := startRole(t, roleTerm)
	if rss := p.Status("VmHWM"); rss <= 0 {
		t.Errorf("Status(VmHWM) = %d; want a size of a running process", rss)
	}
	if n := testkit.ProcStatus(os.Getpid(), "NoSuchField"); n != 0 {
		t.Errorf("ProcStatus(NoSuchField) = %d; want 0", n)
	}
}

func TestCleanEnv(t *testing.T) {
	t.Setenv("FLOW_BROKERS", "x")
	t.Setenv("KUBERNETES_SERVICE_HOST", "x")
	t.Setenv(testkit.EnvRole, "x")
	t.Setenv("MILLRACE_TEST_KEEP", "kept")
	env := testkit.CleanEnv()
	for _, kv := range env {
		if strings.HasPrefix(kv, "FLOW_") || strings.HasPrefix(kv, "KUBERNETES_") || strings.HasPrefix(kv, testkit.EnvRole+"=") {
			t.Errorf("CleanEnv() holds %s", kv)
		}
	}
	if !slices.Contains(env, "MILLRACE_TEST_KEEP=kept") {
		t.Error("CleanEnv() lost MILLRACE_TEST_KEEP")
	}
}

func TestEventually(t *testing.T) {
	calls := 0
	if !testkit.Eventually(30*time.Second, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("Eventually(true at the 3rd call) = false or %d calls; want true after 3", calls)
	}
	start := time.Now()
	if testkit.Eventually(50*time.Millisecond, func() bool { return false }) {
		t.Error("Eventually(never) = true; want false")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Eventually(never, 50ms) returned after %s; want at least the limit", took)
	}
}
