package testkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvBrokers names a real Kafka cluster (host:port,…) the Kafka tests use instead of kfake;
// scripts/kafka start prints it and scripts/test sets it for its real-broker stage.
const EnvBrokers = "MILLRACE_KAFKA_BROKERS"

// RealBrokers returns the brokers EnvBrokers names, or nil when it is unset.
func RealBrokers() []string {
	if seeds := os.Getenv(EnvBrokers); seeds != "" {
		return strings.Split(seeds, ",")
	}
	return nil
}

// BrokerOptions shape a test's broker. The zero value is one kfake broker (or the real
// cluster) with a plain admin client.
type BrokerOptions struct {
	Kfake  []kfake.Opt // kfake's options after NumBrokers(1)
	Client []kgo.Opt   // the admin client's options after its seed brokers
	// Conn are the connection options (TLS, SASL) of every client the broker opens, the
	// admin and the readers, for a broker that demands them.
	Conn      []kgo.Opt
	KfakeOnly bool // kfake whatever EnvBrokers says: the test injects kfake's faults
	// Brokers names a real cluster to use whatever EnvBrokers says (the benchmarks' own
	// variable, BENCH_BROKERS); nil: EnvBrokers decides, as KfakeOnly allows.
	Brokers []string
	// Restartable gives kfake a fixed free port and a data directory, so Restart can bring it
	// back with its data.
	Restartable bool
}

// Broker is the Kafka of one test, with an admin client; everything is closed when the test
// ends.
type Broker struct {
	Addrs   []string
	Cluster *kfake.Cluster // nil on a real cluster
	Admin   *kgo.Client

	// Principal is the user the secured broker's FLOW_KAFKA_* variables name ("User:…"),
	// whose ACLs a test grants; empty on a plain broker.
	Principal string

	kfakeOpts []kfake.Opt
	port      int // a Restartable kfake's port, kept across restarts; 0 otherwise
	conn      []kgo.Opt
}

// NewBroker returns the test's broker: the real cluster EnvBrokers names, else kfake on
// 127.0.0.1.
func NewBroker(t testing.TB, o BrokerOptions) *Broker {
	t.Helper()
	b := &Broker{conn: o.Conn}
	if o.Brokers != nil {
		b.Addrs = o.Brokers
	} else if real := RealBrokers(); real != nil && !o.KfakeOnly {
		b.Addrs = real
	} else {
		b.kfakeOpts = append([]kfake.Opt{kfake.NumBrokers(1)}, o.Kfake...)
		if o.Restartable {
			b.kfakeOpts = append(b.kfakeOpts, kfake.DataDir(t.TempDir()))
			b.startRestartable(t)
		} else {
			b.startKfake(t)
		}
		t.Cleanup(func() {
			if b.Cluster != nil {
				b.Cluster.Close()
			}
		})
	}
	admin, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, o.Conn...), o.Client...)...)
	if err != nil {
		t.Fatalf("testkit: the admin client of %s: %v", strings.Join(b.Addrs, ","), err)
	}
	t.Cleanup(admin.Close)
	b.Admin = admin
	return b
}

func (b *Broker) startKfake(t testing.TB) {
	t.Helper()
	if err := b.openKfake(); err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
}

