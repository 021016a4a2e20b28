package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// action is a streamlet the suite deploys: how to run its bridge, describe it, and find the id
// of an output record.
type action struct {
	name     string   // the streamlet's name
	args     []string // the arguments of `millrace bridge`
	describe string   // the argument of `millrace describe`
	in       string   // the inlet port
	outs     []string // the outlet ports (the dead-letter port among them)
	dead     string   // the --dead-letter port, or ""
	env      []string // extra environment of the bridge (and so of the action)
	// value returns the input value of record i; nil means JSON {"id": ID, "n": i}.
	value func(id string, i int) []byte
	// idOf returns the id of an output record: by default its key, which the echo actions keep.
	idOf func(r *kgo.Record) string
	// inID returns the id of an input record once written; by default its key.
	inID func(r *kgo.Record) string
	// keys, when above 0, keys record i by k-(i mod keys) instead of its id: many records
	// per key, whose order the verifier checks.
	keys int
}

// scoreListing is the Python example, actions/score-listing; every record is a listing it
// scores, the output carrying the listing's id.
func scoreListing() action {
	dir := filepath.Join(bin.root, "actions/score-listing")
	return action{
		name: "score-listing", args: []string{"--config", filepath.Join(dir, "action.conf")}, describe: dir,
		in: "listings", outs: []string{"scores", "rejects", "unsure"},
		value: func(id string, i int) []byte {
			return fmt.Appendf(nil, `{"id":%q,"rooms":%d,"surface_m2":%d,"price_eur":%d,"age_hours":1,"city":"Lyon"}`, id, 2+i%4, 30+i%90, 100000+i)
		},
		idOf: func(r *kgo.Record) string {
			var v struct{ ID string }
			json.Unmarshal(r.Value, &v)
			return v.ID
		},
	}
}

// goEcho is actions/go-echo (the SDK example), built once.
func goEcho() action {
	return lineAction("go-echo", []string{"--in", "in=echo.v1", "--out", "out=echo.v1"}, bin.goEcho)
}

// child is this test binary playing an action in mode (runChild); dead adds a dead-letter
// outlet. flags are more words of the config line.
func child(mode string, dead bool, flags ...string) action {
	words := []string{"--in", "in=e2e.v1", "--out", "out=e2e.v1"}
	if dead {
		words = append(words, "--out", "dead=e2e.v1", "--dead-letter", "dead")
	}
	a := lineAction("e2e-"+mode, append(words, flags...), bin.self)
	a.env = []string{testkit.RoleEnv(mode)}
	if dead {
		a.dead = "dead"
	}
	return a
}

// lineAction is a streamlet given by config-line words and a command.
func lineAction(name string, words []string, command ...string) action {
	args := append(append(append([]string{name}, words...), "--"), command...)
	a := action{name: name, args: args, describe: quoteLine(args), in: "", outs: nil}
	for i := 0; i+1 < len(words); i++ {
		port, _, _ := strings.Cut(words[i+1], "=")
		switch words[i] {
		case "--in":
			a.in = port
		case "--out":
			a.outs = append(a.outs, port)
		}
	}
	return a
}

