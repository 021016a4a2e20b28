package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/replay"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestReplayCommand: `millrace replay` wires its flags to cmd/millrace/internal/replay (the default group
// <pipeline>.<streamlet>, a dry run printing the plan) and says what is missing.
func TestReplayCommand(t *testing.T) {
	b := testkit.NewBroker(t, testkit.BrokerOptions{})
	topic := b.Topic(t, "in", 1)
	b.Produce(t, &kgo.Record{Topic: topic, Value: []byte("1")}, &kgo.Record{Topic: topic, Value: []byte("2")})
	code, out, errOut := runCmd(t, "replay", "rewind", "--brokers", strings.Join(b.Addrs, ","), "--pipeline", "pipe", "--streamlet", "score",
		"--topic", topic, "--to-offset", "earliest", "--dry-run")
	if code != 0 || !strings.Contains(out, "would rewind (dry run) group pipe.score to the earliest offset") || !strings.Contains(out, topic+"/0: none committed → 0") {
		t.Errorf("replay rewind --dry-run = %d\n%s%s\nwant the plan of pipe.score", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "replay", "dead-letters", "--brokers", strings.Join(b.Addrs, ","), "--from", topic, "--dry-run")
	if code != 0 || !strings.Contains(out, "done: 2 read, 0 re-driven, 0 left out by the filters, 2 without millrace-source-* headers") {
		t.Errorf("replay dead-letters --dry-run = %d\n%s%s\nwant a summary of 2 records that are no dead letters", code, out, errOut)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "name what to replay: rewind or dead-letters"},
		{[]string{"replay", "rewind", "--group", "g"}, "say where to rewind to"},
		{[]string{"replay", "rewind", "--to-offset", "earliest"}, "name the consumer group"},
		{[]string{"replay", "dead-letters"}, "name the dead-letter topic with --from TOPIC"},
		{[]string{"replay", "rewind", "--group", "g", "--to-offset", "0", "--keep-state", "--reset-state"}, "not both"},
	} {
		if code, _, errOut := runCmd(t, tt.args...); code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v = %d, %s; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
	// --reset-state is refused before anything is asked of Kafka, saying why it is not built.
	if code, _, errOut := runCmd(t, "replay", "rewind", "--brokers", strings.Join(b.Addrs, ","), "--group", "g", "--to-offset", "0", "--reset-state"); code != 1 || !strings.Contains(errOut, "DeleteRecords") || !strings.Contains(errOut, "--keep-state") {
		t.Errorf("replay rewind --reset-state = %d, %s; want 1, naming DeleteRecords and --keep-state", code, errOut)
	}
}

// TestReplayUnreachable: an address where nothing speaks Kafka (a listener that accepts and
// says nothing, a closed port) is one error naming it, within replay's reach timeout (5 s),
// not after the client's retries.
func TestReplayUnreachable(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, addr := range []string{silent.Addr().String(), closedAddr} {
		for _, args := range [][]string{
			{"replay", "rewind", "--brokers", addr, "--group", "g", "--to-offset", "earliest", "--dry-run"},
			{"replay", "dead-letters", "--brokers", addr, "--from", "t", "--dry-run"},
		} {
			code, _, errOut := runCmd(t, args...)
			if want := "no Kafka broker answers at " + addr; code != 1 || !strings.Contains(errOut, want) {
				t.Errorf("%v = %d, %q; want 1 and %q", args, code, errOut, want)
			}
		}
	}
	_, err = replay.Rewind(context.Background(), replay.RewindOptions{Kafka: replay.Kafka{Brokers: []string{silent.Addr().String()}}, Group: "g", To: replay.Target{Earliest: true}, DryRun: true})
	if !errors.Is(err, replay.ErrUnreachable) {
		t.Errorf("Rewind(silent listener) = %v; want ErrUnreachable", err)
	}
}

// TestReplayHelpNamesTheConnection: `millrace replay -h` says that both replays take the
// sidecar's TLS and SASL settings, and each replay's -h lists those variables.
func TestReplayHelpNamesTheConnection(t *testing.T) {
	code, out, _ := runCmd(t, "replay", "-h")
	if code != 0 || !strings.Contains(out, "the sidecar's TLS and SASL settings") || !strings.Contains(out, "FLOW_KAFKA_*") {
		t.Errorf("replay -h = %d:\n%s\nwant the sidecar's TLS and SASL settings (FLOW_KAFKA_*) named", code, out)
	}
	for _, sub := range []string{"rewind", "dead-letters"} {
		_, out, _ := runCmd(t, "replay", sub, "-h")
		for _, v := range []string{"FLOW_KAFKA_TLS", "FLOW_KAFKA_SASL_MECHANISM", "FLOW_KAFKA_SASL_PASSWORD_FILE"} {
			if !strings.Contains(out, v) {
				t.Errorf("replay %s -h does not list %s:\n%s", sub, v, out)
			}
		}
	}
}
