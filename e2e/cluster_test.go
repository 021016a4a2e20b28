package e2e_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// Broker faults, on the real broker only: kfake runs in the test process and cannot be paused
// or killed alone, so these cases' tables have rows only when MILLRACE_KAFKA_BROKERS names a
// real broker (TestPauseBroker) or scripts/kafka-cluster's three nodes (TestClusterFaults); on
// kfake they run no row. They are not parallel: a broker fault strikes every case using the
// broker, so they run before the parallel cases start.

// envCluster names the home of the cluster scripts/kafka-cluster started (it prints it beside
// MILLRACE_KAFKA_BROKERS): set, the cluster rows strike its nodes.
const envCluster = "MILLRACE_KAFKA_CLUSTER"

// clusterHome is the home of the three-node cluster the suite runs on, or "".
func clusterHome() string {
	if testkit.RealBrokers() == nil {
		return ""
	}
	return os.Getenv(envCluster)
}

// kafkaScript runs scripts/kafka-cluster (on the cluster, its home given) or scripts/kafka (the
// one broker, on the port of its address) with args.
func (b *broker) kafkaScript(t testing.TB, args ...string) string {
	t.Helper()
	var cmd *exec.Cmd
	if home := clusterHome(); home != "" {
		cmd = exec.Command(filepath.Join(bin.root, "scripts/kafka-cluster"), args...)
		cmd.Env = append(os.Environ(), "MILLRACE_KAFKA_HOME="+home)
	} else {
		host, port, _ := net.SplitHostPort(b.Addrs[0])
		if host != "127.0.0.1" {
			t.Fatalf("%s is not a broker scripts/kafka started on 127.0.0.1", b.Addrs[0])
		}
		cmd = exec.Command(filepath.Join(bin.root, "scripts/kafka"), args...)
		cmd.Env = append(os.Environ(), "MILLRACE_KAFKA_PORT="+port)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// onReal returns rows on a real broker and none on kfake.
func onReal[T any](rows ...T) []T {
	if testkit.RealBrokers() == nil {
		return nil
	}
	return rows
}

// brokerPause is how long TestPauseBroker keeps the broker frozen.
const brokerPause = 12 * time.Second

// TestPauseBroker SIGSTOPs the Kafka JVM for brokerPause and SIGCONTs it, one pipeline per
// delivery mode running through the same pause: on the one broker, the broker; on the
// cluster, the node coordinating the exactly-once pipeline's group.
func TestPauseBroker(t *testing.T) {
	for _, fault := range onReal("broker SIGSTOP") {
		t.Run("paused", func(t *testing.T) {
			b := newBroker(t)
			runs := b.startRuns(t, false)
			var node []string // the one broker: scripts/kafka's commands take no node
			if clusterHome() != "" {
				node = []string{strconv.Itoa(int(b.coordinator(t, runs[len(runs)-1].pl.group, false)))}
			}
			on := func(cmd string) []string { return append([]string{cmd}, node...) }
			pid := strings.TrimSpace(b.kafkaScript(t, on("pid")...))
			t.Logf("pausing the broker %v (pid %s) for %s", node, pid, brokerPause)
			b.kafkaScript(t, on("pause")...)
			t.Cleanup(func() { b.kafkaScript(t, on("continue")...) })
			time.Sleep(brokerPause) // the fault's length
			b.kafkaScript(t, on("continue")...)
			b.finishRuns(t, runs, fault, fmt.Sprintf("broker %v (pid %s) paused %.0f s", node, pid, brokerPause.Seconds()))
		})
	}
}

// clusterRole is a node a cluster row strikes, found for the exactly-once pipeline.
type clusterRole string

const (
	roleLeader = clusterRole("partition leader")  // of the inlet's partition 0
	roleTxn    = clusterRole("txn coordinator")   // of the sidecar's transactional id
	roleGroup  = clusterRole("group coordinator") // of the consumer group
)

// clusterDown is how long a hard-killed node stays down; a cleanly stopped one is started
// again at once.
const clusterDown = 6 * time.Second

// TestClusterFaults hard-kills (SIGKILL) and cleanly stops (SIGTERM) the node holding each role
// in turn (the inlet's partition leader, the transaction coordinator, the group coordinator)
// and starts it again on its data, while four pipelines run through it: the keyed echo in both
// delivery modes and the running count (--state) in both. Every row checks the verifier and
// the count's totals and reports the longest stall after the fault.
func TestClusterFaults(t *testing.T) {
	type row struct {
		fault string
		role  clusterRole
	}
	var rows []row
	if clusterHome() != "" {
		for _, f := range []string{"kill", "term"} {
			for _, r := range []clusterRole{roleLeader, roleTxn, roleGroup} {
				rows = append(rows, row{f, r})
			}
		}
	}
	for _, rw := range rows {
		t.Run(fmt.Sprintf("%s-%s", rw.fault, rw.role), func(t *testing.T) {
			b := newBroker(t)
			runs := b.startRuns(t, true)
			eo := runs[1].pl // the keyed echo, exactly once
			var node int32
			switch rw.role {
			case roleLeader:
				node = b.leaderOf(t, eo.inTopic, 0)
			case roleTxn:
				node = b.coordinator(t, eo.group+"."+eo.group+"-0", true)
			case roleGroup:
				node = b.coordinator(t, eo.group, false)
			}
			n := strconv.Itoa(int(node))
			what := "SIGKILL"
			if rw.fault == "kill" {
				b.kafkaScript(t, "kill", n)
				time.Sleep(clusterDown) // the fault's length
			} else {
				what = "SIGTERM"
				start := time.Now()
				b.kafkaScript(t, "term", n)
				t.Logf("node %s stopped cleanly in %s", n, time.Since(start).Round(time.Millisecond))
			}
			b.kafkaScript(t, "start-node", n)
			b.finishRuns(t, runs, fmt.Sprintf("broker %s of the %s", what, rw.role), fmt.Sprintf("node %s (%s) %s", n, rw.role, what))
		})
	}
}

// faultRun is one pipeline a broker fault strikes: the keyed echo, or the running count.
type faultRun struct {
	pl    *pipeline
	sr    *stateRun // the running count, or nil
	r     *replica
	d     string
	total int // the records it produces
	wait  func()
	meter *stallMeter
}

// startRuns starts the pipelines a broker fault strikes (the keyed echo in both delivery
// modes, and with state the running count in both), produces their records over a while in
// the background, and returns once every one commits: at work, its stall meter running.
func (b *broker) startRuns(t *testing.T, state bool) []*faultRun {
	t.Helper()
	var runs []*faultRun
	for _, d := range deliveries() {
		pl := newPipeline(t, b, keyedEcho(), 4, deliveryEnv(d))
		pl.name = t.Name() + "/" + d
		runs = append(runs, &faultRun{pl: pl, d: d, r: pl.start(0), total: ciN(3000)})
	}
	if state {
		for _, d := range deliveries() {
			sr := newStateRun(t, b, d)
			sr.name = t.Name() + "/state/" + d
			runs = append(runs, &faultRun{pl: sr.pipeline, sr: sr, d: d, r: sr.start(0), total: ciN(4000)})
		}
	}
	// Every pipeline deployed first, then the records of all flow at once: the fault strikes
	// each mid-run.
	s := seed(t)
	for _, fr := range runs {
		if fr.sr != nil {
			fr.wait = fr.sr.spread(countRecords(s, fr.total, stateKeys), faultSpread)
		} else {
			fr.wait = fr.pl.produceSpread(0, fr.total, faultSpread)
		}
	}
	for _, fr := range runs {
		fr.pl.waitProgress(t, 0, fr.total)
		fr.meter = fr.pl.meterStalls()
	}
	return runs
}

// faultSpread is how long the broker-fault cases' records take to produce.
const faultSpread = 12 * time.Second

// finishRuns waits for every run to commit all its records, then verifies each and reports
// its row of the fault table.
func (b *broker) finishRuns(t *testing.T, runs []*faultRun, fault, did string) {
	t.Helper()
	for _, fr := range runs {
		fr.wait()
	}
	for _, fr := range runs {
		fr.pl.waitDone(idleFault)
		st := fr.meter.stop()
		tl := fr.pl.tally()
		mode := fr.d
		if fr.sr != nil {
			mode += ", --state"
		}
		fr.pl.report("broker faults", tl, fmt.Sprintf("%s; %s", did, st))
		writeFaultRow(fr.pl, fault, mode, tl, st)
		tl.check(t)
		tl.checkDup(t, 4*100)
		if fr.sr != nil {
			fr.sr.checkCounts(t, fr.r, fr.d == "exactly-once")
		}
	}
}

// leaderOf returns the node leading partition p of topic.
func (b *broker) leaderOf(t testing.TB, topic string, p int32) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(b.Admin).Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return md.Topics[topic].Partitions[p].Leader
}

// coordinator returns the node coordinating a group, or a transactional id when txn.
func (b *broker) coordinator(t testing.TB, key string, txn bool) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(b.Admin)
	find := adm.FindGroupCoordinators
	if txn {
		find = adm.FindTxnCoordinators
	}
	c := find(ctx, key)[key]
	if c.Err != nil {
		t.Fatalf("the coordinator of %s: %v", key, c.Err)
	}
	return c.NodeID
}
