package sidecar_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// childSidecar is the test binary playing the sidecar in a child process.
type childSidecar struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	logs *testkit.SyncBuffer
}

// startChildSidecar starts the test binary playing the sidecar (roleSidecar) with env; it is
// SIGKILLed at cleanup if still running.
func startChildSidecar(t *testing.T, e env) *childSidecar {
	t.Helper()
	cmd := testkit.Command(context.Background(), roleSidecar, "-test.run=^$")
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("child sidecar %d log:\n%s", cmd.Process.Pid, logs.String())
		}
	})
	return &childSidecar{cmd: cmd, done: done, logs: logs}
}

// TestStaticMembershipRestart: a sidecar with FLOW_POD_NAME is a static member of its group.
// SIGKILLed and started again with the same pod name, it takes its partitions back at once,
// not after the dead member's session (FLOW_SESSION_TIMEOUT, here longer than the test's
// wait); SIGTERMed and started again, the same (a static member does not leave the group).
func TestStaticMembershipRestart(t *testing.T) {
	const parts = 4
	b := newBroker(t)
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_POD_NAME"] = "pod-" + in
	e["FLOW_SESSION_TIMEOUT"] = "5m"
	group := e["FLOW_CONSUMER_GROUP"]
	all := records(in, parts, 120)
	b.Produce(t, all[:40]...)
	first := startChildSidecar(t, e)
	waitFor(t, "the first 40 records committed", func() bool { return allCommitted(t, b, group, in, ends(parts, 40)) })

	first.cmd.Process.Kill()
	<-first.done
	b.Produce(t, all[40:80]...)
	began := time.Now()
	second := startChildSidecar(t, e)
	waitFor(t, "80 records committed by the restarted sidecar", func() bool { return allCommitted(t, b, group, in, ends(parts, 80)) })
	t.Logf("after SIGKILL, the restarted sidecar committed everything %v after its start", time.Since(began).Round(time.Millisecond))

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the sidecar did not exit after SIGTERM")
	}
	b.Produce(t, all[80:]...)
	began = time.Now()
	third := startChildSidecar(t, e)
	waitFor(t, "120 records committed by the sidecar started after SIGTERM", func() bool { return allCommitted(t, b, group, in, ends(parts, 120)) })
	t.Logf("after SIGTERM, the restarted sidecar committed everything %v after its start", time.Since(began).Round(time.Millisecond))
	if strings.Contains(third.logs.String(), "FENCED_INSTANCE_ID") {
		t.Errorf("the restarted sidecar was fenced:\n%s", third.logs.String())
	}
}
