package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// broker is the Kafka of one test: kfake in this process, listening on 127.0.0.1 with its data
// on disk (so it can be restarted), or the real broker named by MILLRACE_KAFKA_BROKERS.
type broker struct {
	addrs   []string
	real    bool
	cluster *kfake.Cluster // nil on the real broker
	dataDir string
	port    int
	admin   *kgo.Client
}

func newBroker(t testing.TB) *broker { return openBroker(t, true) }

// openBroker is newBroker; persist=false keeps kfake's data in memory only (no restart).
func openBroker(t testing.TB, persist bool) *broker {
	t.Helper()
	b := &broker{}
	if seeds := os.Getenv(envBrokers); seeds != "" {
		b.real = true
		b.addrs = strings.Split(seeds, ",")
	} else {
		if persist {
			b.dataDir = t.TempDir()
		}
		b.port = freePort(t)
		b.startKfake(t)
		t.Cleanup(func() {
			if b.cluster != nil {
				b.cluster.Close()
			}
		})
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(16<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(admin.Close)
	b.admin = admin
	return b
}

func (b *broker) startKfake(t testing.TB) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(b.port),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(16 << 20)})}
	if b.dataDir != "" {
		opts = append(opts, kfake.DataDir(b.dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	b.cluster = c
	b.addrs = c.ListenAddrs()
}

func (b *broker) name() string {
	if b.real {
		return "kafka"
	}
	return "kfake"
}

// restart stops the broker and starts it again with its data: kfake is closed and reopened
// on its port and data directory; the real broker is restarted with `scripts/kafka restart`.
func (b *broker) restart(t testing.TB, down time.Duration) {
	t.Helper()
	if !b.real {
		if b.dataDir == "" {
			t.Fatal("broker restart: this kfake keeps its data in memory; use newBroker")
		}
		b.cluster.Close()
		b.cluster = nil
		time.Sleep(down)
		b.startKfake(t)
		return
	}
	host, port, _ := net.SplitHostPort(b.addrs[0])
	if host != "127.0.0.1" {
		t.Fatalf("broker restart: %s is not a broker scripts/kafka started on 127.0.0.1", b.addrs[0])
	}
	cmd := exec.Command(filepath.Join(bin.root, "scripts/kafka"), "restart")
	cmd.Env = append(os.Environ(), "MILLRACE_KAFKA_PORT="+port, "MILLRACE_KAFKA_RESTART_DOWN="+down.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/kafka restart: %v\n%s", err, out)
	}
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)

// topic creates a topic named for the test and returns its name; it is deleted at cleanup.
func (b *broker) topic(t testing.TB, what string, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("e2e-%s-%s-%d", strings.ToLower(unsafeChars.ReplaceAllString(t.Name(), "-")), what, rand.IntN(1e6))
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	b.createTopic(t, name, partitions)
	t.Cleanup(func() { b.deleteTopic(t, name) })
	return name
}

func (b *broker) createTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	if err := b.tryCreateTopic(name, partitions); err != nil {
		t.Fatal(err)
	}
}

// tryCreateTopic creates a topic and waits until every partition has a leader.
func (b *broker) tryCreateTopic(name string, partitions int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	for k, v := range map[string]string{"max.message.bytes": strconv.Itoa(16 << 20)} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, b.admin)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	// Metadata may lag the creation on a real broker: wait until every partition has a leader.
	if !waitUntil(30*time.Second, func() bool { return len(b.partitions(nil, name)) == int(partitions) }) {
		return fmt.Errorf("create topic %s: not every partition has a leader after 30 s", name)
	}
	return nil
}

// deleteTopic deletes a topic; errors are logged, not fatal (it is used in cleanups).
func (b *broker) deleteTopic(t testing.TB, name string) {
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, name)
	req.TimeoutMillis = 30000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, b.admin)
	if err == nil && len(resp.Topics) > 0 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Logf("delete topic %s: %v", name, err)
	}
}

// partitions returns the partitions of topic that have a leader.
func (b *broker) partitions(t testing.TB, topic string) []int32 {
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := md.RequestWith(ctx, b.admin)
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

// endOffsets returns the high watermark of every partition of topic.
func (b *broker) endOffsets(t testing.TB, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	ps := b.partitions(t, topic)
	if len(ps) == 0 {
		return nil, fmt.Errorf("topic %s has no partition with a leader", topic)
	}
	for _, p := range ps {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, b.admin)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, tt := range resp.Topics {
		for _, p := range tt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets %s/%d: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out, nil
}

// committed returns the group's committed offsets of topic, by partition (absent: none).
func (b *broker) committed(group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	req.Groups = append(req.Groups, rg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, b.admin)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err == kerr.GroupIDNotFound {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("offset fetch of group %s: %w", group, err)
		}
		for _, tt := range g.Topics {
			if tt.Topic != topic {
				continue
			}
			for _, p := range tt.Partitions {
				if p.Offset >= 0 {
					out[p.Partition] = p.Offset
				}
			}
		}
	}
	return out, nil
}

// readAll reads every record of topic from the start up to the end offsets it has now.
func (b *broker) readAll(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	end, err := b.endOffsets(t, topic)
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(32<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
				out = append(out, r)
				if r.Offset == end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	return out
}

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
