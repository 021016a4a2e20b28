package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// Faults run the Python example (actions/score-listing) over records produced while the fault
// strikes; each reports records in / out / lost / duplicated. Lost must be 0; duplicates may
// only come from batches in flight at a fault.

// idleFault bounds how long a case may see no commit at all: a SIGKILLed sidecar's group
// member lingers until its session times out (45 s), then the sidecar's backoff may add 30 s.
const idleFault = 150 * time.Second

// every runs f at random intervals in [lo, hi) in a goroutine until stop is called; stop
// waits for it and returns how often f ran.
func every(seed uint64, lo, hi time.Duration, f func()) (stop func() int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	quit, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-quit:
				return
			case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
				f()
				n++
			}
		}
	}()
	return func() int {
		close(quit)
		return <-done
	}
}

func seed(t testing.TB) uint64 {
	s := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("MILLRACE_E2E_SEED"), 10, 64); err == nil {
		s = v
	}
	t.Logf("seed %d (MILLRACE_E2E_SEED repeats it)", s)
	return s
}

// TestFaultActionKilled SIGKILLs the action's processes (children of the bridge, found by
// parent PID) at random intervals while records flow.
func TestFaultActionKilled(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, scoreListing(), 4, deliveryEnv(d))
		r := pl.start(0)
		wait := pl.produceSpread(0, ciN(3000), 8*time.Second)
		killed := 0
		var ran atomic.Int64
		stop := every(seed(t), 150*time.Millisecond, 700*time.Millisecond, func() {
			for _, pid := range testkit.Children(r.bridge.Pid()) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
			ran.Add(1)
		})
		wait()
		// Keep killing a while after the last record: four more rounds (about 2 s).
		after := ran.Load() + 4
		if !testkit.Eventually(time.Minute, func() bool { return ran.Load() >= after }) {
			t.Fatalf("the kill rounds stopped at %d; want %d", ran.Load(), after)
		}
		rounds := stop()
		pl.waitDone(idleFault)
		tl := pl.tally()
		pl.report("action SIGKILLed at random intervals", tl, fmt.Sprintf("%d kill rounds, %d processes killed; bridge action-attempt-failed log lines: %d",
			rounds, killed, len(r.bridge.LogLines("action attempt failed", 100000))))
		tl.check(t)
		tl.checkDup(t, rounds*4*100)
		if killed == 0 {
			t.Errorf("no action process was killed: the fault did not happen")
		}
	})
}

// TestFaultBridgeKilled SIGKILLs the bridge three times mid-run and restarts it on its port;
// the action processes it leaves must exit on their own (their stdin closes).
func TestFaultBridgeKilled(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, scoreListing(), 4, deliveryEnv(d))
		r := pl.start(0)
		wait := pl.produceSpread(0, ciN(3000), 8*time.Second)
		var orphans []int
		for range 3 {
			pl.waitAtWork(t, r.bridge, ciN(3000))
			orphans = append(orphans, r.bridge.Kill()...)
			pl.startBridge(r)
		}
		wait()
		pl.waitDone(idleFault)
		tl := pl.tally()
		left := 0
		testkit.Eventually(10*time.Second, func() bool {
			left = 0
			for _, pid := range orphans {
				if testkit.Alive(pid) {
					left++
				}
			}
			return left == 0
		})
		pl.report("bridge SIGKILLed and restarted (3 times)", tl, fmt.Sprintf("%d orphaned action processes, %d still alive 10 s later; sidecar: %s",
			len(orphans), left, cut(logMessage(firstLine(r.sidecar.LogLines("stream failed", 1))), 300)))
		tl.check(t)
		tl.checkDup(t, 3*4*100)
		if left != 0 {
			t.Errorf("%d action processes outlived their SIGKILLed bridge by 10 s", left)
		}
	})
}

// TestFaultSidecarKilled SIGKILLs the sidecar mid-run and starts it again (in the same pod, so
// as the same static group member it takes its partitions back at once); once the new one owns
// partitions it is SIGTERMed and started again.
func TestFaultSidecarKilled(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, scoreListing(), 4, deliveryEnv(d))
		r := pl.start(0)
		wait := pl.produceSpread(0, ciN(3000), 8*time.Second)
		pl.waitProgress(t, 0, ciN(3000)) // mid-run
		r.sidecar.Kill()
		killedAt, _ := pl.committedCount()
		pl.startSidecar(r)
		if !testkit.Eventually(idleFault, func() bool { return r.sidecarMetric("millrace_sidecar_partitions_assigned") > 0 }) {
			t.Fatalf("the restarted sidecar was assigned no partition within %s\n%s", idleFault, pl.logTails(20))
		}
		pl.waitProgress(t, killedAt, ciN(3000)) // the new sidecar at work
		stop(t, r.sidecar, 30*time.Second)
		pl.startSidecar(r)
		wait()
		pl.waitDone(idleFault)
		tl := pl.tally()
		pl.report("sidecar SIGKILLed and restarted, then SIGTERMed and restarted", tl, "")
		tl.check(t)
		tl.checkDup(t, 2*4*100)
	})
}

