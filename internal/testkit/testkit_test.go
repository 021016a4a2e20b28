package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestSyncBuffer(t *testing.T) {
	var b testkit.SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { fmt.Fprint(&b, "ab") })
	}
	wg.Wait()
	if got := len(b.String()); got != 16 {
		t.Errorf("len(String()) = %d; want 16 after 8 writes of 2 bytes", got)
	}
}

func TestLogsKeepTheErrorChain(t *testing.T) {
	cause := errors.New("the cause")
	logs := testkit.NewLogs(slog.NewTextHandler(&testkit.SyncBuffer{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log := slog.New(logs).With("part", "test")
	log.Debug("failed", "error", cause) // below the text handler's level: not kept
	log.Error("failed", "error", fmt.Errorf("wrapped: %w", cause))
	log.Error("other", "error", cause)
	errs := logs.Errors("failed")
	if len(errs) != 1 || !errors.Is(errs[0], cause) {
		t.Errorf("Errors(failed) = %v; want the one error at error level, wrapping the cause", errs)
	}
	if errs := logs.Errors(""); len(errs) != 2 || !errors.Is(errs[1], cause) {
		t.Errorf("Errors(\"\") = %v; want both errors at error level", errs)
	}
	log.Info("said", "n", 3, "name", "x")
	if got := logs.Attrs("said"); len(got) != 1 || got[0]["n"] != int64(3) || got[0]["name"] != "x" || got[0]["part"] != "test" {
		t.Errorf("Attrs(said) = %v; want n 3, name x and part test", got)
	}
}

func TestBroker(t *testing.T) {
	b := testkit.NewBroker(t, testkit.BrokerOptions{Client: []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}})
	topic := b.Topic(t, "t", 2)
	if ps := b.Partitions(context.Background(), topic); len(ps) != 2 {
		t.Fatalf("Partitions = %v; want 2", ps)
	}
	b.Produce(t, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("a")}, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("b")})
	if n := b.Count(t, topic); n != 2 {
		t.Errorf("Count = %d; want 2", n)
	}
	if got := b.ReadAll(t, topic); len(got) != 2 || string(got[1].Value) != "b" {
		t.Errorf("ReadAll = %d records; want a, b", len(got))
	}
	if got, err := b.Committed(context.Background(), "no-such-group", topic); err != nil || len(got) != 0 {
		t.Errorf("Committed(unknown group) = %v, %v; want none", got, err)
	}
}

func TestRestartKfakeKeepsTheData(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "")
	b := testkit.NewBroker(t, testkit.BrokerOptions{Restartable: true, Client: []kgo.Opt{kgo.DefaultProduceTopic("")}})
	topic := b.Topic(t, "t", 1)
	b.Produce(t, &kgo.Record{Topic: topic, Value: []byte("kept")})
	addrs := b.Addrs
	b.RestartKfake(t, 0)
	if b.Addrs[0] != addrs[0] {
		t.Errorf("restarted on %v; want %v", b.Addrs, addrs)
	}
	if got := b.ReadN(t, topic, 1, testkitWait); string(got[0].Value) != "kept" {
		t.Errorf("read %q after the restart; want kept", got[0].Value)
	}
}

const testkitWait = 30 * time.Second
