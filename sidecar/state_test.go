package sidecar_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// stateBridge plays the bridge's side of the State service for a fake process: at each
// Start it attaches and opens the conversation's inlet "in", keeps every batch's BatchState
// (reassembled) for the batch to read, and sends a batch's Staged.
type stateBridge struct {
	t    testing.TB
	addr string

	mu     sync.Mutex
	stream statev1.State_AttachClient
	cancel context.CancelFunc
	got    map[string]map[uint64]map[string]string // by conversation id, batch id, key
	ready  map[string]map[uint64]chan struct{}
	// seen are the states each batch's first record of a key saw, in order, for the test.
	seen []string
}

func newStateBridge(t testing.TB) *stateBridge {
	sb := &stateBridge{t: t, got: map[string]map[uint64]map[string]string{}, ready: map[string]map[uint64]chan struct{}{}}
	t.Cleanup(func() {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		if sb.cancel != nil {
			sb.cancel()
		}
	})
	return sb
}

// onStart attaches to the State service for the conversation start opened (OnStart).
func (sb *stateBridge) onStart(_ int, start *flowv1.Start) error {
	conn, err := grpc.NewClient("passthrough:///"+sb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := statev1.NewStateClient(conn).Attach(ctx)
	if err != nil {
		cancel()
		conn.Close()
		return err
	}
	id := start.GetConversationId()
	open := &statev1.ProcessMessage{Message: &statev1.ProcessMessage_Open{Open: &statev1.Open{ConversationId: id,
		Inlets: []*statev1.InletState{{Inlet: "in", MaxValueBytes: 64 << 10}}}}}
	if err := stream.Send(open); err != nil {
		cancel()
		conn.Close()
		return err
	}
	m, err := stream.Recv()
	if err != nil || m.GetOpened() == nil {
		cancel()
		conn.Close()
		return fmt.Errorf("no Opened: %v %v", m, err)
	}
	sb.mu.Lock()
	if sb.cancel != nil {
		sb.cancel() // the previous conversation's stream
	}
	sb.stream, sb.cancel = stream, func() { cancel(); conn.Close() }
	sb.got[id], sb.ready[id] = map[uint64]map[string]string{}, map[uint64]chan struct{}{}
	sb.mu.Unlock()
	go func() {
		parts := map[string]string{}
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			bs := m.GetBatchState()
			for _, e := range bs.GetEntries() {
				parts[string(e.GetKey())] = string(e.GetValue())
			}
			if bs.GetMore() {
				continue
			}
			sb.mu.Lock()
			sb.got[id][bs.GetBatchId()] = parts
			sb.readyLocked(id, bs.GetBatchId())
			close(sb.ready[id][bs.GetBatchId()])
			sb.mu.Unlock()
			parts = map[string]string{}
		}
	}()
	return nil
}

func (sb *stateBridge) readyLocked(conv string, batch uint64) chan struct{} {
	ch, ok := sb.ready[conv][batch]
	if !ok {
		ch = make(chan struct{})
		sb.ready[conv][batch] = ch
	}
	return ch
}

// states waits for the BatchState of c's batch and returns it, by key; false when the stream
// ended first.
func (sb *stateBridge) states(c *call) (map[string]string, bool) {
	conv := c.Start.GetConversationId()
	sb.mu.Lock()
	if sb.ready[conv] == nil {
		sb.mu.Unlock()
		return nil, false
	}
	ch := sb.readyLocked(conv, c.Batch.BatchId)
	sb.mu.Unlock()
	select {
	case <-ch:
	case <-c.Done():
		return nil, false
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.got[conv][c.Batch.BatchId], true
}

// staged sends the Staged of batch id: each key's new state, "" deleting it.
func (sb *stateBridge) staged(id uint64, states map[string]string) error {
	var es []*statev1.Entry
	for k, v := range states {
		e := &statev1.Entry{Key: []byte(k)}
		if v != "" {
			e.Value = []byte(v)
		}
		es = append(es, e)
	}
	sb.mu.Lock()
	stream := sb.stream
	sb.mu.Unlock()
	return stream.Send(&statev1.ProcessMessage{Message: &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: id, Entries: es}}})
}

