package sidecar_test

import (
	"context"
	"fmt"
	"strconv"
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
	t     testing.TB
	addr  string
	ttlMs uint64 // the Open's ttl of inlet "in"; set before the sidecar starts

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
		Inlets: []*statev1.InletState{{Inlet: "in", MaxValueBytes: 64 << 10, TtlMs: sb.ttlMs}}}}}
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

// opened returns how many conversations the bridge has opened the State service for.
func (sb *stateBridge) opened() int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return len(sb.got)
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
	st.e["FLOW_SIDECAR_PORT"] = strconv.Itoa(testkit.FreePort(t))
	st.sb.addr = "127.0.0.1:" + st.e["FLOW_SIDECAR_PORT"]
	return st
}

// start runs a sidecar of the setup; its bridge dials its State service.
func (st *stateSetup) start(t *testing.T, tune func(*sidecar.Config)) *running {
	cfg := st.e.config(t)
	if tune != nil {
		tune(cfg)
	}
	return start(t, cfg)
}

// startPeer runs a second sidecar of the setup, as pod, in the same group: a counting
// process and a bridge of its own, its own state directory and State port, the rest of the
// setup's variables.
func (st *stateSetup) startPeer(t *testing.T, pod string) (*running, *stateBridge) {
	sb := newStateBridge(t)
	f := newProcess(t, sb.counter(false))
	f.Spec, f.OnStart = stateSpec(), sb.onStart
	e := baseEnv(t, st.b, f, st.in, st.out)
	for k, v := range st.e {
		if k != "FLOW_PROCESS_PORT" && k != "FLOW_READINESS_FILE" {
			e[k] = v
		}
	}
	e["FLOW_POD_NAME"] = pod
	e["FLOW_STATE_DIR"] = t.TempDir()
	e["FLOW_SIDECAR_PORT"] = strconv.Itoa(testkit.FreePort(t))
	sb.addr = "127.0.0.1:" + e["FLOW_SIDECAR_PORT"]
	return start(t, e.config(t)), sb
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
