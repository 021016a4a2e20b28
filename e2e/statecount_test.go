package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
	sdk "github.com/ankka-flow/millrace/stdio/action"
)

// The running count the state cases deploy, played by this test binary on the Go SDK: each
// item's output says where its input lies and the count it saw and made, so the test can
// check every delivery's state against the input's known order. The test binary rather than
// a Python program: a SIGKILLed action is back within milliseconds (no interpreter to start),
// so the faults cost the run little, and the SDK under it is the one an author uses.

// countIn is an input record's value.
type countIn struct {
	K string `json:"k"`
}

// countOut is the output of one delivery: its input's partition, offset and key, the count
// its key's state held (saw) and the one it staged (n, saw+1).
type countOut struct {
	P   int32  `json:"p"`
	O   int64  `json:"o"`
	K   string `json:"k"`
	Saw int    `json:"saw"`
	N   int    `json:"n"`
}

// countState is a key's state.
type countState struct {
	N int `json:"n"`
}

// runCount serves the running count until shutdown.
func runCount() int {
	err := sdk.Serve(os.Stdin, os.Stdout, os.Stderr, func(ctx sdk.Context[sdk.NoConfig], in countIn) ([]countOut, error) {
		var st countState
		if _, err := ctx.State(&st); err != nil {
			return nil, err
		}
		out := countOut{P: ctx.Partition(), O: ctx.Offset(), K: in.K, Saw: st.N, N: st.N + 1}
		if err := ctx.SetState(countState{N: out.N}); err != nil {
			return nil, err
		}
		return []countOut{out}, nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e count:", err)
		return 1
	}
	return 0
}

// Sizes of the exact-totals input.
const (
	statePartitions = 4
	stateKeys       = 200
	stateRecords    = 20_000
)

// stateRun is one deployed running count: the pipeline, its changelog topic, and each
// replica's state directory and State port, kept across the replica's restarts (a restarted
// container finds its pod's emptyDir).
type stateRun struct {
	*pipeline
	changelog string

	mu    sync.Mutex
	dirs  map[int]string // FLOW_STATE_DIR by replica
	ports map[int]int    // FLOW_SIDECAR_PORT by replica
}

// newStateRun deploys the running count on an inlet of statePartitions partitions in delivery
// mode d, with a compacted changelog of as many partitions bound to the inlet. more are more
// sidecar variables.
func newStateRun(t *testing.T, b *broker, d string, more ...string) *stateRun {
	t.Helper()
	return newStateRunAs(t, b, d, "in", more...)
}

// newStateRunAs is newStateRun with the line's --state word given, e.g. "in,ttl=2s".
func newStateRunAs(t *testing.T, b *broker, d, state string, more ...string) *stateRun {
	t.Helper()
	return newStateRunWith(t, b, d, child(childCount, false, "--state", state), more...)
}

// newStateRunWith is newStateRun with the count played by a (its line keeping state on the
// inlet "in", its outputs and states those of childCount).
func newStateRunWith(t *testing.T, b *broker, d string, a action, more ...string) *stateRun {
	t.Helper()
	pl := newPipeline(t, b, a, statePartitions, append([]string{deliveryEnv(d)}, more...)...)
	// The verifier's ids are the inputs' places, which every output names (countOut).
	pl.a.inID = func(r *kgo.Record) string { return placeID(r.Partition, r.Offset) }
	pl.a.idOf = func(r *kgo.Record) string {
		var o countOut
		if json.Unmarshal(r.Value, &o) != nil {
			return "malformed " + string(r.Value)
		}
		return placeID(o.P, o.O)
	}
	sr := &stateRun{pipeline: pl, dirs: map[int]string{}, ports: map[int]int{}}
	sr.changelog = b.changelogTopic(t, statePartitions)
	pl.sidecarEnv = append(pl.sidecarEnv, "FLOW_INLET_IN_STATE_TOPIC="+sr.changelog)
	pl.replicaEnv = sr.replicaEnv
	return sr
}

// placeID names an input record by its place, partition@offset.
func placeID(p int32, o int64) string { return fmt.Sprintf("%d@%d", p, o) }

func (sr *stateRun) replicaEnv(r *replica) (bridge, sidecar []string) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if _, ok := sr.dirs[r.idx]; !ok {
		sr.dirs[r.idx] = sr.t.TempDir()
		sr.ports[r.idx] = testkit.FreePort(sr.t)
	}
	port := "FLOW_SIDECAR_PORT=" + strconv.Itoa(sr.ports[r.idx])
	return []string{port}, []string{port, "FLOW_STATE_DIR=" + sr.dirs[r.idx]}
}