// startRestartable starts a Restartable kfake on a free port of its own. A port FreePort found
// free may be taken before kfake binds it (another test's listener, or a connection's
// ephemeral port: they share the range), so a port in use is given up for another, a few times.
func (b *Broker) startRestartable(t testing.TB) {
	t.Helper()
	var err error
	for range 5 {
		b.port = FreePort(t)
		if err = b.openKfake(); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
}

func (b *Broker) openKfake() error {
	opts := b.kfakeOpts
	if b.port != 0 {
		opts = append(opts[:len(opts):len(opts)], kfake.Ports(b.port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	b.Cluster = c
	b.Addrs = c.ListenAddrs()
	return nil
}

// Real reports whether the broker is a real cluster.
func (b *Broker) Real() bool { return b.Cluster == nil && b.kfakeOpts == nil }

// Name is "kafka" for a real cluster, "kfake" otherwise.
func (b *Broker) Name() string {
	if b.Real() {
		return "kafka"
	}
	return "kfake"
}

// RestartKfake closes a Restartable kfake and opens it again on its port with its data after
// down (the fault's length, not a wait for a state).
func (b *Broker) RestartKfake(t testing.TB, down time.Duration) {
	t.Helper()
	if b.Cluster == nil {
		t.Fatal("testkit: RestartKfake on a real cluster")
	}
	b.Cluster.Close()
	b.Cluster = nil
	time.Sleep(down)
	b.startKfake(t)
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// TopicName returns a topic name unique to the test: prefix, the test's name, what and a random
// number (at most 200 characters).
func TopicName(t testing.TB, prefix, what string) string {
	name := fmt.Sprintf("%s%s-%s-%d", prefix, strings.ToLower(unsafeChars.ReplaceAllString(t.Name(), "-")), what, rand.IntN(1e9))
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	return name
}

// Topic creates a topic named for the test (TopicName without prefix) with partitions and the
// topic configs given as name, value pairs, and returns its name.
func (b *Broker) Topic(t testing.TB, what string, partitions int32, configs ...string) string {
	t.Helper()
	name := TopicName(t, "", what)
	if err := b.CreateTopic(context.Background(), name, partitions, configs...); err != nil {
		t.Fatal(err)
	}
	return name
}

// kadm is franz-go's admin client over b.Admin, its requests bounded by 30 s (a topic's
// creation or deletion on a real cluster may take a while).
func (b *Broker) kadm() *kadm.Client {
	adm := kadm.NewClient(b.Admin)
	adm.SetTimeoutMillis(30_000)
	return adm
}

// CreateTopic creates a topic and waits until every partition has a leader (metadata may lag
// the creation on a real cluster). configs are name, value pairs. Its replication factor is the
// broker's default.replication.factor (3 on scripts/kafka-cluster, as in production).
func (b *Broker) CreateTopic(ctx context.Context, name string, partitions int32, configs ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		cfg[configs[i]] = kadm.StringPtr(configs[i+1])
	}
	if _, err := b.kadm().CreateTopic(ctx, partitions, -1, cfg, name); err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	led := func() bool { return ctx.Err() != nil || b.everyBrokerLeads(ctx, name, partitions) }
	if !Eventually(30*time.Second, led) || ctx.Err() != nil {
		return fmt.Errorf("create topic %s: not every partition has a leader after 30 s: %w", name, ctx.Err())
	}
	return nil
}

// DeleteTopic deletes a topic.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.kadm().DeleteTopic(ctx, name); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	return nil
}

// everyBrokerLeads reports whether every broker of the cluster knows a leader for each of the
// topic's partitions: a client that asks any of them (a sidecar started next) finds the topic.
// On a cluster, the brokers learn a new topic from the controller one after another.
func (b *Broker) everyBrokerLeads(ctx context.Context, topic string, partitions int32) bool {
	if len(b.Partitions(ctx, topic)) != int(partitions) {
		return false
	}
	for _, br := range b.Admin.DiscoveredBrokers() {
		if len(partitionsLed(ctx, br, topic)) != int(partitions) {
			return false
		}
	}
	return true
}

// Partitions returns the partitions of topic that have a leader (none when the broker cannot
// say).
//
// It asks the brokers with a raw Metadata request, as CreateTopic's wait needs: kadm's
// Metadata and ListTopics answer from the client's metadata cache, which keeps a partition's
// missing leader (or the topic's UNKNOWN_TOPIC_OR_PARTITION) for MetadataMinAge (5 s).
func (b *Broker) Partitions(ctx context.Context, topic string) []int32 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	return led(md.RequestWith(ctx, b.Admin))
}

// partitionsLed is Partitions as one broker answers.
func partitionsLed(ctx context.Context, br *kgo.Broker, topic string) []int32 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	resp, err := br.Request(ctx, md)
	if err != nil {
		return nil
	}
	return led(resp.(*kmsg.MetadataResponse), nil)
}

// led returns the partitions of a one-topic Metadata response that have a leader.
func led(resp *kmsg.MetadataResponse, err error) []int32 {
	if err != nil || len(resp.Topics) == 0 || resp.Topics[0].ErrorCode != 0 {
		return nil
	}
	var ps []int32
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode == 0 && p.Leader >= 0 {
			ps = append(ps, p.Partition)
		}
	}
	return ps
}