// counter answers each batch as a per-key running count does: each keyed record's output is
// its key's count so far, the state it saw plus one; the batch's Staged holds each key's
// last count. ackFirst sends the Ack before the Staged.
func (sb *stateBridge) counter(ackFirst bool) func(*call) error {
	return func(c *call) error {
		states, ok := sb.states(c)
		if !ok {
			return nil
		}
		counts := map[string]int{}
		for _, r := range c.Batch.Records {
			key := r.Record.Key
			if key == nil {
				continue
			}
			k := string(key)
			n, ok := counts[k]
			if !ok {
				n, _ = strconv.Atoi(states[k])
				sb.mu.Lock()
				sb.seen = append(sb.seen, k+"="+states[k])
				sb.mu.Unlock()
			}
			n++
			counts[k] = n
			if err := c.Emit("out", &flowv1.Record{Key: key, Value: []byte(strconv.Itoa(n))}); err != nil {
				return err
			}
		}
		changed := map[string]string{}
		for k, n := range counts {
			changed[k] = strconv.Itoa(n)
		}
		if ackFirst {
			if err := c.Ack(); err != nil {
				return err
			}
			return sb.staged(c.Batch.BatchId, changed)
		}
		if err := sb.staged(c.Batch.BatchId, changed); err != nil {
			return err
		}
		return c.Ack()
	}
}

// stateSpec is testSpec speaking the version that keeps state.
func stateSpec() *flowv1.Spec {
	s := testSpec()
	s.ProtocolVersion = protocol.Version
	return s
}

// stateSetup is a stateful deployment: inlet "in" of partitions partitions with its compacted
// changelog, outlet "out", a counting process, the sidecar not yet started.
type stateSetup struct {
	b                  *testkit.Broker
	in, out, changelog string
	f                  *fakeProcess
	sb                 *stateBridge
	e                  env
	dir                string
}

func newStateSetup(t *testing.T, partitions int32, ackFirst bool) *stateSetup {
	b := newBroker(t)
	st := &stateSetup{b: b, in: b.Topic(t, "in", partitions), out: b.Topic(t, "out", partitions),
		changelog: b.Topic(t, "state", partitions, "cleanup.policy", "compact"), sb: newStateBridge(t), dir: t.TempDir()}
	st.f = newProcess(t, st.sb.counter(ackFirst))
	st.f.Spec = stateSpec()
	st.f.OnStart = st.sb.onStart
	st.e = baseEnv(t, b, st.f, st.in, st.out)
	st.e["FLOW_DESCRIPTOR"] = writeDescriptor(t, stateSpec())
	st.e["FLOW_INLET_IN_STATE_TOPIC"] = st.changelog
	st.e["FLOW_STATE_DIR"] = st.dir
	return st
}

// start runs a sidecar of the setup, serving State to its bridge.
func (st *stateSetup) start(t *testing.T, tune func(*sidecar.Config)) *running {
	cfg := st.e.config(t)
	if tune != nil {
		tune(cfg)
	}
	return startTuned(t, cfg, func(sc *sidecar.Sidecar) { st.sb.addr = sidecar.ServeState(t, sc) })
}

// produceKeys writes n records to partition p of topic in, keyed p<p>-k0..k(keys-1) in turn.
func (st *stateSetup) produceKeys(t *testing.T, p int32, keys, n int) {
	rs := make([]*kgo.Record, n)
	for i := range n {
		rs[i] = &kgo.Record{Topic: st.in, Partition: p, Key: []byte(fmt.Sprintf("p%d-k%d", p, i%keys)), Value: []byte("x")}
	}
	st.b.Produce(t, rs...)
}