// TestSidecarStopsWhileJoining SIGTERMs a sidecar while it waits to join its group (the
// previous sidecar was SIGKILLed, so the join waits for its session to time out): it must
// still exit within FLOW_SHUTDOWN_TIMEOUT (20 s), as a pod's 30 s grace period needs. On the
// real broker, a third sidecar then started must take over every partition and process
// everything.
func TestSidecarStopsWhileJoining(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	// Dynamic membership: a static member's successor in the same pod would not wait to join.
	pl := newPipeline(t, b, scoreListing(), 4, "FLOW_POD_NAME=")
	r := pl.start(0)
	pl.produce(pl.records(0, 400)...)
	pl.waitDone(60 * time.Second)
	r.sidecar.Kill()
	pl.startSidecar(r)
	if !testkit.Eventually(30*time.Second, func() bool { return r.sidecarMetric("millrace_sidecar_conversations_total") > 0 }) {
		t.Fatalf("the restarted sidecar started no conversation within 30 s\n%s", pl.logTails(20))
	}
	// Its JoinGroup has reached the broker: the group waits for the dead member to rejoin.
	if !testkit.Eventually(30*time.Second, func() bool { return b.groupState(pl.group) == "PreparingRebalance" }) {
		t.Fatalf("the group %s is %q, not PreparingRebalance, 30 s after the restarted sidecar started its conversation\n%s", pl.group, b.groupState(pl.group), pl.logTails(20))
	}
	start := time.Now()
	r.sidecar.Signal(syscall.SIGTERM)
	exited := ""
	select {
	case <-r.sidecar.Done():
		exited = fmt.Sprintf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(25 * time.Second):
		r.sidecar.Signal(syscall.SIGQUIT) // the Go runtime writes every goroutine's stack to the log
		<-r.sidecar.Done()
		exited = "did NOT exit within 25 s of SIGTERM"
		t.Errorf("the sidecar did not exit within 25 s of SIGTERM (FLOW_SHUTDOWN_TIMEOUT is 20 s) while joining its group; its goroutines at SIGQUIT are in %s\n%s",
			r.sidecar.Log, stacksOf(r.sidecar.LogText(), "sidecar"))
	}
	t.Log("the sidecar", exited)
	if !b.Real() {
		// kfake starts a member's session timer only once a response reached it, so the
		// second sidecar, dead while its JoinGroup waited, never expires once the group's
		// leader has synced, and a third sidecar gets only some partitions there (e2e
		// README); a real broker expires it after the session timeout, 45 s.
		return
	}

	pl.startSidecar(r)
	pl.produce(pl.records(400, ciN(2000))...)
	pl.waitDone(idleFault)
	tl := pl.tally()
	pl.report("sidecar SIGKILLed, its successor SIGTERMed while joining, a third started", tl,
		fmt.Sprintf("the second sidecar %s; the third was assigned %d partitions", exited, len(r.sidecar.LogLines("partition assigned", 100))))
	tl.check(t)
}

// TestFaultRebalance starts a second replica (bridge and sidecar) in the group mid-run, waits
// until it owns partitions, and stops it again.
func TestFaultRebalance(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, scoreListing(), 4, deliveryEnv(d))
		r0 := pl.start(0)
		wait := pl.produceSpread(0, ciN(4000), 10*time.Second)
		pl.waitProgress(t, 0, ciN(4000)) // mid-run
		r1 := pl.start(1)
		if !testkit.Eventually(60*time.Second, func() bool { return r1.sidecarMetric("millrace_sidecar_partitions_assigned") > 0 }) {
			t.Fatalf("the second replica was assigned no partition within 60 s\n%s", pl.logTails(20))
		}
		// Both replicas at work: every partition committed past where it stood at the
		// assignment (or caught up with what was produced).
		_, assigned := pl.committedCount()
		if !testkit.Eventually(idleFault, func() bool { return pl.eachPartitionPast(assigned) }) {
			_, c := pl.committedCount()
			t.Fatalf("not every partition progressed within %s of the rebalance: commits %v at it, %v now, ends %v\n%s", idleFault, assigned, c, pl.ends(), pl.logTails(20))
		}
		stop(t, r1.sidecar, 30*time.Second)
		stop(t, r1.bridge, 30*time.Second)
		wait()
		pl.waitDone(idleFault)
		tl := pl.tally()
		pl.report("second replica joins, then leaves (rebalance)", tl, fmt.Sprintf("replica 0 revocations logged: %d, replica 1 assignments: %d",
			len(r0.sidecar.LogLines("partition revoked", 100)), len(r1.sidecar.LogLines("partition assigned", 100))))
		tl.check(t)
		tl.checkDup(t, 2*4*100)
	})
}

