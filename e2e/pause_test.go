package e2e_test

import (
	"fmt"
	"time"

	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// Pauses as faults: a process that freezes and comes back (a long GC pause, a throttled or
// frozen node, a VM migrated live) is SIGSTOPped and SIGCONTed. Each case ends with every
// record once (exactly once) or at least once, checked by the verifier, and reports the
// longest time a partition waited with records past its commit (the stall meter), which should
// be about the session timeout plus a few seconds where a member's session ends.

// pauseSession is the sidecars' FLOW_SESSION_TIMEOUT in the pause cases, shorter than the 45 s
// default so that a pause outlives it quickly (issue 34's case: 8 s); pausePast is how long a
// paused sidecar or bridge stays frozen: well past its session, so the group moves the
// sidecar's partitions and it comes back to find itself fenced (UNKNOWN_MEMBER_ID).
const (
	pauseSession = 8 * time.Second
	pausePast    = 20 * time.Second
)

// pauseIdle bounds how long a pause case may see no commit at all once the pauses are over:
// a stranded partition (issue 34) shows as this long a wait, then a failure.
const pauseIdle = 90 * time.Second

// pauseSpread is how long a pause case's records take to produce, so they keep coming through
// the pauses.
var pauseSpread = 30 * time.Second

// TestPauseSidecar is issue 34's frozen member: in a group of two, and of three, replicas
// (FLOW_SESSION_TIMEOUT=8s, 6 partitions, keyed records through an echo that spends half a
// millisecond on each), sidecar 0 is SIGSTOPped once the group is at work and SIGCONTed 20 s
// later (its session has expired: UNKNOWN_MEMBER_ID, its open transaction aborted); 8 s after
// that sidecar 1 the same way. Every partition must move again: nothing stranded, every
// record once (exactly once) or at least once.
func TestPauseSidecar(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d-replicas", replicas), func(t *testing.T) {
			t.Parallel()
			eachDelivery(t, func(t *testing.T, d string) {
				b := newBroker(t)
				pl := newPipeline(t, b, keyed(childSlow), 6, deliveryEnv(d), "FLOW_SESSION_TIMEOUT="+pauseSession.String())
				n := ciN(20000)
				var rs []*replica
				for i := range replicas {
					rs = append(rs, pl.start(i))
				}
				wait := pl.produceSpread(0, n, 2*pauseSpread)
				pl.waitOwners(t, rs)
				m := pl.meterStalls()
				var did []string
				for i, r := range rs[:2] {
					if i > 0 {
						time.Sleep(pauseSession) // issue 34's gap between the two pauses
					}
					c, _ := pl.committedCount()
					pl.waitProgress(t, c, n) // the group at work
					at := m.since(time.Now())
					pauseFor(t, pausePast, r.sidecar.Pid())
					did = append(did, fmt.Sprintf("sidecar %d paused %.0f s from %.1f s", r.idx, pausePast.Seconds(), at.Seconds()))
				}
				wait()
				pl.waitDone(pauseIdle)
				st := m.stop()
				tl := pl.tally()
				pl.report("pauses", tl, fmt.Sprintf("%s; %s", joinDid(did), st))
				writeFaultRow(pl, fmt.Sprintf("sidecar SIGSTOP past its session (%d replicas)", replicas), d, tl, st)
				tl.check(t)
				tl.checkDup(t, 2*6*100)
			})
		})
	}
}

// TestPauseBridge SIGSTOPs the bridge for longer than the sidecar's session timeout (the
// sidecar itself goes on heartbeating) and SIGCONTs it.
func TestPauseBridge(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, keyedEcho(), 4, deliveryEnv(d), "FLOW_SESSION_TIMEOUT="+pauseSession.String())
		n := ciN(4000)
		r := pl.start(0)
		wait := pl.produceSpread(0, n, pauseSpread/2)
		pl.waitAtWork(t, r.bridge, n)
		m := pl.meterStalls()
		at := m.since(time.Now())
		pauseFor(t, pausePast, r.bridge.Pid())
		wait()
		pl.waitDone(pauseIdle)
		st := m.stop()
		tl := pl.tally()
		pl.report("pauses", tl, fmt.Sprintf("bridge paused %.0f s from %.1f s; %s", pausePast.Seconds(), at.Seconds(), st))
		writeFaultRow(pl, "bridge SIGSTOP", d, tl, st)
		tl.check(t)
		tl.checkDup(t, 4*100)
	})
}

// actionTimeout is the item timeout of the action the action-pause case freezes.
const actionTimeout = 3 * time.Second

// TestPauseAction SIGSTOPs the action's processes while they hold deliveries, past the item
// timeout (--timeout 3s): the bridge kills them and the deliveries are tried again.
func TestPauseAction(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, keyedEcho("--timeout", actionTimeout.String()), 4, deliveryEnv(d))
		n := ciN(4000)
		r := pl.start(0)
		wait := pl.produceSpread(0, n, pauseSpread/2)
		pl.waitAtWork(t, r.bridge, n)
		m := pl.meterStalls()
		at := m.since(time.Now())
		kids := testkit.Children(r.bridge.Pid())
		pauseFor(t, 2*actionTimeout, kids...)
		wait()
		pl.waitDone(pauseIdle)
		st := m.stop()
		tl := pl.tally()
		pl.report("pauses", tl, fmt.Sprintf("%d action processes paused %.0f s (item timeout %s) from %.1f s; bridge attempt failures logged: %d; %s",
			len(kids), (2*actionTimeout).Seconds(), actionTimeout, at.Seconds(), len(r.bridge.LogLines("action attempt failed", 100000)), st))
		writeFaultRow(pl, "action SIGSTOP past --timeout", d, tl, st)
		tl.check(t)
		tl.checkDup(t, 4*100)
	})
}

// waitOwners waits until each replica's sidecar owns a partition: every member in the group.
func (pl *pipeline) waitOwners(t testing.TB, rs []*replica) {
	t.Helper()
	for _, r := range rs {
		if !testkit.Eventually(idleFault, func() bool { return r.sidecarMetric("millrace_sidecar_partitions_assigned") > 0 }) {
			t.Fatalf("replica %d was assigned no partition within %s\n%s", r.idx, idleFault, pl.logTails(20))
		}
	}
}

func joinDid(did []string) string {
	s := ""
	for i, d := range did {
		if i > 0 {
			s += ", "
		}
		s += d
	}
	return s
}

// writeFaultRow appends the case's row to the fault table of the report (fault × delivery ×
// broker: records, lost, duplicates, longest stall), e2e/README.md's table.
func writeFaultRow(pl *pipeline, fault, delivery string, tl tally, st stall) {
	pl.t.Helper()
	s := "—"
	if st.d > 0 {
		s = fmt.Sprintf("%.1f s", st.d.Seconds())
	}
	broker := pl.b.Name()
	if clusterHome() != "" {
		broker += " (3 nodes)"
	}
	pl.t.Logf("fault row: %s | %s | %s | %d in, %d out, lost %d, duplicated %d | %s", fault, delivery, broker, tl.in, tl.out, tl.lost, tl.dup, s)
	writeReport("fault table", fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %s |", fault, delivery, broker, tl.in, tl.lost, tl.dup, s))
}
