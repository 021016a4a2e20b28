package e2e_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// The one verifier of every case, in the spirit of Kafka's transactions_test.py and Jepsen:
// every input id is found on the outlets (none lost, none unexpected); exactly once, none is
// found twice and no record an aborted transaction wrote is visible to a read_committed
// reader; each key's outputs keep its inputs' order (at least once, after removing the copies
// a redelivery wrote again); and, where the action counts per key, the state totals are exact
// (stateRun.checkCounts). A failure names the first offending ids.

// tally is a case's count of records by id, and what the verifier found.
type tally struct {
	in          int // records produced to the inlet
	out         int // distinct input ids found on the outlets (not the dead-letter one)
	dead        int // distinct input ids found on the dead-letter outlet
	uncommitted int // ids found nowhere, at or after their partition's commit: still in Kafka
	lost        int // ids found nowhere, yet committed: lost
	dup         int // extra copies of ids, over all outlets
	unexpected  int // output records whose id was never produced
	// aborted counts the outlet records aborted transactions wrote (exactly once: read from
	// the log as read_uncommitted); abortedSeen those among them a read_committed reader saw.
	aborted, abortedSeen int
	// disorder counts the outputs of a key that came after an output of a later input of
	// the key (on the same outlet partition), redeliveries removed.
	disorder    int
	deadRecords []*kgo.Record
	outRecords  map[string][]*kgo.Record // by id
	exactlyOnce bool                     // the sidecars ran with FLOW_DELIVERY=exactly-once
	// first holds the first offending ids of each kind, for the failure messages.
	first map[string]*problems
	// explain says, for a failed duplicate check, where the copies are and what the group
	// did (explain_test.go).
	explain func() string
}

// exactlyOnce reports whether the pipeline's sidecars run in exactly-once mode.
func (pl *pipeline) exactlyOnce() bool {
	return slices.Contains(pl.sidecarEnv, deliveryEnv("exactly-once"))
}

// offend notes one offence of kind.
func (tl *tally) offend(kind, format string, args ...any) {
	if tl.first == nil {
		tl.first = map[string]*problems{}
	}
	if tl.first[kind] == nil {
		tl.first[kind] = &problems{}
	}
	tl.first[kind].add(format, args...)
}

// firstOf returns the first offences of kind, for a message.
func (tl tally) firstOf(kind string) string {
	ps := tl.first[kind]
	if ps == nil {
		return ""
	}
	return "; the first: " + strings.Join(ps.first, ", ")
}

// outRecord is one output on an outlet partition, with the input its id names.
type outRecord struct {
	r  *kgo.Record
	id string
}

