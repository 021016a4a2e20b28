package main

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestReplayCommand: `millrace replay` wires its flags to internal/replay (the default group
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
	} {
		if code, _, errOut := runCmd(t, tt.args...); code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v = %d, %s; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}