// TestFaultProduceRefused lowers the outlet's max.message.bytes mid-run below any record of
// emits: the broker refuses the writes, the sidecar reads the limit again and finds that no
// emit fits it (a record cannot be split), and from the next conversation on the bridge
// refuses every emit against Start.max_message_bytes. Nothing may be committed, the stall
// warning must be logged, and progress must resume once the topic's override is removed (the
// broker's default again). The limit leaves room for a transaction's marker (about 80 bytes):
// Kafka fails an abort marker over it as fatal, and the transaction, with every later one of
// its id, stays stuck.
func TestFaultProduceRefused(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		b := newBroker(t)
		pl := newPipeline(t, b, scoreListing(), 2, deliveryEnv(d))
		r := pl.start(0)
		pl.produce(pl.records(0, 200)...)
		pl.waitDone(60 * time.Second)

		setTopicConfig(t, b, pl.outTopics["scores"], "max.message.bytes", "90")
		pl.produce(pl.records(200, ciN(1000))...)
		// Outside a cluster the stall warning goes to the log: its line there is the product.
		if !testkit.Eventually(60*time.Second, func() bool { return r.sidecar.LogHas(`"partition stalled"`) }) {
			t.Fatalf("no stall warning within 60 s of the outlet refusing writes\n%s", pl.logTails(20))
		}
		n, _ := pl.committedCount()
		if n != 200 {
			t.Errorf("committed %d records while the outlet refused writes; want 200 (nothing more)", n)
		}
		failure := firstLine(r.sidecar.LogLines("stream failed", 1))
		stall := firstLine(r.sidecar.LogLines("partition stalled", 1))

		deleteTopicConfig(t, b, pl.outTopics["scores"], "max.message.bytes")
		pl.waitDone(idleFault)
		tl := pl.tally()
		pl.report("outlet refuses writes (max.message.bytes 90), then back to the default", tl, fmt.Sprintf("committed during the fault: %d of %d; failure: %s; warning: %s", n, tl.in, cut(logMessage(failure), 400), cut(stall, 300)))
		tl.check(t)
		if failure == "" || stall == "" {
			t.Errorf("sidecar log lacks the failure (%q) or the stall warning (%q)", failure, stall)
		}
	})
}

// outletAbsence is how long TestFaultOutletDeleted keeps the outlet topic deleted after the
// stall warning.
var outletAbsence = 45 * time.Second

