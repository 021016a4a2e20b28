package replay_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/replay"
	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// securedKafka reads vars as the sidecar does.
func securedKafka(t *testing.T, b *testkit.Broker, vars map[string]string) replay.Kafka {
	t.Helper()
	var problems []string
	conn := kafkaconn.FromEnv(func(k string) string { return vars[k] }, os.ReadFile, func(f string, a ...any) { problems = append(problems, f) })
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return replay.Kafka{Brokers: b.Addrs, Conn: conn}
}

// TestSecuredReplay: a rewind and a re-drive through a broker that demands SCRAM over
// TLS (the secured Kafka when named), with the sidecar's settings; a wrong password is
// refused naming it, before anything.
func TestSecuredReplay(t *testing.T) {
	b, vars := testkit.NewSecuredBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512",
		Client: []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dlq := b.Topic(t, "in", 2), b.Topic(t, "dlq", 1)
	b.Produce(t, deadLetter(dlq, src, "1", "4", "boom"), deadLetter(dlq, src, "0", "7", "boom"))
	k := securedKafka(t, b, vars)

	var out bytes.Buffer
	sum, err := replay.Redrive(ctx, replay.RedriveOptions{Kafka: k, From: dlq, MinOffset: -1, MaxOffset: -1, Out: &out})
	if err != nil || sum.Redriven != 2 {
		t.Fatalf("Redrive = %+v, %v\n%s\nwant 2 re-driven", sum, err, out.String())
	}
	if got := b.ReadN(t, src, 2, time.Minute); len(got) != 2 {
		t.Errorf("%d records back in %s; want 2", len(got), src)
	}
	group := testkit.TopicName(t, "", "group")
	plan, err := replay.Rewind(ctx, replay.RewindOptions{Kafka: k, Group: group, Topics: []string{src}, To: replay.Target{Earliest: true}, Out: &out})
	if err != nil || len(plan) != 2 {
		t.Fatalf("Rewind = %+v, %v; want both partitions of %s", plan, err, src)
	}
	if got, err := b.Committed(ctx, group, src); err != nil || got[0] != 0 || got[1] != 0 {
		t.Errorf("committed = %v, %v; want 0 on both partitions", got, err)
	}

	delete(vars, "FLOW_KAFKA_SASL_PASSWORD_FILE")
	vars["FLOW_KAFKA_SASL_PASSWORD"] = "wrong"
	_, err = replay.Redrive(ctx, replay.RedriveOptions{Kafka: securedKafka(t, b, vars), From: dlq, Out: &out})
	var refused *kafkaconn.RefusedError
	if !errors.As(err, &refused) || refused.Setting != "FLOW_KAFKA_SASL_PASSWORD" {
		t.Errorf("Redrive with a wrong password = %v; want a refusal naming FLOW_KAFKA_SASL_PASSWORD", err)
	}
	if strings.Contains(out.String(), "wrong") {
		t.Errorf("the output shows the password:\n%s", out.String())
	}
}
