package e2e_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// broker is the Kafka of one test: kfake in this process, listening on 127.0.0.1 with its data
// on disk (so it can be restarted), or the real broker named by MILLRACE_KAFKA_BROKERS.
type broker struct {
	*testkit.Broker
}

func newBroker(t testing.TB) *broker { return openBroker(t, true) }

// openBroker is newBroker; persist=false keeps kfake's data in memory only (no restart). The
// broker and its topics keep their default settings (message.max.bytes 1048588): the suite
// runs as a user's cluster does. The admin client writes the inputs at once (no linger), and
// buffers up to a load run's records.
func openBroker(t testing.TB, persist bool) *broker {
	t.Helper()
	return &broker{testkit.NewBroker(t, testkit.BrokerOptions{
		Restartable: persist,
		Client:      []kgo.Opt{kgo.ProducerLinger(0), kgo.MaxBufferedRecords(100_000)},
	})}
}

// restart stops the broker and starts it again with its data: kfake is closed and reopened
// on its port and data directory; the real broker is restarted with `scripts/kafka restart`, the
// nodes of scripts/kafka-cluster one after another.
func (b *broker) restart(t testing.TB, down time.Duration) {
	t.Helper()
	if !b.Real() {
		b.RestartKfake(t, down)
		return
	}
	if clusterHome() != "" {
		// Three nodes: stopped and started again one after another (a rolling restart; a
		// node alone cannot start while the other two voters are down).
		for _, n := range []string{"1", "2", "3"} {
			b.kafkaScript(t, "term", n)
			time.Sleep(down)
			b.kafkaScript(t, "start-node", n)
		}
		return
	}
	host, port, _ := net.SplitHostPort(b.Addrs[0])
	if host != "127.0.0.1" {
		t.Fatalf("broker restart: %s is not a broker scripts/kafka started on 127.0.0.1", b.Addrs[0])
	}
	cmd := exec.Command(filepath.Join(bin.root, "scripts/kafka"), "restart")
	cmd.Env = append(os.Environ(), "MILLRACE_KAFKA_PORT="+port, "MILLRACE_KAFKA_RESTART_DOWN="+down.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/kafka restart: %v\n%s", err, out)
	}
}

// topic creates a topic named for the test and returns its name; it is deleted at cleanup.
func (b *broker) topic(t testing.TB, what string, partitions int32) string {
	t.Helper()
	name := testkit.TopicName(t, "e2e-", what)
	if err := b.createTopic(name, partitions); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.deleteTopic(t, name) })
	return name
}

// createTopic creates a topic at the broker's defaults and waits until every partition has a
// leader.
func (b *broker) createTopic(name string, partitions int32) error {
	return b.CreateTopic(context.Background(), name, partitions)
}

// deleteTopicGone deletes a topic mid-run and waits until the broker's metadata no longer
// knows it. A real broker applies a deletion in the background: a produce that reaches the
// partition's leader before it has applied it is acknowledged and then deleted with the topic,
// a loss no client can see — so a case that deletes an outlet sends no more input until the
// topic is gone.
func (b *broker) deleteTopicGone(t testing.TB, name string) {
	t.Helper()
	if err := b.DeleteTopic(context.Background(), name); err != nil {
		t.Fatalf("delete topic %s: %v", name, err)
	}
	// kadm answers from the client's metadata cache, which may show the topic for up to
	// MetadataMinAge (5 s) after the broker forgot it: the wait is that much longer at most.
	gone := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		md, err := kadm.NewClient(b.Admin).Metadata(ctx, name)
		return err == nil && errors.Is(md.Topics[name].Err, kerr.UnknownTopicOrPartition)
	}
	if !testkit.Eventually(60*time.Second, gone) {
		t.Fatalf("topic %s still in the broker's metadata 60 s after its deletion", name)
	}
}

// deleteTopic deletes a topic; errors are logged, not fatal (it is used in cleanups).
func (b *broker) deleteTopic(t testing.TB, name string) {
	if err := b.DeleteTopic(context.Background(), name); err != nil {
		t.Logf("%v", err)
	}
}