// tally reads every outlet (read_committed) and verifies the produced ids against it.
func (pl *pipeline) tally() tally {
	pl.t.Helper()
	pl.mu.Lock()
	nProduced := len(pl.produced)
	pl.mu.Unlock()
	tl := tally{outRecords: map[string][]*kgo.Record{}, exactlyOnce: pl.exactlyOnce()}
	seen, deadSeen := map[string]int{}, map[string]int{}
	idOf := pl.a.idOf
	if idOf == nil {
		idOf = func(r *kgo.Record) string { return string(r.Key) }
	}
	type outPartition struct {
		topic string
		p     int32
	}
	byPartition := map[outPartition][]outRecord{}
	for _, o := range pl.a.outs {
		if tl.exactlyOnce {
			pl.waitStable(pl.outTopics[o])
		}
		now := pl.b.ReadAll(pl.t, pl.outTopics[o])
		if tl.exactlyOnce {
			tl.checkAborted(entries(pl.b.ReadLog(pl.t, pl.outTopics[o])), now)
		}
		rs := slices.Concat(pl.earlier[o], now)
		for _, r := range rs {
			id := idOf(r)
			if o == pl.a.dead {
				deadSeen[id]++
				tl.deadRecords = append(tl.deadRecords, r)
				continue
			}
			seen[id]++
			if nProduced <= 100_000 { // kept for checks of bytes; not for a load run
				tl.outRecords[id] = append(tl.outRecords[id], r)
			}
			k := outPartition{r.Topic, r.Partition}
			byPartition[k] = append(byPartition[k], outRecord{r, id})
		}
	}
	_, commits := pl.committedCount()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	tl.in = len(pl.produced)
	inputs := make(map[string]produced, len(pl.produced))
	for _, p := range pl.produced {
		inputs[p.id] = p
		n := seen[p.id] + deadSeen[p.id]
		switch {
		case seen[p.id] > 0:
			tl.out++
		case deadSeen[p.id] > 0:
			tl.dead++
		case p.offset >= commits[p.partition]:
			tl.uncommitted++
		default:
			tl.lost++
			tl.offend("lost", "%s (%d@%d)", p.id, p.partition, p.offset)
		}
		if n > 1 {
			tl.dup += n - 1
			tl.offend("dup", "%s ×%d", p.id, n)
		}
	}
	for _, counts := range []map[string]int{seen, deadSeen} {
		for id, n := range counts {
			if _, ok := inputs[id]; !ok {
				tl.unexpected += n
				tl.offend("unexpected", "%q", id)
			}
		}
	}
	for _, rs := range byPartition {
		tl.checkOrder(rs, inputs)
	}
	spans := dupSpans(pl.produced, func(id string) int { return seen[id] + deadSeen[id] })
	// The events first and the summary last: a CI log shown by its tail keeps the summary.
	tl.explain = func() string {
		return fmt.Sprintf("the sidecars' group events, the last 80:\n%s\ncopies by inlet partition: %s\n%s",
			pl.groupEvents(80), formatSpans(spans), pl.inletCopies())
	}
	return tl
}

// waitStable waits until no transaction is open on topic (its last stable offsets are its
// end offsets), within a minute. The coordinator writes a transaction's markers to its
// partitions one by one: the group's offsets may show it committed while an outlet's marker
// is still to come, and a read_committed read up to the stable offsets then would miss the
// transaction's records.
func (pl *pipeline) waitStable(topic string) {
	ctx := context.Background()
	if !testkit.Eventually(time.Minute, func() bool {
		stable, err1 := pl.b.StableOffsets(ctx, topic)
		end, err2 := pl.b.EndOffsets(ctx, topic)
		return err1 == nil && err2 == nil && maps.Equal(stable, end)
	}) {
		pl.t.Logf("a transaction is still open on %s a minute after the last commit; reading up to its stable offsets", topic)
	}
}

// checkOrder checks that the outputs of one outlet partition keep, per input key, their
// inputs' offset order. A copy of an id the partition already holds is a redelivery (at
// least once) and is left out; exactly once there are none (the duplicate check says so).
func (tl *tally) checkOrder(rs []outRecord, inputs map[string]produced) {
	slices.SortFunc(rs, func(a, b outRecord) int { return int(a.r.Offset - b.r.Offset) })
	type last struct {
		offset int64
		id     string
	}
	lastOf := map[string]last{} // by input partition and key
	done := map[string]bool{}
	for _, o := range rs {
		in, ok := inputs[o.id]
		if !ok || done[o.id] {
			continue
		}
		done[o.id] = true
		k := fmt.Sprintf("%d/%s", in.partition, in.key)
		if l, ok := lastOf[k]; ok && in.offset < l.offset {
			tl.disorder++
			tl.offend("disorder", "%s (input %d@%d) after %s (input %d@%d) at %s/%d@%d",
				o.id, in.partition, in.offset, l.id, in.partition, l.offset, o.r.Topic, o.r.Partition, o.r.Offset)
			continue
		}
		lastOf[k] = last{in.offset, o.id}
	}
}

// logEntry is what the aborted-read check needs of one outlet record read as
// read_uncommitted, control records among them.
type logEntry struct {
	p             int32
	o             int64
	producer      int64
	transactional bool // a data record written in a transaction
	abort         bool // a control record: its transaction's abort marker
	control       bool
}

