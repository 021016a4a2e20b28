package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/sidecar"
)

// defaultStateKeys is how many distinct keys BenchmarkState's records have (BENCH_STATE_KEYS).
const defaultStateKeys = 1000

// BenchmarkState is what state costs a record: a running count per key (its state {"n": N},
// read, counted and staged for every record) beside the same echo without state, each at its
// defaults (one process, what the program declares in ready) in the deployed shape
// (runDeployed: records/s and the CPU per record of the sidecar, the bridge and the action
// apart), on 1 and 8 partitions, at-least-once and exactly-once, over the same keyed records
// (BENCH_STATE_KEYS distinct keys, default 1,000; a key's records on one partition). The Go
// rows are go-echo and bench/statecount (go-echo plus the count, on the Go SDK), the Python
// rows the SDK's echo and bench/testdata/count.py (the same echo plus the count). The
// stateful line has --state in; its sidecar a compacted changelog of the inlet's partitions,
// a state directory and a State port of its own. After the runs each key's last state in the
// changelog must be its number of records (at least that at-least-once, where a redelivery
// counts again), so that a row where state does not flow fails instead of measuring nothing.
//
//	go test -run '^$' -bench 'BenchmarkState$' -benchtime 3x ./bench/
func BenchmarkState(b *testing.B) {
	_, goEcho := binaries(b)
	keys := envInt("BENCH_STATE_KEYS", defaultStateKeys)
	abs := func(rel string) string {
		p, err := filepath.Abs(rel)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	type pair struct {
		name                string
		stateless, stateful []string
	}
	pairs := []pair{{"go", []string{goEcho}, []string{bins.stateCount}}}
	if _, err := exec.LookPath("python3"); err == nil {
		pairs = append(pairs, pair{"python-sdk", []string{"python3", abs("../sdk/python/examples/echo.py")}, []string{"python3", abs("testdata/count.py")}})
	} else {
		b.Logf("no python3: the Python SDK's rows are left out (scripts/setup installs it): %v", err)
	}
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		for _, a := range pairs {
			for _, parts := range partitionsOf {
				for _, stateful := range []bool{false, true} { // side by side: the load of the moment weighs on both
					kind, argv, line := "stateless", a.stateless, "bench --in in=bench.v1 --out out=bench.v1 "
					if stateful {
						kind, argv, line = "stateful", a.stateful, line+"--state in "
					}
					b.Run(fmt.Sprintf("%s/%s/%s/p%d", d, a.name, kind, parts), func(b *testing.B) {
						dep := deployment{keys: keys, state: stateful}
						if d != sidecar.AtLeastOnce { // the default: left unset
							dep.sidecarEnv = []string{"FLOW_DELIVERY=" + string(d)}
						}
						pp, records := runDeployed(b, fmt.Sprintf("state-%s-%s-%s-p%d", d, a.name, kind, parts), line+"-- "+actionconf.Join(argv), parts, dep)
						b.ReportMetric(float64(keys), "keys")
						if stateful {
							checkCounts(b, pp, keys, records, d == sidecar.ExactlyOnce)
						}
					})
				}
			}
		}
	}
}

// checkCounts reads the changelog of pp from its start (read_committed) until every key's last
// state {"n": N} is at least the number of the first records records that have its key, and
// fails the benchmark if that does not happen within 30 s, or, when exact, if a key's count
// passed it (exactly once, no record counts twice).
func checkCounts(b *testing.B, pp *procPipeline, keys, records int, exact bool) {
	b.Helper()
	want := func(k int) int {
		n := records / keys
		if k < records%keys {
			n++
		}
		return n
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(pp.br.Addrs...), kgo.ConsumeTopics(pp.changelog),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250*time.Millisecond), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	last := make([]int, keys)
	short := min(keys, records) // keys whose count is below want: every key that has a record
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var bad error
	for short > 0 && bad == nil && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			k, err := strconv.Atoi(string(r.Key[min(1, len(r.Key)):]))
			var st struct {
				N *int `json:"n"`
			}
			switch {
			case err != nil || len(r.Key) == 0 || r.Key[0] != 'k' || k < 0 || k >= keys:
				bad = fmt.Errorf("changelog %s holds a record of key %q, none of the benchmark's %d keys", pp.changelog, r.Key, keys)
				return
			case json.Unmarshal(r.Value, &st) != nil || st.N == nil:
				bad = fmt.Errorf("changelog %s holds the state %.80q for key %s; want {\"n\": N}", pp.changelog, r.Value, r.Key)
				return
			}
			if last[k] < want(k) && *st.N >= want(k) {
				short--
			} else if last[k] >= want(k) && *st.N < want(k) {
				short++
			}
			last[k] = *st.N
		})
	}
	if bad != nil {
		b.Fatal(bad)
	}
	over := 0
	for k := range keys {
		if last[k] < want(k) {
			b.Fatalf("after 30 s, key k%d's last state in changelog %s counts %d records; want %d (%d of %d keys short): the state does not flow", k, pp.changelog, last[k], want(k), short, keys)
		}
		if last[k] > want(k) {
			over++
			if exact {
				b.Fatalf("key k%d's last state in changelog %s counts %d records; want %d: exactly once counted a record twice", k, pp.changelog, last[k], want(k))
			}
		}
	}
	if over > 0 {
		b.Logf("%d of %d keys counted more than their records (at least once: a redelivered record counts again)", over, keys)
	}
}
