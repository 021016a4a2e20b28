package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
)

// State per key end to end: the running count (statecount_test.go) over stateRecords records
// of stateKeys keys whose counts are known, its states in a compacted changelog, through real
// sidecars and bridges. Helpers are in statecount_test.go.

// stateIdle bounds how long a state case may see no commit at all.
const stateIdle = idleFault

// TestStateExactTotals SIGKILLs the sidecar, the bridge and the action at seeded random
// intervals while the counts run, each killed process started again as in its pod, and checks
// the counts: exactly once, one output per input record, each having seen its key's count
// before it, and the changelog's exact totals; at least once, as stated (checkAtLeastOnce).
// TestAsyncStateExactTotals runs the same with the count on the Python SDK's async handler.
func TestStateExactTotals(t *testing.T) {
	t.Parallel()
	eachDelivery(t, func(t *testing.T, d string) {
		stateExactTotals(t, d, child(childCount, false, "--state", "in"), "state: exact totals under SIGKILLs")
	})
}

// stateExactTotals is TestStateExactTotals in delivery mode d with the count played by a,
// its row reported in table.
func stateExactTotals(t *testing.T, d string, a action, table string) {
	b := newBroker(t)
	sr := newStateRunWith(t, b, d, a)
	s := seed(t)
	r := sr.start(0)
	wait := sr.spread(countRecords(s, stateRecords, stateKeys), 12*time.Second)
	did := sr.strike(t, r, s, 500*time.Millisecond, 2*time.Second,
		victimSidecar, victimSidecarMoved, victimBridge, victimBridge, victimAction, victimAction, victimAction)
	wait()
	sr.waitDone(stateIdle)
	sum := sr.checkCounts(t, r, d == "exactly-once")
	sr.stateReport(table, sum, did)
	// At least once, the records delivered again are the batches in flight (up to 100
	// records per partition) at the four sidecar and bridge kills, as in faults_test.go.
	if bound := 4 * statePartitions * 100; sum.redelivered > bound {
		t.Errorf("%d records delivered again; want at most %d (the batches in flight at the faults)", sum.redelivered, bound)
	}
}

// TestStateNoFaults runs the count at least once without a fault: the totals are exact, as
// exactly once makes them under faults.
func TestStateNoFaults(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	sr := newStateRun(t, b, "at-least-once")
	r := sr.start(0)
	sr.spread(countRecords(seed(t), stateRecords/2, stateKeys), 4*time.Second)()
	sr.waitDone(stateIdle)
	sum := sr.checkCounts(t, r, true)
	checkStateMetricsDeployed(t, r)
	sr.stateReport("state: no faults, at least once", sum, "")
}

// checkStateMetricsDeployed holds that every state metric the deployed dashboard, alerts and
// autoscaler query name is one the stateful sidecar of r exports (TestPrometheus checks the
// others on a stateless pipeline, whose sidecar exports none of these).
func checkStateMetricsDeployed(t *testing.T, r *replica) {
	t.Helper()
	fams, err := testkit.Metrics(r.metrics)
	if err != nil {
		t.Fatalf("scraping the sidecar: %v", err)
	}
	var missing []string
	n := 0
	for _, name := range deployedMetricNames(t) {
		if !strings.HasPrefix(name, stateMetricPrefix) {
			continue
		}
		n++
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(name, suffix); ok && fams[f] != nil {
				family = f
			}
		}
		if fams[family] == nil {
			missing = append(missing, name)
		}
	}
	if n == 0 || len(missing) > 0 {
		t.Errorf("of the %d state metrics deploy/ names, the stateful sidecar does not export %v", n, missing)
	}
}

// checkCounts reads the outlet and the changelog and checks them, exactly (the exactly-once
// promise) or as at least once states; then the sidecar of r, which owns every partition,
// must hold every key.
func (sr *stateRun) checkCounts(t *testing.T, r *replica, exact bool) countSummary {
	t.Helper()
	tr := sr.truth(t)
	if len(tr.count) != stateKeys {
		t.Errorf("%d keys produced, want %d", len(tr.count), stateKeys)
	}
	// The verifier's checks of ids, duplicates, aborted reads and per-key order first; then
	// the counts' own (the state totals).
	sr.tally().check(t)
	outs := sr.countOutputs(t)
	cl := sr.changelogValues(t)
	var sum countSummary
	if exact {
		sum = checkCountsExact(t, tr, outs, cl)
	} else {
		sum = checkAtLeastOnce(t, tr, outs, cl)
	}
	keys := 0.0
	if !testkit.Eventually(30*time.Second, func() bool {
		keys = r.sidecarMetric("millrace_sidecar_state_keys")
		return keys == stateKeys
	}) {
		t.Errorf("millrace_sidecar_state_keys sums to %v, want %d (every key, one sidecar owning every partition)", keys, stateKeys)
	}
	return sum
}

