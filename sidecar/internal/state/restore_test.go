package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar/internal/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// changelog is a test's compacted changelog topic of one partition, with a producer that
// writes partition 0.
type changelog struct {
	b     *testkit.Broker
	topic string
	prod  *kgo.Client
}

func newChangelog(t *testing.T) *changelog { return newChangelogPolicy(t, "compact") }

func newChangelogPolicy(t *testing.T, policy string) *changelog {
	t.Helper()
	b := testkit.NewBroker(t, testkit.BrokerOptions{})
	c := &changelog{b: b, topic: b.Topic(t, "state", 1, "cleanup.policy", policy)}
	c.prod = c.producer(t)
	return c
}

func (c *changelog) producer(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.b.Addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(c.topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// rec is a changelog record: value "" is a tombstone; at zero: the producer's clock.
func rec(key, value string, at time.Time) *kgo.Record {
	r := &kgo.Record{Key: []byte(key), Timestamp: at}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

func (c *changelog) produce(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	if err := c.prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", c.topic, err)
	}
}

func (c *changelog) restore(t *testing.T, p *state.Partition, o state.RestoreOptions) state.Restored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := state.Restore(ctx, p, []kgo.Opt{kgo.SeedBrokers(c.b.Addrs...)}, o)
	if err != nil {
		t.Fatalf("Restore(%s) = %v", c.topic, err)
	}
	return r
}

func (c *changelog) open(t *testing.T, dir string, o state.Options) *state.Partition {
	t.Helper()
	p, _, err := state.Open(dir, c.topic, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// values reads keys and returns key=value pairs, without write times.
func values(t *testing.T, p *state.Partition, keys ...string) []string {
	t.Helper()
	var out []string
	for _, kv := range get(t, p, 0, keys...) {
		out = append(out, kv[:strings.LastIndex(kv, "@")])
	}
	return out
}

func TestRestoreThenCatchUp(t *testing.T) {
	c := newChangelog(t)
	c.produce(t, rec("a", "1", time.Time{}), rec("b", "2", time.Time{}), rec("a", "3", time.Time{}), rec("b", "", time.Time{}), rec("", "empty", time.Time{}))
	dir := t.TempDir()
	p := c.open(t, dir, state.Options{})

	r := c.restore(t, p, state.RestoreOptions{MaxBatchRecords: 2}) // several transactions
	if want := (state.Restored{Full: true, Reason: state.ReasonEmpty, From: 0, To: 5, Records: 5}); r != want {
		t.Fatalf("Restore of a new file = %+v; want %+v", r, want)
	}
	if got, want := values(t, p, "a", "b", ""), []string{"a=3", "=empty"}; !slices.Equal(got, want) {
		t.Fatalf("after the restore: %v; want %v (the last value wins, a tombstone deletes)", got, want)
	}
	if cp := checkpoint(t, p); cp.Position != 5 || cp.Keys != 2 || cp.Bytes != int64(len("a3")+len("empty")) {
		t.Fatalf("Checkpoint after the restore = %+v; want position 5, 2 keys, 7 bytes", cp)
	}

	c.produce(t, rec("b", "4", time.Time{}), rec("a", "", time.Time{}))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = c.open(t, dir, state.Options{BootID: "a restarted machine"})
	r = c.restore(t, p, state.RestoreOptions{})
	if want := (state.Restored{From: 5, To: 7, Records: 2}); r != want {
		t.Fatalf("Restore from a checkpoint = %+v; want %+v (a catch-up of the 2 new records)", r, want)
	}
	if got, want := values(t, p, "a", "b", ""), []string{"b=4", "=empty"}; !slices.Equal(got, want) {
		t.Fatalf("after the catch-up: %v; want %v", got, want)
	}
	if r := c.restore(t, p, state.RestoreOptions{}); r != (state.Restored{From: 7, To: 7}) {
		t.Fatalf("Restore at the end = %+v; want nothing read", r)
	}
}

func TestRestoreReadCommitted(t *testing.T) {
	c := newChangelog(t)
	txn := c.producer(t, kgo.TransactionalID(testkit.TopicName(t, "", "txn")))
	ctx := context.Background()
	write := func(commit bool, rs ...*kgo.Record) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, rec("a", "1", time.Time{}), rec("b", "1", time.Time{}))
	write(false, rec("a", "aborted", time.Time{}), rec("c", "aborted", time.Time{}))
	write(true, rec("b", "", time.Time{}), rec("d", "2", time.Time{}))
	// An open transaction at the end: the last stable offset stops before it.
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { txn.EndTransaction(ctx, kgo.TryAbort) })
	if err := txn.ProduceSync(ctx, rec("e", "open", time.Time{})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stable, err := c.b.StableOffsets(ctx, c.topic)
	if err != nil {
		t.Fatal(err)
	}

	p := c.open(t, t.TempDir(), state.Options{})
	r := c.restore(t, p, state.RestoreOptions{ReadCommitted: true})
	if !r.Full || r.To != stable[0] || r.Records != 4 {
		t.Fatalf("Restore read_committed = %+v; want full, to the last stable offset %d, 4 committed records", r, stable[0])
	}
	if got, want := values(t, p, "a", "b", "c", "d", "e"), []string{"a=1", "d=2"}; !slices.Equal(got, want) {
		t.Fatalf("after a read_committed restore: %v; want %v (aborted and open records never applied)", got, want)
	}
}

func TestRestoreFullWhenTheFileCannotBeTrusted(t *testing.T) {
	for _, c := range []struct {
		name   string
		reason string
		// spoil makes the file's checkpoint unusable; it returns the options to reopen with.
		spoil func(t *testing.T, c *changelog, p *state.Partition) state.Options
		from  int64 // where the full restore reads from
		keys  int64 // it then holds
		// policy is the changelog's cleanup.policy: Kafka refuses DeleteRecords on a topic
		// that is only compacted, so a log start past the file's position needs delete too.
		policy string
	}{
		{name: "log start past the position", reason: state.ReasonGap, from: 4, keys: 1, policy: "compact,delete", spoil: func(t *testing.T, c *changelog, p *state.Partition) state.Options {
			c.produce(t, rec("x", "5", time.Time{}), rec("y", "6", time.Time{}))
			deleteRecords(t, c, 4)
			return state.Options{}
		}},
		{name: "position past the end", reason: state.ReasonGap, keys: 2, spoil: func(t *testing.T, c *changelog, p *state.Partition) state.Options {
			if err := p.Apply(nil, 1000); err != nil {
				t.Fatal(err)
			}
			return state.Options{}
		}},
		{name: "topic recreated", reason: state.ReasonTopicRecreated, keys: 1, spoil: func(t *testing.T, c *changelog, p *state.Partition) state.Options {
			ctx := context.Background()
			if err := c.b.DeleteTopic(ctx, c.topic); err != nil {
				t.Fatal(err)
			}
			// A real cluster may take a moment to forget the deleted topic.
			if !testkit.Eventually(30*time.Second, func() bool { return c.b.CreateTopic(ctx, c.topic, 1, "cleanup.policy", "compact") == nil }) {
				t.Fatalf("topic %s not created again", c.topic)
			}
			c.prod = c.producer(t) // the old one knows the old topic id
			c.produce(t, rec("x", "new", time.Time{}))
			return state.Options{}
		}},
		{name: "unclean file of another boot", reason: state.ReasonUnclean, keys: 2, spoil: func(t *testing.T, c *changelog, p *state.Partition) state.Options {
			if err := p.Abandon(); err != nil {
				t.Fatal(err)
			}
			return state.Options{BootID: "after a power cut"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.policy == "" {
				c.policy = "compact"
			}
			cl := newChangelogPolicy(t, c.policy)
			cl.produce(t, rec("a", "1", time.Time{}), rec("b", "2", time.Time{}), rec("a", "3", time.Time{}))
			dir := t.TempDir()
			p := cl.open(t, dir, state.Options{BootID: "boot"})
			cl.restore(t, p, state.RestoreOptions{})
			o := c.spoil(t, cl, p)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if o.BootID == "" {
				o.BootID = "boot"
			}
			p = cl.open(t, dir, o)
			r := cl.restore(t, p, state.RestoreOptions{})
			end, err := cl.b.EndOffsets(context.Background(), cl.topic)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Full || r.Reason != c.reason || r.From != c.from || r.To != end[0] {
				t.Fatalf("Restore = %+v; want full, reason %q, from %d to %d", r, c.reason, c.from, end[0])
			}
			cp := checkpoint(t, p)
			if cp.Position != end[0] || cp.Keys != c.keys {
				t.Fatalf("Checkpoint after the full restore = %+v; want position %d and %d keys (nothing of the old file kept)", cp, end[0], c.keys)
			}
		})
	}
}

// deleteRecords moves the log start of the changelog's partition to offset, as an operator's
// DeleteRecords (or millrace replay rewind --reset-state) does.
func deleteRecords(t *testing.T, c *changelog, offset int64) {
	t.Helper()
	var os kadm.Offsets
	os.AddOffset(c.topic, 0, offset, -1)
	resps, err := kadm.NewClient(c.b.Admin).DeleteRecords(context.Background(), os)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("DeleteRecords(%s, %d) = %v", c.topic, offset, err)
	}
}

func TestRestoreTTL(t *testing.T) {
	c := newChangelog(t)
	now := time.Now().Truncate(time.Millisecond)
	old := now.Add(-48 * time.Hour)
	c.produce(t, rec("idle", "1", old), rec("busy", "2", old), rec("busy", "3", now), rec("fresh", "4", now))
	p := c.open(t, t.TempDir(), state.Options{})
	c.restore(t, p, state.RestoreOptions{})
	notBefore := now.Add(-24 * time.Hour).UnixMilli()
	want := []string{fmt.Sprintf("busy=3@%d", now.UnixMilli()), fmt.Sprintf("fresh=4@%d", now.UnixMilli())}
	if got := get(t, p, notBefore, "idle", "busy", "fresh"); !slices.Equal(got, want) {
		t.Fatalf("Get with a 24h TTL = %v; want %v (the record's timestamp is the write time)", got, want)
	}
	indexTTL(t, p, true, 3) // built from the restored values, as the sweep does
	expired, err := p.Expired(notBefore, 1000, nil)
	if err != nil || len(expired) != 1 || string(expired[0]) != "idle" {
		t.Fatalf("Expired = %q, %v; want [idle] (restored already expired, swept like any other)", expired, err)
	}
}

func TestRestoreRefusesAStateOverTheLimit(t *testing.T) {
	c := newChangelog(t)
	c.produce(t, rec("a", "1", time.Time{}), rec("big", strings.Repeat("x", 100), time.Time{}))
	p := c.open(t, t.TempDir(), state.Options{MaxValueBytes: 64})
	_, err := state.Restore(context.Background(), p, []kgo.Opt{kgo.SeedBrokers(c.b.Addrs...)}, state.RestoreOptions{})
	if !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), c.topic) || !strings.Contains(err.Error(), "at offset 1:") {
		t.Fatalf("Restore of a 100-byte state under a 64-byte limit = %v; want ErrTooLarge naming the topic and offset", err)
	}
}