// lastCounts returns the last output per key of topic out, and every output's key and value
// in order per partition.
func lastCounts(rs []*kgo.Record) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		n, _ := strconv.Atoi(string(r.Value))
		out[string(r.Key)] = max(out[string(r.Key)], n)
	}
	return out
}

// changelogValues returns each key's last value in the changelog, read committed.
func changelogValues(t *testing.T, b *testkit.Broker, topic string) map[string]string {
	out := map[string]string{}
	for _, r := range b.ReadAll(t, topic) {
		if r.Value == nil {
			delete(out, string(r.Key))
			continue
		}
		out[string(r.Key)] = string(r.Value)
	}
	return out
}

// TestStateRestoredBeforeFirstBatch: the changelog holds k1=41 before the sidecar starts; the
// first batch's BatchState holds it, so the count goes on from it, and the changelog and the
// store say 43 after two more records.
func TestStateRestoredBeforeFirstBatch(t *testing.T) {
	st := newStateSetup(t, 1, false)
	st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k1"), Value: []byte("41")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: []byte("7")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: nil})
	st.b.Produce(t, &kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k1"), Value: []byte("x")},
		&kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k0"), Value: []byte("x")},
		&kgo.Record{Topic: st.in, Partition: 0, Key: []byte("k1"), Value: []byte("x")})
	r := st.start(t, nil)
	outs := st.b.ReadN(t, st.out, 3, waitTimeout)
	got := lastCounts(outs)
	if got["k1"] != 43 || got["k0"] != 1 {
		t.Fatalf("counts %v, want k1=43 (from the restored 41) and k0=1 (its state deleted)", got)
	}
	waitFor(t, "the changelog holds the new counts", func() bool {
		v := changelogValues(t, st.b, st.changelog)
		return v["k1"] == "43" && v["k0"] == "1"
	})
	waitFor(t, "the store holds k1=43", func() bool {
		v, ok := sidecar.StateOf(t, r.sc, st.in, 0, "k1")
		return ok && v == "43"
	})
	st.sb.mu.Lock()
	first := st.sb.seen[0]
	st.sb.mu.Unlock()
	if first != "k1=41" {
		t.Fatalf("the first batch saw %s, want k1=41", first)
	}

	// The state metrics: the full restore applied the changelog's 3 records, the batch's
	// 2 states were written, the store holds 2 keys, nothing restores.
	waitFor(t, "the state metrics", func() bool {
		m := testkit.Gather(t, r.sc.Registry())
		restored, _ := m.Value("millrace_sidecar_state_restored_records_total", "topic", st.changelog)
		full, _ := m.Value("millrace_sidecar_state_full_restores_total", "topic", st.changelog, "reason", "empty")
		sets, _ := m.Value("millrace_sidecar_state_writes_total", "topic", st.changelog, "kind", "set")
		keys, _ := m.Value("millrace_sidecar_state_keys", "topic", st.changelog, "partition", "0")
		size, _ := m.Value("millrace_sidecar_state_bytes", "topic", st.changelog, "partition", "0")
		restoring, ok := m.Value("millrace_sidecar_state_restoring", "topic", st.changelog, "partition", "0")
		return restored == 3 && full == 1 && sets == 2 && keys == 2 && size > 0 && ok && restoring == 0
	})
}

// TestStateStagedNotInFlight: a Staged for a batch never sent fails the stream as a protocol
// violation, naming the batch; the records are delivered again and counted once.
func TestStateStagedNotInFlight(t *testing.T) {
	st := newStateSetup(t, 1, false)
	count := st.sb.counter(false)
	var once sync.Once
	st.f.OnBatch = func(c *call) error {
		bad := false
		once.Do(func() { bad = true })
		if bad {
			if _, ok := st.sb.states(c); !ok {
				return nil
			}
			return st.sb.staged(c.Batch.BatchId+1000, map[string]string{"k0": "1"})
		}
		return count(c)
	}
	r := st.start(t, nil)
	st.produceKeys(t, 0, 1, 3)
	outs := st.b.ReadN(t, st.out, 3, waitTimeout)
	checkChains(t, outs)
	fs := r.failures(sidecar.CauseProtocol)
	if len(fs) == 0 || !strings.Contains(fs[0].Error(), "a Staged for batch") {
		t.Fatalf("protocol failures %v; want one naming the Staged's batch", fs)
	}
}

