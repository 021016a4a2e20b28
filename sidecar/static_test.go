package sidecar_test

import (
	"context"
	"fmt"
	"os/exec"
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
// wait). SIGTERMed, it leaves the group: a replacement under another pod name (a Deployment's
// rolling update) takes over at once. With FLOW_LEAVE_GROUP_ON_SHUTDOWN=false it stays, and
// its restart under the same name (a StatefulSet) takes its partitions back at once.
func TestStaticMembershipRestart(t *testing.T) {
	const parts = 4
	b := newBroker(t)
	in, out := b.Topic(t, "in", parts), b.Topic(t, "out", parts)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_SESSION_TIMEOUT"] = "5m"
	group := e["FLOW_CONSUMER_GROUP"]
	all := records(in, parts, 160)
	b.Produce(t, all[:40]...)
	e["FLOW_POD_NAME"] = "pod-a-" + in
	sc := startChildSidecar(t, e)
	waitFor(t, "the first 40 records committed", func() bool { return allCommitted(t, b, group, in, ends(parts, 40)) })

	for i, step := range []struct {
		name   string
		signal syscall.Signal
		pod    string // the pod name of the sidecar started next
		keep   bool   // FLOW_LEAVE_GROUP_ON_SHUTDOWN=false for it
	}{
		{name: "SIGKILL, restarted in the same pod", signal: syscall.SIGKILL, pod: "pod-a-"},
		{name: "SIGTERM, replaced by another pod", signal: syscall.SIGTERM, pod: "pod-b-", keep: true},
		{name: "SIGTERM keeping its membership, restarted in the same pod", signal: syscall.SIGTERM, pod: "pod-b-"},
	} {
		if err := sc.cmd.Process.Signal(step.signal); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sc.done:
		case <-time.After(waitTimeout):
			t.Fatalf("%s: the sidecar did not exit", step.name)
		}
		n := 40 * (i + 2)
		b.Produce(t, all[n-40:n]...)
		e["FLOW_POD_NAME"] = step.pod + in
		e["FLOW_LEAVE_GROUP_ON_SHUTDOWN"] = fmt.Sprint(!step.keep)
		began := time.Now()
		sc = startChildSidecar(t, e)
		// A fenced member's commits are refused (FENCED_INSTANCE_ID): the new sidecar
		// committing everything is the proof it took the membership over.
		waitFor(t, fmt.Sprintf("%s: %d records committed", step.name, n), func() bool { return allCommitted(t, b, group, in, ends(parts, n)) })
		t.Logf("%s: the new sidecar committed everything %v after its start", step.name, time.Since(began).Round(time.Millisecond))
	}
}