// quoteLine writes words as one config line, each word single-quoted.
func quoteLine(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// produced is one input record: its id (what its outputs carry, action.inID), its key and
// where it landed.
type produced struct {
	id        string
	key       string
	partition int32
	offset    int64
}

// envDelivery, when set to at-least-once or exactly-once, runs the fault cases in that
// delivery mode only (both by default).
const envDelivery = "MILLRACE_E2E_DELIVERY"

// deliveries are the sidecar's delivery modes the fault cases run in.
func deliveries() []string {
	if d := os.Getenv(envDelivery); d != "" {
		return []string{d}
	}
	return []string{"at-least-once", "exactly-once"}
}

// eachDelivery runs f once per delivery mode, as parallel subtests named for the mode.
func eachDelivery(t *testing.T, f func(t *testing.T, delivery string)) {
	for _, d := range deliveries() {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// deliveryEnv is the sidecar's variable for delivery mode d.
func deliveryEnv(d string) string { return "FLOW_DELIVERY=" + d }

// pipeline is one deployed streamlet: its topics, group, descriptor, and its replicas (a
// bridge and a sidecar each).
type pipeline struct {
	t          testing.TB
	name       string // the case's name in the report; the test's by default
	b          *broker
	a          action
	dir        string
	inTopic    string
	outTopics  map[string]string // port → topic
	group      string
	descriptor string
	sidecarEnv []string
	// replicaEnv, when set, adds a replica's own variables to its bridge's and its sidecar's
	// environment (the same at each of their starts), as a pod's own settings.
	replicaEnv func(r *replica) (bridge, sidecar []string)

	mu       sync.Mutex
	produced []produced
	replicas []*replica
	// earlier holds output records read from an outlet before it was deleted, by port; the
	// tally counts them with what the outlet holds at the end.
	earlier map[string][]*kgo.Record
}

// replica is one bridge and its sidecar.
type replica struct {
	idx     int
	port    int
	bridge  *testkit.Proc
	sidecar *testkit.Proc
	metrics string // the sidecar's FLOW_METRICS_ADDR, the same for each of its starts
	// starts and sidecarStarts count the processes started; each has its own log,
	// bridge-IDX.N.log and sidecar-IDX.N.log.
	starts        int
	sidecarStarts int
}

// newPipeline creates the topics (the inlet with partitions partitions, each outlet with 2)
// and writes descriptor.json with `millrace describe`. sidecarEnv adds or overrides FLOW_*
// variables.
func newPipeline(t testing.TB, b *broker, a action, partitions int32, sidecarEnv ...string) *pipeline {
	t.Helper()
	return newPipelineOut(t, b, a, partitions, 2, sidecarEnv...)
}

// newPipelineOut is newPipeline with outPartitions partitions on each outlet.
func newPipelineOut(t testing.TB, b *broker, a action, partitions, outPartitions int32, sidecarEnv ...string) *pipeline {
	t.Helper()
	pl := &pipeline{t: t, b: b, a: a, dir: logDir(t), outTopics: map[string]string{}, sidecarEnv: sidecarEnv}
	pl.inTopic = b.topic(t, "in", partitions)
	for _, o := range a.outs {
		pl.outTopics[o] = b.topic(t, o, outPartitions)
	}
	pl.group = "e2e-" + filepath.Base(pl.inTopic)
	pl.descriptor = filepath.Join(pl.dir, "descriptor.json")
	cmd := exec.Command(bin.millrace, "describe", a.describe, "-o", pl.descriptor)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("millrace describe %s: %v\n%s", a.describe, err, out)
	}
	return pl
}

// start starts replica idx (a bridge, then its sidecar) and returns it.
func (pl *pipeline) start(idx int) *replica {
	pl.t.Helper()
	r := &replica{idx: idx, port: testkit.FreePort(pl.t)}
	pl.startBridge(r)
	pl.startSidecar(r)
	pl.mu.Lock()
	pl.replicas = append(pl.replicas, r)
	pl.mu.Unlock()
	return r
}

func (pl *pipeline) startBridge(r *replica) {
	r.starts++
	env := append([]string{"FLOW_PROCESS_PORT=" + strconv.Itoa(r.port)}, pl.a.env...)
	if pl.replicaEnv != nil {
		own, _ := pl.replicaEnv(r)
		env = append(env, own...)
	}
	r.bridge = startProc(pl.t, pl.dir, fmt.Sprintf("bridge-%d.%d", r.idx, r.starts), env, append([]string{"bridge"}, pl.a.args...)...)
}

func (pl *pipeline) startSidecar(r *replica) {
	var outs []string
	for _, o := range pl.a.outs {
		outs = append(outs, o+"="+pl.outTopics[o])
	}
	env := []string{
		"FLOW_BROKERS=" + strings.Join(pl.b.Addrs, ","),
		"FLOW_PIPELINE=e2e",
		"FLOW_STREAMLET=" + pl.a.name,
		"FLOW_DESCRIPTOR=" + pl.descriptor,
		"FLOW_INLETS=" + pl.a.in + "=" + pl.inTopic,
		"FLOW_OUTLETS=" + strings.Join(outs, ","),
		"FLOW_CONSUMER_GROUP=" + pl.group,
		"FLOW_PROCESS_PORT=" + strconv.Itoa(r.port),
		"FLOW_READINESS_FILE=" + filepath.Join(pl.dir, fmt.Sprintf("ready-%d", r.idx)),
		"FLOW_STALL_WARNING_AFTER=3s",
		"FLOW_METRICS_ADDR=" + r.metricsAddr(pl.t),
		// As in a pod: static group membership keyed by the replica, so a restarted sidecar
		// takes its partitions back at once; in exactly-once mode the same name makes the
		// transactional id, so a restarted sidecar fences its predecessor.
		"FLOW_POD_NAME=" + fmt.Sprintf("%s-%d", pl.group, r.idx),
	}
	env = append(env, pl.sidecarEnv...)
	if pl.replicaEnv != nil {
		_, own := pl.replicaEnv(r)
		env = append(env, own...)
	}
	r.sidecarStarts++
	r.sidecar = startProc(pl.t, pl.dir, fmt.Sprintf("sidecar-%d.%d", r.idx, r.sidecarStarts), env, "sidecar")
}

// metricsAddr returns the replica's sidecar metrics address, chosen at its first start.
func (r *replica) metricsAddr(t testing.TB) string {
	if r.metrics == "" {
		r.metrics = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	}
	return r.metrics
}

// sidecarMetric returns the sum of the series of the replica's sidecar metric name (a counter
// or a gauge); 0 while nothing answers on its metrics address.
func (r *replica) sidecarMetric(name string) float64 {
	e, err := testkit.Metrics(r.metrics)
	if err != nil {
		return 0
	}
	var sum float64
	for _, m := range e[name].GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// records builds n input records numbered from first, with unique ids (the key is the id, or
// one of action.keys keys).
func (pl *pipeline) records(first, n int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		id := fmt.Sprintf("id-%07d", first+i)
		v := []byte(nil)
		if pl.a.value != nil {
			v = pl.a.value(id, first+i)
		} else {
			v = fmt.Appendf(nil, `{"id":%q,"n":%d}`, id, first+i)
		}
		key := id
		if pl.a.keys > 0 {
			key = fmt.Sprintf("k-%03d", (first+i)%pl.a.keys)
		}
		rs[i] = &kgo.Record{Topic: pl.inTopic, Key: []byte(key), Value: v}
	}
	return rs
}

// produce writes records to the inlet, waits for all, and remembers them by id (the key).
func (pl *pipeline) produce(rs ...*kgo.Record) {
	pl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range rs {
		r.Topic = pl.inTopic
	}
	results := pl.b.Admin.ProduceSync(ctx, rs...)
	if err := results.FirstErr(); err != nil {
		pl.t.Fatalf("produce to the inlet %s: %v", pl.inTopic, err)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, r := range results {
		pl.produced = append(pl.produced, pl.input(r.Record))
	}
}

// input is what the pipeline remembers of a record written to its inlet.
func (pl *pipeline) input(r *kgo.Record) produced {
	id := string(r.Key)
	if pl.a.inID != nil {
		id = pl.a.inID(r)
	}
	return produced{id: id, key: string(r.Key), partition: r.Partition, offset: r.Offset}
}

// produceSpread produces n records from first in chunks over about d, in the background;
// wait blocks until all are written.
func (pl *pipeline) produceSpread(first, n int, d time.Duration) (wait func()) {
	return pl.spread(pl.records(first, n), d)
}

// spread produces rs in chunks over about d, in the background, in their order; wait blocks
// until all are written.
func (pl *pipeline) spread(rs []*kgo.Record, d time.Duration) (wait func()) {
	const chunk = 50
	n := len(rs)
	chunks := (n + chunk - 1) / chunk
	done := make(chan struct{})
	var failed error
	go func() {
		defer close(done)
		for i := 0; i < n; i += chunk {
			j := min(i+chunk, n)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			for _, r := range rs[i:j] {
				r.Topic = pl.inTopic
			}
			results := pl.b.Admin.ProduceSync(ctx, rs[i:j]...)
			cancel()
			if err := results.FirstErr(); err != nil {
				failed = fmt.Errorf("produce to the inlet %s: %w", pl.inTopic, err)
				return
			}
			pl.mu.Lock()
			for _, r := range results {
				pl.produced = append(pl.produced, pl.input(r.Record))
			}
			pl.mu.Unlock()
			time.Sleep(d / time.Duration(chunks))
		}
	}()
	return func() {
		<-done
		if failed != nil {
			pl.t.Fatal(failed)
		}
	}
}

// ends returns the end offset of every inlet partition written to, from what was produced.
func (pl *pipeline) ends() map[int32]int64 {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	end := map[int32]int64{}
	for _, p := range pl.produced {
		end[p.partition] = max(end[p.partition], p.offset+1)
	}
	return end
}

// committedCount returns how many produced records lie below the group's commits.
func (pl *pipeline) committedCount() (int, map[int32]int64) {
	c, err := pl.b.Committed(context.Background(), pl.group, pl.inTopic)
	if err != nil {
		return -1, nil
	}
	n := 0
	for p, end := range pl.ends() {
		n += int(min(c[p], end))
	}
	return n, c
}

// waitDone waits until the group has committed every produced record. It fails the test when
// nothing is committed for idle, naming where it stands and the logs' tails.
func (pl *pipeline) waitDone(idle time.Duration) {
	pl.t.Helper()
	if !pl.waitCommitted(len(pl.produced), idle) {
		n, c := pl.committedCount()
		pl.t.Fatalf("the pipeline stopped: %d of %d records committed (commits %v, ends %v) and no progress for %s\n%s", n, len(pl.produced), c, pl.ends(), idle, pl.logTails(30))
	}
}

// waitCommitted waits until at least want records are committed; it reports false when
// nothing progressed for idle.
func (pl *pipeline) waitCommitted(want int, idle time.Duration) bool {
	last, since := -1, time.Now()
	for {
		n, _ := pl.committedCount()
		if n >= want {
			return true
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > idle {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTails returns the last n lines of every process's log.
func (pl *pipeline) logTails(n int) string {
	var b strings.Builder
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, r := range pl.replicas {
		for _, p := range []*testkit.Proc{r.bridge, r.sidecar} {
			fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.Name, p.Log, p.Tail(n))
		}
	}
	return b.String()
}

// report logs the case's row and appends it to the MILLRACE_E2E_REPORT file.
func (pl *pipeline) report(table string, tl tally, seen string) {
	pl.t.Helper()
	name := pl.name
	if name == "" {
		name = pl.t.Name()
	}
	pl.t.Logf("%s [%s]: %s; seen: %s", name, pl.b.Name(), tl, seen)
	writeReport(table, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %d | %s |", name, pl.b.Name(),
		tl.in, tl.out, tl.dead, tl.uncommitted, tl.lost, tl.dup, strings.ReplaceAll(cut(seen, 700), "|", `\|`)))
}

var reportMu sync.Mutex

// writeReport appends "table<TAB>row" to the report file, if any.
func writeReport(table, row string) {
	path := os.Getenv(envReport)
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\n", table, row)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// logDir is where a case's processes write their logs: a temporary directory, or one kept under
// MILLRACE_E2E_LOGS when that is set.
func logDir(t testing.TB) string {
	root := os.Getenv("MILLRACE_E2E_LOGS")
	if root == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, unsafeChars.ReplaceAllString(t.Name(), "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logs in %s", dir)
	return dir
}

// ciN is the number of records of a CI case (MILLRACE_E2E_N overrides def).
func ciN(def int) int {
	if n, err := strconv.Atoi(os.Getenv("MILLRACE_E2E_N")); err == nil && n > 0 {
		return n
	}
	return def
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)