// TestStateBatchTrimmed: the states of a batch's keys count with its records against the
// inlet's batch.max-bytes: with 150-byte states and a 200-byte limit, a batch holds one key
// (several records of it fit) until the counts' states are small again, and the counts are
// right.
func TestStateBatchTrimmed(t *testing.T) {
	st := newStateSetup(t, 1, false)
	st.e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = "200"
	big := func(n int) []byte { return fmt.Appendf(nil, "%0150d", n) }
	for k := range 4 {
		st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: fmt.Appendf(nil, "p0-k%d", k), Value: big(10)})
	}
	count := st.sb.counter(false)
	var mu sync.Mutex
	var sizes [][2]int // per batch: its keys, its records and states' bytes
	st.f.OnBatch = func(c *call) error {
		states, ok := st.sb.states(c)
		if !ok {
			return nil
		}
		n, keys := 0, map[string]bool{}
		for _, r := range c.Batch.Records {
			n += len(r.Record.Key) + len(r.Record.Value)
			keys[string(r.Record.Key)] = true
		}
		for k, v := range states {
			n += len(k) + len(v)
		}
		mu.Lock()
		sizes = append(sizes, [2]int{len(keys), n})
		mu.Unlock()
		return count(c)
	}
	st.start(t, nil)
	st.produceKeys(t, 0, 4, 12)
	outs := st.b.ReadN(t, st.out, 12, waitTimeout)
	for _, o := range outs {
		n, _ := strconv.Atoi(string(o.Value))
		if n < 11 || n > 13 {
			t.Fatalf("key %s counted %d, want 11 to 13 (from the restored 10)", o.Key, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if sizes[0][0] != 1 {
		t.Fatalf("the first batch holds %d keys with their 150-byte states; want one", sizes[0][0])
	}
	for _, s := range sizes {
		if s[0] > 1 && s[1] > 200 {
			t.Fatalf("a batch of %d keys holds %d bytes of records and states, over the 200-byte limit", s[0], s[1])
		}
	}
}

// TestStateJoinBothOrders counts 3 keys in each of 2 partitions, 60 records, with the Staged before
// the Ack and after it: every key's outputs count 1, 2, 3... with no gap nor repeat, and the
// changelog's last values are the totals.
func TestStateJoinBothOrders(t *testing.T) {
	for _, ackFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("ackFirst=%v", ackFirst), func(t *testing.T) {
			st := newStateSetup(t, 2, ackFirst)
			st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "4"
			st.start(t, nil)
			st.produceKeys(t, 0, 3, 30)
			st.produceKeys(t, 1, 3, 30)
			outs := st.b.ReadN(t, st.out, 60, waitTimeout)
			checkChains(t, outs)
			waitFor(t, "the changelog holds every total", func() bool {
				v := changelogValues(t, st.b, st.changelog)
				return len(v) == 6 && v["p0-k0"] == "10" && v["p1-k2"] == "10" && v["p0-k1"] == "10"
			})
		})
	}
}

// checkChains checks that each key's outputs, in order, count 1, 2, 3...
func checkChains(t *testing.T, outs []*kgo.Record) {
	t.Helper()
	next := map[string]int{}
	for _, r := range outs {
		k := string(r.Key)
		n, _ := strconv.Atoi(string(r.Value))
		if n != next[k]+1 {
			t.Fatalf("key %s: output %d after %d", k, n, next[k])
		}
		next[k] = n
	}
}