// entries are the log entries of records (read with testkit's ReadLog). A control record's
// key is its version (int16) and type (int16: 0 abort, 1 commit).
func entries(rs []*kgo.Record) []logEntry {
	out := make([]logEntry, len(rs))
	for i, r := range rs {
		out[i] = logEntry{p: r.Partition, o: r.Offset, producer: r.ProducerID, control: r.Attrs.IsControl(),
			transactional: r.Attrs.IsTransactional() && !r.Attrs.IsControl()}
		out[i].abort = out[i].control && len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 0
	}
	return out
}

// checkAborted finds the records aborted transactions wrote in log (one outlet's records in
// each partition's log order, control records among them) and counts those among seen (what
// a read_committed reader read): a transaction's records are its producer's transactional
// records up to its next marker in the same partition.
func (tl *tally) checkAborted(log []logEntry, seen []*kgo.Record) {
	type place struct {
		p int32
		o int64
	}
	aborted := map[place]bool{}
	type open struct {
		p  int32
		id int64
	}
	pending := map[open][]int64{}
	for _, e := range log {
		k := open{e.p, e.producer}
		switch {
		case e.transactional:
			pending[k] = append(pending[k], e.o)
		case e.control:
			if e.abort {
				for _, o := range pending[k] {
					aborted[place{e.p, o}] = true
				}
			}
			delete(pending, k)
		}
	}
	tl.aborted += len(aborted)
	for _, r := range seen {
		if aborted[place{r.Partition, r.Offset}] {
			tl.abortedSeen++
			tl.offend("aborted", "%s/%d@%d", r.Topic, r.Partition, r.Offset)
		}
	}
}

func (tl tally) String() string {
	s := fmt.Sprintf("in %d, out %d, dead-lettered %d, uncommitted %d, lost %d, duplicated %d, unexpected %d",
		tl.in, tl.out, tl.dead, tl.uncommitted, tl.lost, tl.dup, tl.unexpected)
	if tl.exactlyOnce {
		s += fmt.Sprintf(", aborted %d (visible %d)", tl.aborted, tl.abortedSeen)
	}
	if tl.disorder > 0 {
		s += fmt.Sprintf(", out of order %d", tl.disorder)
	}
	return s
}

// check fails the test when a record was lost, an unexpected one appeared or a key's outputs
// left their order, and in exactly-once mode when one was duplicated or a record of an
// aborted transaction was visible (the outlets are read as read_committed). Each failure
// names the first offending ids.
func (tl tally) check(t testing.TB) {
	t.Helper()
	if tl.lost != 0 {
		t.Errorf("tally = %s; want lost 0%s", tl, tl.firstOf("lost"))
	}
	if tl.unexpected != 0 {
		t.Errorf("tally = %s; want unexpected 0 (outputs of ids never produced)%s", tl, tl.firstOf("unexpected"))
	}
	if tl.disorder != 0 {
		t.Errorf("tally = %s; want every key's outputs in its inputs' order%s", tl, tl.firstOf("disorder"))
	}
	if tl.exactlyOnce && tl.dup != 0 {
		t.Errorf("tally = %s; want duplicated 0 in exactly-once mode%s", tl, tl.firstOf("dup"))
	}
	if tl.abortedSeen != 0 {
		t.Errorf("tally = %s; want no record of an aborted transaction visible to read_committed%s", tl, tl.firstOf("aborted"))
	}
}

// checkDup fails the test when more records were duplicated than bound, the records the
// batches in flight at the faults may hold.
func (tl tally) checkDup(t testing.TB, bound int) {
	t.Helper()
	if tl.dup > bound {
		why := ""
		if tl.explain != nil {
			why = "\n" + tl.explain()
		}
		t.Errorf("tally = %s; want at most %d duplicates (the batches in flight at the faults)%s%s", tl, bound, tl.firstOf("dup"), why)
	}
}