// TestFaultOutletDeleted deletes the outlet's topic mid-run (its records so far are read
// first and counted): nothing may be committed while it is gone, the stall warning must be
// logged, and progress must resume once the topic is created again.
func TestFaultOutletDeleted(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	pl := newPipeline(t, b, scoreListing(), 2)
	r := pl.start(0)
	pl.produce(pl.records(0, 200)...)
	pl.waitDone(60 * time.Second)

	out := pl.outTopics["scores"]
	pl.earlier = map[string][]*kgo.Record{"scores": b.ReadAll(t, out)}
	b.deleteTopicGone(t, out)
	pl.produce(pl.records(200, ciN(1000))...)
	// Outside a cluster the stall warning goes to the log: its line there is the product.
	if !testkit.Eventually(120*time.Second, func() bool { return r.sidecar.LogHas(`"partition stalled"`) }) {
		t.Errorf("no stall warning within 120 s of the outlet topic being deleted (FLOW_STALL_WARNING_AFTER=3s); %d stream failures logged",
			len(r.sidecar.LogLines("stream failed", 1000)))
	}
	n, _ := pl.committedCount()
	if n != 200 {
		t.Errorf("committed %d records while the outlet topic was gone; want 200 (nothing more)", n)
	}
	failure := firstLine(r.sidecar.LogLines("stream failed", 1))
	stall := firstLine(r.sidecar.LogLines("partition stalled", 1))

	// Keep it gone a while, as an operator slow to notice would: the sidecar's Kafka client
	// refreshes its metadata meanwhile. This sleep is the fault's length, not a wait for a
	// state. A real broker deletes a topic in the background: create it again until it takes.
	time.Sleep(outletAbsence)
	if !testkit.Eventually(60*time.Second, func() bool { return b.createTopic(out, 2) == nil }) {
		t.Fatalf("could not create the outlet topic %s again within 60 s: %v", out, b.createTopic(out, 2))
	}
	// Healed: the next conversation (at most the 30 s maximum backoff away) must produce.
	healed := pl.waitCommitted(len(pl.produced), 90*time.Second)
	restarted := ""
	if !healed {
		n, c := pl.committedCount()
		t.Errorf("no progress within 90 s of the outlet topic being created again: %d of %d records committed (commits %v); sidecar: %s; kafka client: %s",
			n, len(pl.produced), c, cut(logMessage(lastLine(r.sidecar.LogLines("stream failed", 1000))), 500), cut(firstLine(r.sidecar.LogLines("new ID for a topic", 1)), 400))
		// Does a new sidecar (a new Kafka client) heal it? Then nothing is lost either.
		stop(t, r.sidecar, 30*time.Second)
		pl.startSidecar(r)
		if pl.waitCommitted(len(pl.produced), 90*time.Second) {
			restarted = "; a sidecar restart healed it"
		} else {
			restarted = "; a sidecar restart did not heal it either"
		}
	}
	tl := pl.tally()
	after := "progress resumed"
	if !healed {
		after = "NO progress after the topic was created again: " + cut(logMessage(lastLine(r.sidecar.LogLines("stream failed", 1000))), 300) + restarted
	}
	pl.report("outlet topic deleted, then created again", tl, fmt.Sprintf("committed during the fault: %d of %d; failure: %s; warning: %s; %s", n, tl.in, cut(logMessage(failure), 300), cut(stall, 250), after))
	tl.check(t)
	if failure == "" || stall == "" {
		t.Errorf("sidecar log lacks the failure (%q) or the stall warning (%q)", failure, stall)
	}
}

// TestFaultOutletRecreated deletes the outlet's topic and creates it again a second later, as
// an operator changing it would, while records wait to be written to it: progress must resume.
// (Records are produced only after the outlet is read and deleted, so the deletion destroys
// none of the pipeline's output.)
func TestFaultOutletRecreated(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	pl := newPipeline(t, b, scoreListing(), 2)
	r := pl.start(0)
	pl.produce(pl.records(0, 200)...)
	pl.waitDone(60 * time.Second)

	out := pl.outTopics["scores"]
	pl.earlier = map[string][]*kgo.Record{"scores": b.ReadAll(t, out)}
	b.deleteTopicGone(t, out)
	pl.produce(pl.records(200, ciN(1000))...)
	time.Sleep(time.Second) // the fault's length: the outlet is gone a second, as the case says
	if !testkit.Eventually(60*time.Second, func() bool { return b.createTopic(out, 2) == nil }) {
		t.Fatalf("could not create the outlet topic %s again within 60 s: %v", out, b.createTopic(out, 2))
	}
	healed := pl.waitCommitted(len(pl.produced), 120*time.Second)
	after := "progress resumed"
	if !healed {
		n, c := pl.committedCount()
		after = "NO progress within 120 s of the topic being created again: " + cut(logMessage(lastLine(r.sidecar.LogLines("stream failed", 1000))), 300)
		t.Errorf("no progress within 120 s of the outlet topic being created again: %d of %d records committed (commits %v); sidecar: %s; kafka client: %s",
			n, len(pl.produced), c, cut(logMessage(lastLine(r.sidecar.LogLines("stream failed", 1000))), 500), cut(firstLine(r.sidecar.LogLines("new ID for a topic", 1)), 400))
	}
	tl := pl.tally()
	pl.report("outlet topic deleted and created again a second later", tl, after)
	tl.check(t)
}