// TestStateVersions runs a stateless action line against the sidecar that can keep state:
// without a changelog it runs as before and binds no State port; with a changelog bound to its
// inlet the sidecar refuses it, naming the variable, and nothing is consumed. A stateful line
// deployed without a changelog is refused the same way.
func TestStateVersions(t *testing.T) {
	t.Parallel()
	t.Run("stateless", func(t *testing.T) {
		t.Parallel()
		b := newBroker(t)
		port := testkit.FreePort(t)
		pl := newPipeline(t, b, child(childEcho, false), 2, "FLOW_SIDECAR_PORT="+strconv.Itoa(port))
		checkDescriptorVersion(t, pl.descriptor, protocol.BaseVersion)
		pl.start(0)
		pl.produce(pl.records(0, 200)...)
		pl.waitDone(60 * time.Second)
		tl := pl.tally()
		pl.report("state: a stateless line against the stateful sidecar", tl, "")
		tl.check(t)
		if tl.out != tl.in || tl.dup != 0 {
			t.Errorf("tally = %s; want every record out once", tl)
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			c.Close()
			t.Errorf("something listens on FLOW_SIDECAR_PORT %d, though no inlet keeps state", port)
		}
	})
	t.Run("changelog-for-a-stateless-line", func(t *testing.T) {
		t.Parallel()
		b := newBroker(t)
		pl := newPipeline(t, b, child(childEcho, false), 2)
		cl := b.changelogTopic(t, 2)
		pl.sidecarEnv = append(pl.sidecarEnv, "FLOW_INLET_IN_STATE_TOPIC="+cl, "FLOW_STATE_DIR="+t.TempDir(),
			"FLOW_SIDECAR_PORT="+strconv.Itoa(testkit.FreePort(t)))
		checkRefused(t, pl, "FLOW_INLET_IN_STATE_TOPIC set for a stateless line", "FLOW_INLET_IN_STATE_TOPIC")
	})
	t.Run("stateful-line-without-changelog", func(t *testing.T) {
		t.Parallel()
		b := newBroker(t)
		pl := newPipeline(t, b, child(childCount, false, "--state", "in"), 2, "FLOW_SIDECAR_PORT="+strconv.Itoa(testkit.FreePort(t)))
		checkDescriptorVersion(t, pl.descriptor, protocol.Version)
		// The descriptor says 1.1, not which inlets keep state: the refusal names the pattern.
		checkRefused(t, pl, "a stateful line (--state in) and no FLOW_INLET_IN_STATE_TOPIC", "FLOW_INLET_<PORT>_STATE_TOPIC")
	})
}

// checkRefused starts the pipeline's replica, writes it records, and wants its sidecar to
// exit with an error naming the variable, having consumed nothing.
func checkRefused(t *testing.T, pl *pipeline, what, variable string) {
	t.Helper()
	r := pl.start(0)
	pl.produce(pl.records(0, 20)...)
	select {
	case <-r.sidecar.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the sidecar still runs 60 s after it started with %s\n%s", what, pl.logTails(20))
	}
	if err := r.sidecar.Err(); err == nil {
		t.Errorf("the sidecar exited 0 with %s; want a refusal\n%s", what, r.sidecar.Tail(20))
	}
	if !r.sidecar.LogHas(variable) {
		t.Errorf("the sidecar's refusal of %s does not name %s:\n%s", what, variable, r.sidecar.Tail(20))
	}
	t.Logf("the sidecar: %s", cut(lastLine(r.sidecar.LogLines(variable, 100)), 600))
	if n, c := pl.committedCount(); n != 0 {
		t.Errorf("%d records committed (commits %v); want none", n, c)
	}
	if got := pl.b.ReadAllUncommitted(t, pl.outTopics["out"]); len(got) != 0 {
		t.Errorf("%d records on the outlet; want none", len(got))
	}
}