// changelogTopic creates a compacted topic of partitions partitions named for the test, as an
// operator creates a changelog; it is deleted at cleanup.
func (b *broker) changelogTopic(t testing.TB, partitions int32) string {
	t.Helper()
	name := testkit.TopicName(t, "e2e-", "state")
	if err := b.CreateTopic(context.Background(), name, partitions, "cleanup.policy", "compact"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.deleteTopic(t, name) })
	return name
}

// countRecords returns n records over keys keys: each key once (when n allows), the rest drawn
// with seeded weights (key j weighs 1 + j%4, so the keys' counts differ), all in a seeded
// order, each record's value naming its key. Every key appears, so the checks that count the
// keys held hold whatever the seed: drawn alone, a light key is missing from 4,000 records
// about once in 60 runs.
func countRecords(seed uint64, n, keys int) []*kgo.Record {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var cum []int
	total := 0
	for j := range keys {
		total += 1 + j%4
		cum = append(cum, total)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		j := i
		if i >= keys {
			j, _ = slices.BinarySearch(cum, rng.IntN(total)+1)
		}
		k := fmt.Sprintf("k-%03d", j)
		rs[i] = &kgo.Record{Key: []byte(k), Value: fmt.Appendf(nil, `{"k":%q}`, k)}
	}
	rng.Shuffle(len(rs), func(a, b int) { rs[a], rs[b] = rs[b], rs[a] })
	return rs
}

// at is an input record's place.
type at struct {
	p int32
	o int64
}

// countTruth is what the input says the counts are.
type countTruth struct {
	index map[at]int     // the record's place among its key's records, from 1
	keyOf map[at]string  // its key
	count map[string]int // each key's records
	part  map[string]int32
}

// truth reads the counts off what was produced; a key found in two partitions fails the test
// (the default partitioner keeps a key in one).
func (sr *stateRun) truth(t testing.TB) countTruth {
	t.Helper()
	sr.mu.Lock()
	ps := slices.Clone(sr.produced)
	sr.mu.Unlock()
	slices.SortFunc(ps, func(a, b produced) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return int(a.offset - b.offset)
	})
	tr := countTruth{index: map[at]int{}, keyOf: map[at]string{}, count: map[string]int{}, part: map[string]int32{}}
	for _, p := range ps {
		if q, ok := tr.part[p.key]; ok && q != p.partition {
			t.Fatalf("key %s was written to partitions %d and %d", p.key, q, p.partition)
		}
		tr.part[p.key] = p.partition
		tr.count[p.key]++
		tr.index[at{p.partition, p.offset}] = tr.count[p.key]
		tr.keyOf[at{p.partition, p.offset}] = p.key
	}
	return tr
}

// countOutputs reads the outlet (read_committed) by input place; malformed outputs fail the
// test.
func (sr *stateRun) countOutputs(t testing.TB) map[at][]countOut {
	t.Helper()
	outs := map[at][]countOut{}
	for _, r := range sr.b.ReadAll(t, sr.outTopics["out"]) {
		var o countOut
		if err := json.Unmarshal(r.Value, &o); err != nil || o.K != string(r.Key) {
			t.Fatalf("output %s/%d@%d is not a count of its key %q: %s (%v)", r.Topic, r.Partition, r.Offset, r.Key, r.Value, err)
		}
		outs[at{o.P, o.O}] = append(outs[at{o.P, o.O}], o)
	}
	return outs
}

// changelogEntry is one changelog record of a key.
type changelogEntry struct {
	partition int32
	offset    int64
	n         int // the state's count; -1 for a tombstone
}

// changelogValues reads the changelog (read_committed) into each key's records in log order.
func (sr *stateRun) changelogValues(t testing.TB) map[string][]changelogEntry {
	t.Helper()
	byKey := map[string][]changelogEntry{}
	for _, r := range sr.b.ReadAll(t, sr.changelog) {
		e := changelogEntry{partition: r.Partition, offset: r.Offset, n: -1}
		if r.Value != nil {
			var st countState
			if err := json.Unmarshal(r.Value, &st); err != nil {
				t.Fatalf("changelog record %d@%d of key %q is not a count: %s (%v)", r.Partition, r.Offset, r.Key, r.Value, err)
			}
			e.n = st.N
		}
		byKey[string(r.Key)] = append(byKey[string(r.Key)], e)
	}
	for _, es := range byKey {
		slices.SortFunc(es, func(a, b changelogEntry) int { return int(a.offset - b.offset) })
	}
	return byKey
}

