package e2e_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// Outlet limits at the broker's defaults (message.max.bytes 1048588): records of every size a
// default topic accepts flow, and an output too large for its outlet is refused per record.

// defaultRecordLimit is Start.max_message_bytes against outlet topics at Kafka's default
// limit: 1048588 less a record batch's framing (65) and a record's (64).
const defaultRecordLimit = 1048588 - 65 - 64

// TestRecordSizes echoes records of 10 KB, 12 KB, 100 KB and 900 KB, and makes small records
// 12 KB outputs, from a one-partition inlet to a one-partition outlet at the broker's
// defaults: every record comes out once, and the sidecar and the bridge each stay under
// 512 MiB of peak RSS. 400 records with 12 KB outputs on one partition never moved when the
// sidecar's produce batches could grow to 4 MiB.
func TestRecordSizes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		what string
		mode string
		size int // of an input record's pad
		n    int
	}{
		{"10KB", "10 KiB each, echoed", childEcho, 10 << 10, 400},
		{"12KB", "12 KiB each, echoed", childEcho, 12 << 10, 400},
		// Small records that the action makes 12 KB: a batch of 100 emits 1.2 MB.
		{"12KB-outputs", "small, each output 12 KB", childGrow, 0, 400},
		{"100KB", "100 KiB each, echoed", childEcho, 100 << 10, 100},
		{"900KB", "900 KiB each, echoed", childEcho, 900 << 10, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openBroker(t, false)
			a := child(c.mode, false)
			pad := strings.Repeat("p", c.size)
			a.value = func(id string, i int) []byte { return fmt.Appendf(nil, `{"id":%q,"n":%d,"pad":%q}`, id, i, pad) }
			// One outlet partition, as one inlet partition: every emit of a commit round goes
			// to one record batch, as large as the sidecar lets it grow.
			pl := newPipelineOut(t, b, a, 1, 1)
			pl.produce(pl.records(0, ciN(c.n))...)
			began := time.Now()
			r := pl.start(0)
			pl.waitDone(60 * time.Second)
			took := time.Since(began)
			rss := map[string]int64{"sidecar": testkit.ProcStatus(r.sidecar.Pid(), "VmHWM") >> 10, "bridge": testkit.ProcStatus(r.bridge.Pid(), "VmHWM") >> 10}
			tl := pl.tally()
			pl.report("records at the broker's default limits", tl, fmt.Sprintf("%d records, %s, 1 partition in and out, in %.1f s; peak RSS sidecar %d MiB, bridge %d MiB; stream failures: %d",
				tl.in, c.what, took.Seconds(), rss["sidecar"]>>10, rss["bridge"]>>10, len(r.sidecar.LogLines("stream failed", 1000))))
			tl.check(t)
			if tl.out != tl.in || tl.dup != 0 {
				t.Errorf("tally = %s; want every record out once", tl)
			}
			for _, name := range []string{"sidecar", "bridge"} {
				if rss[name] >= fanOutLimit {
					t.Errorf("peak RSS of the %s = %d MiB; want under %d MiB", name, rss[name]>>10, fanOutLimit>>10)
				}
			}
		})
	}
}

// TestEmitOverOutletLimit: one record's output (2 MiB) is over its outlet topic's default
// limit, though under FLOW_MAX_MESSAGE_BYTES: the bridge refuses it against
// Start.max_message_bytes and dead-letters the record with an error naming the outlet's topic
// and the limit, and the rest of the partition flows.
func TestEmitOverOutletLimit(t *testing.T) {
	t.Parallel()
	b := openBroker(t, false)
	pl := newPipeline(t, b, child(childOverLimit, true), 1)
	pl.start(0)
	const good = 10
	in := pl.records(0, good)
	in = append(in, poison(good)...)
	in = append(in, pl.records(good+1, good)...)
	pl.produce(in...)
	pl.waitDone(60 * time.Second)
	tl := pl.tally()
	seen := ""
	if len(tl.deadRecords) == 1 {
		seen = "dead letter millrace-error: " + header(tl.deadRecords[0], "millrace-error")
	}
	pl.report("an output over its outlet topic's limit", tl, seen)
	tl.check(t)
	if tl.out != 2*good || tl.dead != 1 {
		t.Errorf("tally = %s; want %d out and the poisoned record dead-lettered", tl, 2*good)
	}
	for _, r := range tl.deadRecords {
		msg := header(r, "millrace-error")
		for _, want := range []string{"(topic " + pl.outTopics["out"] + ")", "over the " + strconv.Itoa(defaultRecordLimit) + " bytes of max_message_bytes"} {
			if !strings.Contains(msg, want) {
				t.Errorf("dead letter %q: millrace-error = %q; want it to name %q", r.Key, msg, want)
			}
		}
	}
}