// checkDescriptorVersion fails the test unless the descriptor says protocol version want.
func checkDescriptorVersion(t testing.TB, path, want string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := protocol.UnmarshalDescriptor(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.GetProtocolVersion(); got != want {
		t.Errorf("descriptor %s: protocol version %q, want %q", path, got, want)
	}
}

// TestStateRebalance starts a second replica mid-run, exactly once, waits until it owns
// partitions and has served them, and stops it again: state moves with each partition both
// ways (the new owner restores before its first batch), so the counts stay exact.
func TestStateRebalance(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	sr := newStateRun(t, b, "exactly-once")
	r0 := sr.start(0)
	wait := sr.spread(countRecords(seed(t), stateRecords, stateKeys), 12*time.Second)
	sr.waitProgress(t, 0, stateRecords) // mid-run
	r1 := sr.start(1)
	if !testkit.Eventually(60*time.Second, func() bool { return r1.sidecarMetric("millrace_sidecar_partitions_assigned") > 0 }) {
		t.Fatalf("the second replica was assigned no partition within 60 s\n%s", sr.logTails(20))
	}
	_, assigned := sr.committedCount()
	if !testkit.Eventually(stateIdle, func() bool { return sr.eachPartitionPast(assigned) }) {
		_, c := sr.committedCount()
		t.Fatalf("not every partition progressed within %s of the rebalance: commits %v at it, %v now, ends %v\n%s", stateIdle, assigned, c, sr.ends(), sr.logTails(20))
	}
	restored := r1.sidecarMetric("millrace_sidecar_state_restored_records_total")
	stop(t, r1.sidecar, 30*time.Second)
	stop(t, r1.bridge, 30*time.Second)
	wait()
	sr.waitDone(stateIdle)
	sum := sr.checkCounts(t, r0, true)
	sr.stateReport("state: a second replica joins, then leaves (exactly once)", sum, fmt.Sprintf("the second replica restored %v changelog records", restored))
	if restored <= 0 {
		t.Errorf("the second replica's millrace_sidecar_state_restored_records_total is %v; want above 0 (it took partitions whose keys had state)", restored)
	}
}

// TestStateRunData runs the count twice with `millrace run --data DIR` on the same input: the
// second run's counts continue the first's, its states kept in DIR. A third run without --data
// starts over.
func TestStateRunData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	input := filepath.Join(dir, "input.jsonl")
	var lines strings.Builder
	const keys, each = 3, 10
	for i := range keys * each {
		k := fmt.Sprintf("k-%d", i%keys)
		fmt.Fprintf(&lines, `{"key":%q,"payload":{"k":%q}}`+"\n", k, k)
	}
	if err := os.WriteFile(input, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	line := quoteLine([]string{"count", "--in", "in=e2e.v1", "--out", "out=e2e.v1", "--state", "in", "--", bin.self})
	data := filepath.Join(dir, "data")
	run := func(what string, args ...string) map[string][]int {
		t.Helper()
		cmd := exec.Command(bin.millrace, append([]string{"run", line, "--input", input}, args...)...)
		cmd.Env = append(testkit.CleanEnv(), testkit.RoleEnv(childCount))
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: millrace run %s: %v\n%s", what, strings.Join(args, " "), err, cut(stderr.String(), 3000))
		}
		counts := map[string][]int{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var rec struct {
				Key     string
				Payload countOut
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%s: an output line of millrace run is not a count: %q (%v)", what, l, err)
			}
			counts[rec.Key] = append(counts[rec.Key], rec.Payload.N)
		}
		return counts
	}
	want := func(what string, got map[string][]int, from int) {
		t.Helper()
		for i := range keys {
			k := fmt.Sprintf("k-%d", i)
			ns := slices.Sorted(slices.Values(got[k]))
			var exp []int
			for n := from; n < from+each; n++ {
				exp = append(exp, n)
			}
			if !slices.Equal(ns, exp) {
				t.Errorf("%s: key %s counted %v; want %v", what, k, ns, exp)
			}
		}
	}
	want("the first run with --data", run("first", "--data", data), 1)
	want("the second run with the same --data", run("second", "--data", data), each+1)
	want("a run without --data", run("third"), 1)
}