// EndOffsets returns the high watermark of every partition of topic.
func (b *Broker) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return b.endOffsets(ctx, topic, (*kadm.Client).ListEndOffsets)
}

// StableOffsets returns the last stable offset of every partition of topic: the end a
// read_committed reader reaches (below the first transaction still open).
func (b *Broker) StableOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return b.endOffsets(ctx, topic, (*kadm.Client).ListCommittedOffsets)
}

func (b *Broker) endOffsets(ctx context.Context, topic string, list func(*kadm.Client, context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := list(b.kadm(), ctx, topic)
	if err == nil {
		err = listed.Error() // an unknown topic, or a partition that could not be listed
	}
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for p, o := range listed[topic] {
		out[p] = o.Offset
	}
	return out, nil
}

// Count returns how many records topic holds now (the sum of its end offsets).
func (b *Broker) Count(t testing.TB, topic string) int64 {
	t.Helper()
	ends, err := b.EndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, o := range ends {
		n += o
	}
	return n
}

// Committed returns the group's committed offsets of topic, by partition (absent: none; an
// unknown group has none). A retriable error of the group (its coordinator still loading on a
// fresh cluster) is asked again, within 10 s.
func (b *Broker) Committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		out, err := b.committed(ctx, group, topic)
		if !kerr.IsRetriable(err) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *Broker) committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	out := map[int32]int64{}
	fetched, err := b.kadm().FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("offset fetch of group %s: %w", group, err)
	}
	for p, o := range fetched[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// Produce writes records (to the topic and partition each names, as the admin client's
// options partition) and waits for all.
func (b *Broker) Produce(t testing.TB, rs ...*kgo.Record) {
	t.Helper()
	if err := b.Admin.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// ReadN reads topic from the start until n records are read, within limit. It reads as
// read_committed: records of aborted or open transactions are not among them.
func (b *Broker) ReadN(t testing.TB, topic string, n int, limit time.Duration) []*kgo.Record {
	t.Helper()
	cl := b.reader(t, topic, true)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: got %d records, want %d", topic, len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// ReadAll reads every record of topic from the start up to its last stable offsets now, as a
// read_committed reader: what aborted transactions wrote is not among them (outside
// transactions this is every record up to the end).
func (b *Broker) ReadAll(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return b.readAll(t, topic, true, false)
}

// ReadAllUncommitted is ReadAll as a read_uncommitted reader: records of aborted and open
// transactions are among them, up to the end offsets.
func (b *Broker) ReadAllUncommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return b.readAll(t, topic, false, false)
}

// ReadLog is ReadAllUncommitted with the control records (the transactions' commit and abort
// markers) kept among the others, in each partition's log order: what a verifier needs to
// tell which records aborted transactions wrote.
func (b *Broker) ReadLog(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return b.readAll(t, topic, false, true)
}

func (b *Broker) readAll(t testing.TB, topic string, committed, control bool) []*kgo.Record {
	t.Helper()
	ends := b.EndOffsets
	if committed {
		ends = b.StableOffsets
	}
	end, err := ends(context.Background(), topic)
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	want := map[int32]int64{}
	for p, o := range end {
		if o > 0 {
			want[p] = o
		}
	}
	if len(want) == 0 {
		return nil
	}
	cl := b.reader(t, topic, committed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: still missing partitions up to %v after 5 minutes; read %d records", topic, want, len(out))
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("read %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset < end {
				if control || !r.Attrs.IsControl() {
					out = append(out, r)
				}
				if r.Offset >= end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	return out
}

// reader is a consumer of topic from its start, closed when the test ends; committed reads
// as read_committed. It keeps the control records (a transaction's marker may be a
// partition's last offset, which ReadAll waits for); its callers drop them.
func (b *Broker) reader(t testing.TB, topic string, committed bool) *kgo.Client {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(b.Addrs...), kgo.ConsumeTopics(topic), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64 << 20), kgo.FetchMaxPartitionBytes(32 << 20)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(append(opts, b.conn...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// FreePort returns a TCP port free on 127.0.0.1 now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