// TestFaultBrokerRestart restarts the broker mid-run with its data: kfake closed and reopened
// on its data directory, the real broker with `scripts/kafka restart`. One pipeline per
// delivery mode runs through the same restart. It is the one case not run in parallel, so
// that on a shared real broker it runs before the others start.
func TestFaultBrokerRestart(t *testing.T) {
	b := newBroker(t)
	type run struct {
		pl   *pipeline
		r    *replica
		wait func()
	}
	var runs []run
	for _, d := range deliveries() {
		pl := newPipeline(t, b, scoreListing(), 4, deliveryEnv(d))
		pl.name = t.Name() + "/" + d
		r := pl.start(0)
		runs = append(runs, run{pl, r, pl.produceSpread(0, ciN(3000), 8*time.Second)})
	}
	for _, ru := range runs {
		ru.pl.waitProgress(t, 0, ciN(3000)) // mid-run
	}
	b.restart(t, 2*time.Second) // down 2 s: the fault's length
	for _, ru := range runs {
		ru.wait()
	}
	for _, ru := range runs {
		ru.pl.waitDone(idleFault)
		tl := ru.pl.tally()
		ru.pl.report("broker restarted mid-run (down 2 s)", tl, "sidecar: "+cut(logMessage(firstLine(ru.r.sidecar.LogLines(`"level":"ERROR"`, 1))), 400))
		tl.check(t)
		tl.checkDup(t, 4*100)
	}
}

// waitProgress waits until the group has committed more than n records (or all of total, the
// records the case produces: then no more can be), and fails the test after idleFault. A
// fault struck after it strikes a pipeline at work.
func (pl *pipeline) waitProgress(t testing.TB, n, total int) {
	t.Helper()
	progressed := func() bool {
		c, _ := pl.committedCount()
		return c > n || c >= total
	}
	if !testkit.Eventually(idleFault, progressed) {
		c, commits := pl.committedCount()
		t.Fatalf("no progress past %d committed records within %s: %d (commits %v, ends %v)\n%s", n, idleFault, c, commits, pl.ends(), pl.logTails(20))
	}
}

// waitAtWork waits until the bridge has its action processes up and the group commits again
// since they were: the bridge is at work (see waitProgress for total).
func (pl *pipeline) waitAtWork(t testing.TB, bridge *testkit.Proc, total int) {
	t.Helper()
	if !testkit.Eventually(idleFault, func() bool { return len(testkit.Children(bridge.Pid())) > 0 }) {
		t.Fatalf("the bridge %s started no action process within %s\n%s", bridge.Name, idleFault, bridge.Tail(20))
	}
	n, _ := pl.committedCount()
	pl.waitProgress(t, n, total)
}

// eachPartitionPast reports whether the group's commit of every inlet partition written to is
// past its commit in before, or at the end of what was produced to it.
func (pl *pipeline) eachPartitionPast(before map[int32]int64) bool {
	c, err := pl.b.Committed(context.Background(), pl.group, pl.inTopic)
	if err != nil {
		return false
	}
	for p, end := range pl.ends() {
		if c[p] <= before[p] && c[p] < end {
			return false
		}
	}
	return true
}

// groupState is the state of the consumer group as the broker describes it
// (PreparingRebalance, Stable, …), or "" when it cannot say.
func (b *broker) groupState(group string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	described, err := kadm.NewClient(b.Admin).DescribeGroups(ctx, group)
	if err != nil {
		return ""
	}
	return described[group].State
}

func setTopicConfig(t testing.TB, b *broker, topic, key, value string) {
	t.Helper()
	alterTopicConfig(t, b, topic, kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: kadm.StringPtr(value)})
}

// deleteTopicConfig removes the topic's own setting of key: the broker's default applies again.
func deleteTopicConfig(t testing.TB, b *broker, topic, key string) {
	t.Helper()
	alterTopicConfig(t, b, topic, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: key})
}

func alterTopicConfig(t testing.TB, b *broker, topic string, c kadm.AlterConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(b.Admin).AlterTopicConfigs(ctx, []kadm.AlterConfig{c}, topic)
	if err == nil {
		_, err = resp.On(topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		value := "(deleted)"
		if c.Value != nil {
			value = *c.Value
		}
		t.Fatalf("altering %s to %s on topic %s: %v", c.Name, value, topic, err)
	}
}

// stacksOf returns the goroutine stacks of a Go panic dump in log that mention pkg.
func stacksOf(log, pkg string) string {
	i := strings.Index(log, "goroutine ")
	if i < 0 {
		return "(no goroutine dump in the log)"
	}
	var keep []string
	for _, g := range strings.Split(log[i:], "\n\n") {
		if strings.Contains(g, "/"+pkg+".") || strings.Contains(g, "/"+pkg+"/") {
			keep = append(keep, g)
		}
	}
	return cut(strings.Join(keep, "\n\n"), 8000)
}

func lastLine(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

func firstLine(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}