// TestStateGap leaves a sidecar's state file behind a changelog whose log start has moved past
// it: the replica runs on state directory A, then on a new one B (a pod rescheduled) while
// more counts are written, then DeleteRecords moves every changelog partition's log start
// halfway into what B wrote, and the replica runs on A again. A's file is behind the log
// start: the sidecar must restore in full (reason="gap"), so every key continues from the
// last count the changelog still holds at or after the new log start, or from none, never
// from A's file. kfake only: Kafka refuses DeleteRecords on a compacted topic.
func TestStateGap(t *testing.T) {
	t.Parallel()
	b := &broker{testkit.NewBroker(t, testkit.BrokerOptions{KfakeOnly: true, Client: []kgo.Opt{kgo.ProducerLinger(0)}})}
	sr := newStateRun(t, b, "at-least-once")
	s := seed(t)
	r := sr.start(0)
	run := func(i int) {
		sr.produce(countRecords(s+uint64(i), stateRecords/10, stateKeys)...)
		sr.waitDone(stateIdle)
		stop(t, r.sidecar, 30*time.Second)
	}
	run(0)
	sr.mu.Lock()
	dirA := sr.dirs[r.idx]
	sr.dirs[r.idx] = t.TempDir()
	sr.mu.Unlock()
	ctx := context.Background()
	before, err := b.EndOffsets(ctx, sr.changelog)
	if err != nil {
		t.Fatal(err)
	}
	sr.startSidecar(r)
	run(1)
	after, err := b.EndOffsets(ctx, sr.changelog)
	if err != nil {
		t.Fatal(err)
	}
	// What a full restore from the new log start finds: each key's last count at or after it.
	logStart := map[int32]int64{}
	var del kadm.Offsets
	for p, end := range after {
		logStart[p] = before[p] + (end-before[p])/2
		del.AddOffset(sr.changelog, p, logStart[p], -1)
	}
	kept := map[string]int{}
	for k, es := range sr.changelogValues(t) {
		for _, e := range es {
			if e.offset >= logStart[e.partition] {
				kept[k] = e.n
			}
		}
	}
	resps, err := kadm.NewClient(b.Admin).DeleteRecords(ctx, del)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("DeleteRecords %v on %s: %v", logStart, sr.changelog, err)
	}

	sr.mu.Lock()
	sr.dirs[r.idx] = dirA
	first := len(sr.produced)
	sr.mu.Unlock()
	sr.startSidecar(r)
	sr.produce(countRecords(s+2, stateRecords/10, stateKeys)...)
	sr.waitDone(stateIdle)

	tr := sr.truth(t)
	outs := sr.countOutputs(t)
	seen := map[string]int{}
	var ps problems
	sr.mu.Lock()
	last := slices.Clone(sr.produced[first:])
	sr.mu.Unlock()
	slices.SortFunc(last, func(a, b produced) int { return int(a.offset - b.offset) })
	for _, p := range last {
		place := at{p.partition, p.offset}
		seen[p.key]++
		want := kept[p.key] + seen[p.key] - 1
		switch got := outs[place]; {
		case len(got) != 1:
			ps.add("input %d@%d (key %s): %d outputs, want 1", place.p, place.o, p.key, len(got))
		case got[0].Saw != want:
			ps.add("input %d@%d (key %s, its record %d after the gap, %d kept past the log start): saw %d, want %d", place.p, place.o, p.key, seen[p.key], kept[p.key], got[0].Saw, want)
		}
	}
	ps.report(t, "outputs after the gap")
	gap := 0.0
	if !testkit.Eventually(10*time.Second, func() bool {
		e, err := testkit.Metrics(r.metrics)
		gap, _ = e.Value("millrace_sidecar_state_full_restores_total", "reason", "gap")
		return err == nil && gap > 0
	}) {
		t.Errorf("millrace_sidecar_state_full_restores_total{reason=\"gap\"} is %v after the sidecar started on a file behind the log start; want above 0", gap)
	}
	t.Logf("%d keys kept a count past the new log start, %d restart from none; %d records in all; full restores for a gap: %v", len(kept), stateKeys-len(kept), len(tr.index), gap)
}