// failOnce wraps a process's answer: its nth batch (of every conversation together) is failed
// once, with nothing staged, which fails the stream.
func failOnce(n int, answer func(*call) error) func(*call) error {
	var mu sync.Mutex
	calls := 0
	return func(c *call) error {
		mu.Lock()
		calls++
		fail := calls == n
		mu.Unlock()
		if fail {
			return c.Fail("the test fails this batch once")
		}
		return answer(c)
	}
}

// TestStateNewConversationCatchesUp fails the stream once mid-run (at least once): the next
// conversation drops the overlay and catches up from the changelog, so no key's count starts
// over; as stated for at least once, a redelivered record may count again, and the changelog,
// the store and the outputs agree on each key's last count.
func TestStateNewConversationCatchesUp(t *testing.T) {
	st := newStateSetup(t, 2, false)
	st.f.OnBatch = failOnce(4, st.sb.counter(false))
	st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
	r := st.start(t, nil)
	st.produceKeys(t, 0, 2, 20)
	st.produceKeys(t, 1, 2, 20)
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, st.b, st.e["FLOW_CONSUMER_GROUP"], st.in, map[int32]int64{0: 20, 1: 20})
	})
	if r.sc.Conversations() < 2 {
		t.Fatalf("%d conversations, want the failure to start a second", r.sc.Conversations())
	}
	outs := st.b.ReadAll(t, st.out)
	ones := map[string]int{}
	for _, o := range outs {
		if string(o.Value) == "1" {
			ones[string(o.Key)]++
		}
	}
	for k, n := range ones {
		if n > 1 {
			t.Errorf("key %s counted from 1 %d times: the new conversation did not catch up its state", k, n)
		}
	}
	last := lastCounts(outs)
	v := changelogValues(t, st.b, st.changelog)
	for k, n := range last {
		if n < 10 || v[k] != strconv.Itoa(n) {
			t.Errorf("key %s: last output %d, changelog %q; want them equal, at least 10", k, n, v[k])
		}
		p := int32(0)
		if k[1] == '1' {
			p = 1
		}
		waitFor(t, "the store holds the changelog's count of "+k, func() bool {
			got, _ := sidecar.StateOf(t, r.sc, st.in, p, k)
			return got == v[k]
		})
		if n := sidecar.Overlay(r.sc, st.in, p); n != 0 {
			t.Errorf("partition %d holds %d states in its overlay after every commit; want none", p, n)
		}
	}
}

// TestStateExactlyOnce fails the stream once mid-run in exactly-once mode: the open
// transaction's outputs and states are aborted together, the batches are delivered again with
// the committed states, and a read_committed reader sees every key count 1, 2, 3... to its
// exact total, in the outputs and in the changelog.
func TestStateExactlyOnce(t *testing.T) {
	st := newStateSetup(t, 2, true)
	st.f.OnBatch = failOnce(5, st.sb.counter(true))
	st.e["FLOW_DELIVERY"] = "exactly-once"
	st.e["FLOW_POD_NAME"] = "pod-a"
	st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
	// Long enough that the first batches are still in the open transaction at the failure.
	st.e["FLOW_COMMIT_INTERVAL"] = "1s"
	r := st.start(t, nil)
	st.produceKeys(t, 0, 2, 20)
	st.produceKeys(t, 1, 2, 20)
	waitFor(t, "every record committed", func() bool {
		return allCommitted(t, st.b, st.e["FLOW_CONSUMER_GROUP"], st.in, map[int32]int64{0: 20, 1: 20})
	})
	if r.sc.Conversations() < 2 {
		t.Fatalf("%d conversations, want the failure to start a second", r.sc.Conversations())
	}
	aborted := r.records.Attrs("stream failed: the open transaction is aborted; its batches are delivered again")
	if len(aborted) == 0 || aborted[0]["batches"].(int64) == 0 {
		t.Fatalf("aborted transactions %v; want the failure to abort one holding batches and their states", aborted)
	}
	outs := st.b.ReadAll(t, st.out)
	if len(outs) != 40 {
		t.Fatalf("read_committed: %d outputs, want exactly 40", len(outs))
	}
	checkChains(t, outs)
	v := changelogValues(t, st.b, st.changelog)
	for _, k := range []string{"p0-k0", "p0-k1", "p1-k0", "p1-k1"} {
		if v[k] != "10" {
			t.Errorf("read_committed changelog: %s=%q, want exactly 10", k, v[k])
		}
	}
}