// problems collects a check's failures, keeping the first few in full.
type problems struct {
	n     int
	first []string
}

func (p *problems) add(format string, args ...any) {
	p.n++
	if len(p.first) < 12 {
		p.first = append(p.first, fmt.Sprintf(format, args...))
	}
}

func (p *problems) report(t testing.TB, what string) {
	t.Helper()
	if p.n > 0 {
		t.Errorf("%s: %d problems, the first:\n  %s", what, p.n, strings.Join(p.first, "\n  "))
	}
}

// countSummary is what a state case saw, for its report row.
type countSummary struct {
	in, outputs, redelivered, keysExact, changelogRecords int
}

// checkChangelog checks what both modes promise of the changelog: every key's records lie in
// its input's partition, its counts rise from 1 in log order (each batch writes a key's last
// count only, so a step may be more than one, but never zero or down: no update lost and none
// applied twice), and none is a tombstone. It returns each key's last count.
func checkChangelog(t testing.TB, tr countTruth, cl map[string][]changelogEntry) map[string]int {
	t.Helper()
	var ps problems
	last := map[string]int{}
	for k := range tr.count {
		es := cl[k]
		if len(es) == 0 {
			ps.add("key %s: no changelog record", k)
			continue
		}
		prev := 0
		for _, e := range es {
			switch {
			case e.partition != tr.part[k]:
				ps.add("key %s: changelog record %d@%d, but its input is in partition %d", k, e.partition, e.offset, tr.part[k])
			case e.n < 0:
				ps.add("key %s: a tombstone at %d@%d", k, e.partition, e.offset)
			case e.n <= prev:
				ps.add("key %s: changelog count %d at %d@%d after %d", k, e.n, e.partition, e.offset, prev)
			}
			prev = max(prev, e.n)
		}
		last[k] = es[len(es)-1].n
	}
	for k := range cl {
		if _, ok := tr.count[k]; !ok {
			ps.add("changelog key %q was never produced", k)
		}
	}
	ps.report(t, "changelog "+fmt.Sprint(len(cl))+" keys")
	return last
}

// checkCountsExact checks exactly once, as a read_committed reader sees it: one output per input
// record, the i-th record of each key having seen i-1, and every key's last changelog count
// its exact total.
func checkCountsExact(t testing.TB, tr countTruth, outs map[at][]countOut, cl map[string][]changelogEntry) countSummary {
	t.Helper()
	sum := countSummary{in: len(tr.index)}
	var ps problems
	for place, i := range tr.index {
		got := outs[place]
		sum.outputs += len(got)
		switch {
		case len(got) != 1:
			ps.add("input %d@%d (key %s, its record %d): %d outputs, want 1", place.p, place.o, tr.keyOf[place], i, len(got))
		case got[0].Saw != i-1 || got[0].N != i:
			ps.add("input %d@%d (key %s, its record %d): saw %d and made %d, want %d and %d", place.p, place.o, tr.keyOf[place], i, got[0].Saw, got[0].N, i-1, i)
		}
	}
	for place, got := range outs {
		if _, ok := tr.index[place]; !ok {
			ps.add("%d outputs for %d@%d, which was never produced", len(got), place.p, place.o)
		}
	}
	ps.report(t, "outputs")
	sum.keysExact = checkTotals(t, tr, checkChangelog(t, tr, cl), nil)
	for _, es := range cl {
		sum.changelogRecords += len(es)
	}
	return sum
}

// checkAtLeastOnce checks at least once as the README states it: every input record has an
// output; a redelivered record may see the state its first attempt left, so a key's last
// count is at least its total and exceeds it by at most the key's records delivered again
// (counted from the outputs' places); and every count from 1 to the last was made by some
// delivery of the key that saw the one before (each made from the value before it).
func checkAtLeastOnce(t testing.TB, tr countTruth, outs map[at][]countOut, cl map[string][]changelogEntry) countSummary {
	t.Helper()
	sum := countSummary{in: len(tr.index)}
	var ps problems
	again := map[string]int{}
	made := map[string]map[int]bool{}
	for place, i := range tr.index {
		got := outs[place]
		sum.outputs += len(got)
		k := tr.keyOf[place]
		if len(got) == 0 {
			ps.add("input %d@%d (key %s, its record %d): no output", place.p, place.o, k, i)
			continue
		}
		again[k] += len(got) - 1
		sum.redelivered += len(got) - 1
		for _, o := range got {
			if o.N != o.Saw+1 {
				ps.add("input %d@%d (key %s): saw %d and made %d", place.p, place.o, k, o.Saw, o.N)
			}
			if made[k] == nil {
				made[k] = map[int]bool{}
			}
			made[k][o.N] = true
		}
	}
	for place, got := range outs {
		if _, ok := tr.index[place]; !ok {
			ps.add("%d outputs for %d@%d, which was never produced", len(got), place.p, place.o)
		}
	}
	ps.report(t, "outputs")
	last := checkChangelog(t, tr, cl)
	var chain problems
	for k, n := range last {
		for v := 1; v <= n; v++ {
			if !made[k][v] {
				chain.add("key %s: its last count is %d, but no delivery made %d", k, n, v)
				break
			}
		}
	}
	chain.report(t, "counts made")
	sum.keysExact = checkTotals(t, tr, last, again)
	for _, es := range cl {
		sum.changelogRecords += len(es)
	}
	return sum
}

