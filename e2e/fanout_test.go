package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// The heavy fan-out action: every record emits fanOutEmits outputs of fanOutBytes (30 MiB a
// record), so the emit budgets, not the input, decide how much the sidecar and the bridge hold.
const (
	fanOutEmits = 60
	fanOutBytes = 512 << 10
	// envFanOutRecords sets the number of input records of TestFanOutMemoryBounded. The
	// default keeps its outlet data near 1 GB (kfake holds it all in memory); the full case is
	// 200 records (6 GB), to run on the real broker.
	envFanOutRecords = "MILLRACE_E2E_FANOUT_RECORDS"
	// fanOutLimit is the peak RSS each of sidecar and bridge must stay under at the defaults.
	fanOutLimit = 512 << 10 // KiB
)

// fanOutPayload is the JSON payload of every fan-out emit: a string whose encoding, the
// output record's value, is fanOutBytes long.
var fanOutPayload = `"` + strings.Repeat("x", fanOutBytes-2) + `"`

// fanOut writes the fanOutEmits emit lines of one item, each keyed as the item and numbered
// in a header "n".
func fanOut(it childItem, out *bufio.Writer) {
	key := ""
	if it.Key != nil {
		k, _ := json.Marshal(*it.Key)
		key = `,"key":` + string(k)
	}
	delivery, _ := json.Marshal(it.Delivery)
	for i := range fanOutEmits {
		fmt.Fprintf(out, `{"type":"emit","delivery":%s,"outlet":"out"%s,"headers":[{"key":"n","value":"%d"}],"payload":`, delivery, key, i)
		out.WriteString(fanOutPayload)
		out.WriteString("}\n")
	}
	out.Flush()
}

// TestFanOutMemoryBounded runs the heavy fan-out action over a 4-partition inlet with every
// default setting: each record's fanOutEmits outputs must all be delivered, and the peak RSS
// (VmHWM) of the sidecar and of the bridge must each stay under 512 MiB, the emit budgets
// holding the sidecar's memory whatever the fan-out.
func TestFanOutMemoryBounded(t *testing.T) {
	n := 32
	if v, err := strconv.Atoi(os.Getenv(envFanOutRecords)); err == nil && v > 0 {
		n = v
	}
	b := openBroker(t, false)
	pl := newPipeline(t, b, child(childFanOut, false), 4)
	pl.produce(pl.records(0, n)...)
	began := time.Now()
	r := pl.start(0)
	pl.waitDone(150 * time.Second)
	took := time.Since(began)
	rss := map[string]int64{"sidecar": testkit.ProcStatus(r.sidecar.Pid(), "VmHWM") >> 10, "bridge": testkit.ProcStatus(r.bridge.Pid(), "VmHWM") >> 10}
	for _, c := range testkit.Children(r.bridge.Pid()) {
		rss["action"] = max(rss["action"], testkit.ProcStatus(c, "VmHWM")>>10)
	}

	got, missing, complete := countFanOut(t, pl)
	bisects := len(r.sidecar.LogLines("per-batch emit budget", 100000))
	seen := fmt.Sprintf("%d records × %d outputs of %d KiB in %.1f s; outputs %d of %d, missing %d; peak RSS sidecar %d MiB, bridge %d MiB, action %d MiB; %d over-budget stream failures",
		n, fanOutEmits, fanOutBytes>>10, took.Seconds(), got, n*fanOutEmits, missing, rss["sidecar"]>>10, rss["bridge"]>>10, rss["action"]>>10, bisects)
	// The tally of whole records, counted without reading the outlet's values back (pl.tally
	// would hold them all): a record is out when every one of its outputs is.
	tl := tally{in: n, out: complete, lost: n - complete, dup: max(got-n*fanOutEmits, 0)}
	pl.report("fan-out of 60 × 512 KiB per record", tl, seen)
	if missing > 0 {
		t.Errorf("%d of %d outputs were never delivered\n%s", missing, n*fanOutEmits, pl.logTails(20))
	}
	for _, name := range []string{"sidecar", "bridge"} {
		if rss[name] >= fanOutLimit {
			t.Errorf("peak RSS of the %s = %d MiB; want under %d MiB at the default settings", name, rss[name]>>10, fanOutLimit>>10)
		}
	}
}

// countFanOut reads the outlet without keeping values and returns how many outputs it holds,
// how many (record, n) pairs of the records' fan-out are missing, and how many records have
// every output.
func countFanOut(t *testing.T, pl *pipeline) (got, missing, complete int) {
	t.Helper()
	topic := pl.outTopics["out"]
	ends, err := pl.b.EndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for _, e := range ends {
		want += e
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(pl.b.Addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for int64(got) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			got++
			for _, h := range r.Headers {
				if h.Key == "n" {
					seen[string(r.Key)+"/"+string(h.Value)] = true
				}
			}
		})
	}
	for _, p := range pl.produced {
		whole := true
		for i := range fanOutEmits {
			if !seen[p.id+"/"+strconv.Itoa(i)] {
				missing++
				whole = false
			}
		}
		if whole {
			complete++
		}
	}
	return got, missing, complete
}
