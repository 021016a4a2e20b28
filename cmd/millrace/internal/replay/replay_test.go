package replay_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/replay"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil, nil) }

func newBroker(t *testing.T) *testkit.Broker {
	return testkit.NewBroker(t, testkit.BrokerOptions{Client: []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}})
}

// TestRewind: a group with a member is refused, naming it; once it left, a dry run prints the
// plan and changes nothing, and a rewind to a time, an offset (clamped to the log) or the
// earliest offset commits the target on every partition.
func TestRewind(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := b.Topic(t, "in", 2)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := range int32(2) {
		for i := range 5 {
			b.Produce(t, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v"), Timestamp: base.Add(time.Duration(i) * time.Minute)})
		}
	}
	group := testkit.TopicName(t, "", "group")

	// The streamlet's sidecar: a member that read and committed everything.
	member, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("sidecar-test"))
	if err != nil {
		t.Fatal(err)
	}
	for read := 0; read < 10; {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the member read %d of 10 records", read)
		}
		read += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	k := replay.Kafka{Brokers: b.Addrs}
	_, err = replay.Rewind(ctx, replay.RewindOptions{Kafka: k, Group: group, To: replay.Target{Earliest: true}})
	if !errors.Is(err, replay.ErrActiveGroup) || !strings.Contains(err.Error(), "sidecar-test") || !strings.Contains(err.Error(), "stop the streamlet first") {
		t.Fatalf("Rewind of an active group = %v; want ErrActiveGroup naming its member and the way out", err)
	}
	member.Close() // leaves the group

	check := func(want int64) {
		t.Helper()
		got, err := b.Committed(ctx, group, topic)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want || got[1] != want {
			t.Fatalf("committed = %v; want %d on both partitions", got, want)
		}
	}
	var out bytes.Buffer
	plan, err := replay.Rewind(ctx, replay.RewindOptions{Kafka: k, Group: group, To: replay.Target{Time: base.Add(2 * time.Minute)}, DryRun: true, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].From != 5 || plan[0].To != 2 || !strings.Contains(out.String(), "would rewind (dry run)") || !strings.Contains(out.String(), topic+"/1: 5 → 2") {
		t.Fatalf("dry run = %+v, printed\n%s\nwant both partitions from 5 to 2", plan, out.String())
	}
	check(5)

	for _, tt := range []struct {
		to     replay.Target
		parts  []int32
		want   int64
		output string
	}{
		{to: replay.Target{Time: base.Add(2 * time.Minute)}, want: 2, output: "FLOW_REPLAY_GENERATION"},
		{to: replay.Target{Offset: 4}, want: 4},
		{to: replay.Target{Offset: 99}, want: 5, output: "offset 99 is past the end, 5"},
		{to: replay.Target{Earliest: true}, want: 0},
		{to: replay.Target{Time: base.Add(time.Hour)}, want: 5}, // after the last record: the end
	} {
		out.Reset()
		if _, err := replay.Rewind(ctx, replay.RewindOptions{Kafka: k, Group: group, Topics: []string{topic}, To: tt.to, Out: &out}); err != nil {
			t.Fatalf("Rewind to %s = %v", tt.to, err)
		}
		check(tt.want)
		if !strings.Contains(out.String(), tt.output) {
			t.Errorf("Rewind to %s printed\n%s\nwant %q", tt.to, out.String(), tt.output)
		}
	}
	if _, err := replay.Rewind(ctx, replay.RewindOptions{Kafka: k, Group: group, Partitions: []int32{1}, To: replay.Target{Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Committed(ctx, group, topic); got[0] != 5 || got[1] != 1 {
		t.Errorf("after a rewind of partition 1 only: committed = %v; want 0:5 1:1", got)
	}
}

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct{ toTime, toOffset, want string }{
		{"2026-12-01T08:00:00Z", "", "the first record at or after 2026-12-01T08:00:00Z"},
		{"", "earliest", "the earliest offset"},
		{"", "42", "offset 42"},
	} {
		if got, err := replay.ParseTarget(tt.toTime, tt.toOffset); err != nil || got.String() != tt.want {
			t.Errorf("ParseTarget(%q, %q) = %v, %v; want %s", tt.toTime, tt.toOffset, got, err, tt.want)
		}
	}
	for _, bad := range [][2]string{{"", ""}, {"yesterday", ""}, {"", "-3"}, {"2026-12-01T08:00:00Z", "1"}} {
		if _, err := replay.ParseTarget(bad[0], bad[1]); !errors.Is(err, replay.ErrUsage) {
			t.Errorf("ParseTarget(%q, %q) = %v; want ErrUsage", bad[0], bad[1], err)
		}
	}
}

func h(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// deadLetter is a record as the bridge dead-letters it.
func deadLetter(dlq, src, partition, offset, errText string, own ...kgo.RecordHeader) *kgo.Record {
	hs := append(own, h("millrace-error", errText), h("millrace-attempts", "4"),
		h("millrace-source-topic", src), h("millrace-source-partition", partition), h("millrace-source-offset", offset))
	return &kgo.Record{Topic: dlq, Key: []byte("k" + offset), Value: []byte(`{"n":` + offset + `}`), Headers: hs}
}

// TestRedrive: dead letters go back to the topic and partition their headers name, with their
// key, value and own headers, the millrace-* headers stripped; filters pick by source topic,
// offset range and error text; a dry run sends nothing; a record that is no dead letter is
// counted and left alone.
func TestRedrive(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dlq, src, other := b.Topic(t, "dlq", 1), b.Topic(t, "src", 2), b.Topic(t, "other", 1)
	b.Produce(t,
		deadLetter(dlq, src, "1", "7", "engine: item timed out", h("trace", "t1")),
		deadLetter(dlq, src, "0", "8", "cannot score this listing"),
		deadLetter(dlq, src, "1", "30", "engine: item timed out"),
		deadLetter(dlq, other, "0", "9", "engine: item timed out"),
		&kgo.Record{Topic: dlq, Value: []byte(`"not a dead letter"`)},
	)
	k := replay.Kafka{Brokers: b.Addrs}
	var out bytes.Buffer
	sum, err := replay.Redrive(ctx, replay.RedriveOptions{Kafka: k, From: dlq, SourceTopic: src, MinOffset: -1, MaxOffset: 20, ErrorContains: "timed out", DryRun: true, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Read != 5 || sum.Redriven != 1 || sum.Filtered != 3 || sum.NotDeadLetters != 1 || !strings.Contains(out.String(), "→ "+src+"/1 (was offset 7)") {
		t.Fatalf("dry run: %s, printed\n%s\nwant 5 read, 1 to re-drive (%s/1 offset 7), 3 filtered, 1 no dead letter", sum, out.String(), src)
	}
	if n := b.Count(t, src); n != 0 {
		t.Fatalf("a dry run produced %d records to %s", n, src)
	}

	out.Reset()
	sum, err = replay.Redrive(ctx, replay.RedriveOptions{Kafka: k, From: dlq, SourceTopic: src, MinOffset: -1, MaxOffset: -1, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Redriven != 3 || sum.ByTopic[src] != 3 || !strings.Contains(out.String(), "done: 5 read, 3 re-driven (3 to "+src+")") {
		t.Fatalf("re-drive: %s, printed\n%s\nwant 3 re-driven to %s", sum, out.String(), src)
	}
	got := b.ReadAll(t, src)
	byOffset := map[string]*kgo.Record{}
	for _, r := range got {
		byOffset[string(r.Key)] = r
	}
	r7 := byOffset["k7"]
	if len(got) != 3 || r7 == nil || r7.Partition != 1 || byOffset["k8"].Partition != 0 || string(r7.Value) != `{"n":7}` {
		t.Fatalf("%s holds %d records (k7: %+v); want k7 and k30 on partition 1, k8 on 0, values unchanged", src, len(got), r7)
	}
	if len(r7.Headers) != 1 || r7.Headers[0].Key != "trace" || string(r7.Headers[0].Value) != "t1" {
		t.Errorf("re-driven headers = %v; want only the record's own trace header", r7.Headers)
	}
	if n := b.Count(t, other); n != 0 {
		t.Errorf("%d records re-driven to %s, left out by --source-topic", n, other)
	}
	if n := b.Count(t, dlq); n != 5 {
		t.Errorf("the dead-letter topic holds %d records; want its 5 left as they were", n)
	}
}

// TestRewindStateful: a group whose streamlet keeps state (a compacted GROUP.PORT.state, or
// STREAMLET.PORT.state given the streamlet) is refused without KeepState, naming the changelog
// and why, its offsets unchanged; with KeepState it is rewound and the plan says the states
// stay. A topic so named but not compacted is no changelog.
func TestRewindStateful(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := b.Topic(t, "in", 2)
	for p := range int32(2) {
		b.Produce(t, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")}, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")})
	}
	group := testkit.TopicName(t, "", "group")
	streamlet := testkit.TopicName(t, "", "count")
	member, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	for read := 0; read < 4; {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the member read %d of 4 records", read)
		}
		read += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	member.Close()
	k := replay.Kafka{Brokers: b.Addrs}
	rewind := func(o replay.RewindOptions, to int64) (string, error) {
		var out bytes.Buffer
		o.Kafka, o.Group, o.Topics, o.To, o.Out = k, group, []string{topic}, replay.Target{Offset: to}, &out
		_, err := replay.Rewind(ctx, o)
		return out.String(), err
	}
	committedAt := func(want int64) {
		t.Helper()
		if got, err := b.Committed(ctx, group, topic); err != nil || got[0] != want || got[1] != want {
			t.Fatalf("committed = %v (%v); want %d on both partitions", got, err, want)
		}
	}

	// Not compacted: an ordinary topic that happens to be named so.
	if err := b.CreateTopic(ctx, group+".audit.state", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := rewind(replay.RewindOptions{Streamlet: streamlet}, 1); err != nil {
		t.Fatalf("Rewind with a delete-policy %s.audit.state = %v; want no refusal", group, err)
	}
	committedAt(1)

	for _, tt := range []struct {
		changelog string
		opts      replay.RewindOptions
	}{
		{streamlet + ".events.state", replay.RewindOptions{Streamlet: streamlet}}, // millrace run's name
		{group + ".events.state", replay.RewindOptions{}},                         // describe's suggestion
	} {
		if err := b.CreateTopic(ctx, tt.changelog, 2, "cleanup.policy", "compact"); err != nil {
			t.Fatal(err)
		}
		_, err := rewind(tt.opts, 0)
		if !errors.Is(err, replay.ErrStateful) || !strings.Contains(err.Error(), tt.changelog) || !strings.Contains(err.Error(), "--keep-state") || !strings.Contains(err.Error(), "DeleteRecords") {
			t.Fatalf("Rewind with changelog %s = %v; want ErrStateful naming it, --keep-state and why --reset-state is not built", tt.changelog, err)
		}
		committedAt(1)
		tt.opts.KeepState = true
		out, err := rewind(tt.opts, 0)
		if err != nil || !strings.Contains(out, "--keep-state: the states in "+tt.changelog) {
			t.Fatalf("Rewind --keep-state with changelog %s = %v, printed\n%s\nwant the rewind, saying the states stay", tt.changelog, err, out)
		}
		committedAt(0)
		if _, err := rewind(tt.opts, 1); err != nil {
			t.Fatal(err)
		}
	}
}