func TestRestoreEmptyChangelog(t *testing.T) {
	c := newChangelog(t)
	p := c.open(t, t.TempDir(), state.Options{})
	if r := c.restore(t, p, state.RestoreOptions{}); r != (state.Restored{Full: true, Reason: state.ReasonEmpty}) {
		t.Fatalf("Restore of an empty changelog = %+v; want full, nothing read", r)
	}
	// The file now knows the topic: the first record is a catch-up, not another full restore.
	c.produce(t, rec("a", "1", time.Time{}))
	if r := c.restore(t, p, state.RestoreOptions{}); r != (state.Restored{From: 0, To: 1, Records: 1}) {
		t.Fatalf("Restore after the first record = %+v; want a catch-up of it", r)
	}
}

func TestRestoreCanceled(t *testing.T) {
	c := newChangelog(t)
	c.produce(t, rec("a", "1", time.Time{}))
	p := c.open(t, t.TempDir(), state.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := state.Restore(ctx, p, []kgo.Opt{kgo.SeedBrokers(c.b.Addrs...)}, state.RestoreOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore with a canceled context = %v; want context.Canceled", err)
	}
	if cp := checkpoint(t, p); cp != (state.Checkpoint{}) {
		t.Fatalf("Checkpoint after a canceled restore = %+v; want it untouched", cp)
	}
	if r := c.restore(t, p, state.RestoreOptions{}); !r.Full || r.Records != 1 {
		t.Fatalf("Restore after a canceled one = %+v; want a full restore of 1 record", r)
	}
}

// TestRestoreProgress: Progress is told the records left to the end measured at the start,
// first all of them, never more as the restore reads, and 0 at the end; a catch-up with
// nothing to read says 0 only.
func TestRestoreProgress(t *testing.T) {
	c := newChangelog(t)
	for i := range 5 {
		c.produce(t, rec(fmt.Sprint("k", i), "1", time.Time{}))
	}
	p := c.open(t, t.TempDir(), state.Options{})
	var got []int64
	c.restore(t, p, state.RestoreOptions{Progress: func(n int64) { got = append(got, n) }})
	if len(got) < 2 || got[0] != 5 || got[len(got)-1] != 0 {
		t.Fatalf("Progress of a restore of 5 records said %v; want 5 first and 0 last", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] > got[i-1] {
			t.Fatalf("Progress said %v; want it never to grow", got)
		}
	}
	got = nil
	c.restore(t, p, state.RestoreOptions{Progress: func(n int64) { got = append(got, n) }})
	if !slices.Equal(got, []int64{0}) {
		t.Fatalf("Progress of a catch-up at the end said %v; want [0]", got)
	}
}