// TestStateMovesWithRebalance runs sidecar A on 4 partitions, then B joins the group: the
// partitions that move are restored by B before its first batch of them, so every key's
// outputs count on without a restart, and the totals are exact, in both delivery modes. A
// keeps the files of the partitions it gave up (FLOW_STATE_KEEP_REVOKED).
func TestStateMovesWithRebalance(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			const parts = 4
			st := newStateSetup(t, parts, false)
			st.e["FLOW_DELIVERY"] = mode
			st.e["FLOW_POD_NAME"] = "pod-a"
			st.e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "3"
			group := st.e["FLOW_CONSUMER_GROUP"]
			ra := st.start(t, nil)
			for p := range int32(parts) {
				st.produceKeys(t, p, 2, 10)
			}
			waitFor(t, "A commits the first half", func() bool {
				return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10})
			})

			sbB := newStateBridge(t)
			fb := newProcess(t, sbB.counter(false))
			fb.Spec, fb.OnStart = stateSpec(), sbB.onStart
			eb := baseEnv(t, st.b, fb, st.in, st.out)
			for k, v := range st.e {
				if k != "FLOW_PROCESS_PORT" && k != "FLOW_READINESS_FILE" {
					eb[k] = v
				}
			}
			eb["FLOW_POD_NAME"] = "pod-b"
			eb["FLOW_STATE_DIR"] = t.TempDir()
			rb := startTuned(t, eb.config(t), func(sc *sidecar.Sidecar) { sbB.addr = sidecar.ServeState(t, sc) })
			var moved []int32
			waitFor(t, "B owns partitions", func() bool {
				moved = sidecar.Owned(rb.sc, st.in)
				return len(moved) > 0 && len(moved) < parts
			})
			waitFor(t, "the rebalance settles", func() bool {
				return len(sidecar.Owned(ra.sc, st.in))+len(sidecar.Owned(rb.sc, st.in)) == parts
			})
			for p := range int32(parts) {
				st.produceKeys(t, p, 2, 10)
			}
			waitFor(t, "every record committed", func() bool {
				return allCommitted(t, st.b, group, st.in, map[int32]int64{0: 20, 1: 20, 2: 20, 3: 20})
			})
			outs := st.b.ReadAll(t, st.out)
			if len(outs) != 80 {
				t.Fatalf("%d outputs, want 80 (no fault: each record once)", len(outs))
			}
			checkChains(t, outs)
			sbB.mu.Lock()
			seen := append([]string(nil), sbB.seen...)
			sbB.mu.Unlock()
			for _, s := range seen {
				if s[len(s)-1] == '=' {
					t.Errorf("B's first batch of %s saw no state: the moved partition was not restored", s)
				}
			}
			if len(seen) == 0 {
				t.Fatalf("B saw no batch of the moved partitions %v", moved)
			}
			for _, p := range moved {
				if _, ok := sidecar.StateOf(t, ra.sc, st.in, p, fmt.Sprintf("p%d-k0", p)); ok {
					t.Errorf("A still serves the state of partition %d it gave up", p)
				}
				if !sidecar.KeptFile(ra.sc, st.in, p) {
					t.Errorf("A did not keep the file of partition %d it gave up", p)
				}
			}
		})
	}
}