// checkTotals checks each key's last count against its total: equal when again is nil, else
// at least the total and at most the total plus the key's redeliveries. It returns how many
// keys are exact.
func checkTotals(t testing.TB, tr countTruth, last map[string]int, again map[string]int) int {
	t.Helper()
	var ps problems
	exact := 0
	for k, want := range tr.count {
		got, ok := last[k]
		switch {
		case !ok:
			continue // checkChangelog said so
		case got == want:
			exact++
		case again == nil:
			ps.add("key %s: last count %d, want exactly %d", k, got, want)
		case got < want || got > want+again[k]:
			ps.add("key %s: last count %d, want %d to %d (%d records of it delivered again)", k, got, want, want+again[k], again[k])
		}
	}
	ps.report(t, "totals")
	return exact
}

// stateReport logs a state case's row and appends it to the MILLRACE_E2E_REPORT file.
func (sr *stateRun) stateReport(table string, s countSummary, seen string) {
	sr.t.Helper()
	sr.t.Logf("%s [%s]: in %d, outputs %d, redelivered %d, keys exact %d of %d, changelog records %d; seen: %s",
		sr.t.Name(), sr.b.Name(), s.in, s.outputs, s.redelivered, s.keysExact, stateKeys, s.changelogRecords, seen)
	writeReport(table, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %s |", sr.t.Name(), sr.b.Name(),
		s.in, s.outputs, s.redelivered, s.keysExact, s.changelogRecords, strings.ReplaceAll(cut(seen, 700), "|", `\|`)))
}

// Victims of the state faults.
const (
	victimSidecar = "sidecar"
	// victimSidecarMoved is the sidecar SIGKILLed and started again with an empty
	// FLOW_STATE_DIR, as in a pod rescheduled with a new emptyDir: it restores in full.
	victimSidecarMoved = "sidecar-moved"
	victimBridge       = "bridge"
	victimAction       = "action"
)

// strike SIGKILLs the victims, in an order shuffled by seed, each after the group has
// committed more since the last one (so every fault strikes a pipeline at work) and a further
// seeded pause in [lo, hi); a killed sidecar or bridge is started again at once, in its pod
// (the same state directory, port and group member; for victimSidecarMoved, a new state
// directory), a killed action by its bridge. It
// returns what it did, for the report.
func (sr *stateRun) strike(t *testing.T, r *replica, seed uint64, lo, hi time.Duration, victims ...string) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0xfa17))
	victims = slices.Clone(victims)
	rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	var did []string
	last := 0
	for _, v := range victims {
		sr.waitProgress(t, last, stateRecords)
		<-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))) // the fault schedule
		last, _ = sr.committedCount()
		switch v {
		case victimSidecar:
			r.sidecar.Kill()
			sr.startSidecar(r)
			did = append(did, fmt.Sprintf("sidecar at %d", last))
		case victimSidecarMoved:
			r.sidecar.Kill()
			sr.mu.Lock()
			sr.dirs[r.idx] = sr.t.TempDir()
			sr.mu.Unlock()
			sr.startSidecar(r)
			did = append(did, fmt.Sprintf("sidecar at %d (started again on an empty FLOW_STATE_DIR)", last))
		case victimBridge:
			r.bridge.Kill()
			sr.startBridge(r)
			did = append(did, fmt.Sprintf("bridge at %d", last))
		case victimAction:
			n := 0
			for _, pid := range testkit.Children(r.bridge.Pid()) {
				if testkit.Alive(pid) && killPid(pid) {
					n++
				}
			}
			did = append(did, fmt.Sprintf("%d action processes at %d", n, last))
		}
	}
	return "SIGKILLed: " + strings.Join(did, ", ")
}

func killPid(pid int) bool { return syscall.Kill(pid, syscall.SIGKILL) == nil }
