package e2e_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// envStatic=0 runs TestSidecarRestartResumes with dynamic group membership (FLOW_POD_NAME
// unset), as before static membership: the figure to compare with.
const envStatic = "MILLRACE_E2E_STATIC"

// resumeBound is how long a restarted sidecar may take to commit again: under the 45 s
// session a dynamic member's successor waits for. The target is 5 s; the figure is logged.
const resumeBound = 30 * time.Second

// TestSidecarRestartResumes SIGKILLs the sidecar and starts it again in the same pod
// (FLOW_POD_NAME), then SIGTERMs it and starts it again, measuring each time from the new
// sidecar's start to its first commit: static group membership gives it its partitions back at
// once, rather than after the dead member's session.
func TestSidecarRestartResumes(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	var env []string
	if os.Getenv(envStatic) == "0" {
		env = []string{"FLOW_POD_NAME="}
	}
	pl := newPipeline(t, b, goEcho(), 4, env...)
	r := pl.start(0)
	pl.produce(pl.records(0, 400)...)
	pl.waitDone(60 * time.Second)

	resume := func(what string, stop func()) time.Duration {
		stop()
		n := len(pl.produced)
		pl.produce(pl.records(n, 400)...)
		began := time.Now()
		pl.startSidecar(r)
		if !testkit.Eventually(2*time.Minute, func() bool { c, _ := pl.committedCount(); return c > n }) {
			t.Fatalf("after %s, the restarted sidecar committed nothing within 2 minutes\n%s", what, pl.logTails(20))
		}
		took := time.Since(began)
		pl.waitDone(60 * time.Second)
		if took > resumeBound {
			t.Errorf("after %s, the restarted sidecar first committed %v after its start; want under %v (static membership: FLOW_POD_NAME)", what, took.Round(time.Millisecond), resumeBound)
		}
		return took
	}
	killed := resume("SIGKILL", func() { r.sidecar.Kill() })
	termed := resume("SIGTERM", func() { stop(t, r.sidecar, 30*time.Second) })
	tl := pl.tally()
	membership := "static"
	if env != nil {
		membership = "dynamic"
	}
	pl.report("sidecar restarted in its pod: time to resume", tl, fmt.Sprintf("%s membership: first commit %.2f s after the restart that followed a SIGKILL, %.2f s after a SIGTERM",
		membership, killed.Seconds(), termed.Seconds()))
	tl.check(t)
	tl.checkDup(t, 2*4*100)
}
