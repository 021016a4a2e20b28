package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/replay"
	"github.com/ankka-flow/millrace/internal/kafkaconn"
)

// int32List is a repeatable flag of partition numbers.
type int32List []int32

func (l *int32List) String() string { return fmt.Sprint([]int32(*l)) }
func (l *int32List) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a partition number", s)
	}
	*l = append(*l, int32(n))
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// runReplay runs `millrace replay rewind|dead-letters`: the logic is cmd/millrace/internal/replay's.
func runReplay(ctx context.Context, e *env, args []string) error {
	usage := "rewind|dead-letters [flags]\n\n" +
		"  rewind        set a stopped streamlet's consumer group back to a time or an offset\n" +
		"  dead-letters  send the records of a dead-letter topic back to the topics they came from\n\n" +
		"Both connect to --brokers (default $FLOW_BROKERS) with the sidecar's TLS and SASL settings,\n" +
		"its FLOW_KAFKA_* variables (docs/sidecar.md, \"Secured clusters\"), checked by one connection first.\n" +
		"Run 'millrace replay rewind -h' or 'millrace replay dead-letters -h' for their flags and those variables."
	if len(args) == 0 {
		fs := newFlagSet(e, "replay", usage)
		return fs.usageErr("name what to replay: rewind or dead-letters")
	}
	switch args[0] {
	case "rewind":
		return runRewind(ctx, e, args[1:])
	case "dead-letters":
		return runRedrive(ctx, e, args[1:])
	case "-h", "-help", "--help":
		fmt.Fprintf(e.stdout, "Usage: millrace replay %s\n", usage)
		return nil
	}
	return newFlagSet(e, "replay", usage).usageErr(fmt.Sprintf("unknown replay %q: want rewind or dead-letters", args[0]))
}

// replayKafkaHelp ends the help of both replays: the connection is the sidecar's.
var replayKafkaHelp = func() string {
	var b strings.Builder
	b.WriteString("\n\nThe connection's TLS and SASL come from the sidecar's variables:\n")
	for _, v := range kafkaconn.Vars {
		fmt.Fprintf(&b, "  %s (%s)\n    \t%s\n", v.Name, v.Default, v.Meaning)
	}
	return strings.TrimSuffix(b.String(), "\n")
}()

// replayKafka is the cluster the replay talks to: --brokers, and the FLOW_KAFKA_* settings
// read as the sidecar reads them.
func replayKafka(fs *flagSet, e *env, brokers string) (replay.Kafka, error) {
	var problems []string
	conn := kafkaconn.FromEnv(e.getenv, os.ReadFile, func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	})
	if len(problems) > 0 {
		return replay.Kafka{}, fs.usageErr("bad Kafka connection settings (fix these environment variables):\n  " + strings.Join(problems, "\n  "))
	}
	return replay.Kafka{Brokers: splitBrokers(brokers), Conn: conn}, nil
}

// replayErr makes a refused connection a plain exit 1 with its message.
func replayErr(err error) error {
	if errors.Is(err, replay.ErrActiveGroup) || errors.Is(err, replay.ErrStateful) || errors.Is(err, kafkaconn.ErrRefused) {
		return &exitError{code: 1, msg: err.Error()}
	}
	return err
}

func brokersFlag(fs *flagSet, e *env) *string {
	return fs.String("brokers", e.getenv("FLOW_BROKERS"), "Kafka bootstrap `BROKERS`, host:port separated by commas (default $FLOW_BROKERS)")
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func runRewind(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "replay rewind", "--group GROUP | --pipeline P --streamlet S  (--to-time RFC3339 | --to-offset N|earliest) [--topic T]… [--partition N]… [--keep-state] [--dry-run]\n\n"+
		"Sets the streamlet's consumer group back, on every partition of its topics (or those named),\n"+
		"to the first record at or after a time, to an offset, or to the earliest one. The streamlet\n"+
		"must be stopped: a group with members is refused. Bump FLOW_REPLAY_GENERATION on its bridge\n"+
		"so that the replayed records get new idempotency keys. A streamlet that keeps state (a compacted\n"+
		"GROUP.PORT.state or STREAMLET.PORT.state exists) is refused without --keep-state: its states\n"+
		"are not rewound."+replayKafkaHelp)
	brokers := brokersFlag(fs, e)
	group := fs.String("group", "", "the consumer `GROUP` (default <pipeline>.<streamlet>, as the sidecar's FLOW_CONSUMER_GROUP)")
	pipeline := fs.String("pipeline", "", "the streamlet's `PIPELINE`, for its default group")
	streamlet := fs.String("streamlet", "", "the `STREAMLET`, for its default group")
	toTime := fs.String("to-time", "", "rewind to the first record at or after `TIME` (RFC 3339, e.g. 2026-12-01T08:00:00Z)")
	toOffset := fs.String("to-offset", "", "rewind to `OFFSET` on every partition (clamped to the log), or earliest")
	var topics stringList
	var parts int32List
	fs.Var(&topics, "topic", "rewind only `TOPIC` (repeatable; default: every topic the group committed on)")
	fs.Var(&parts, "partition", "rewind only partition `N` (repeatable; default: all)")
	dryRun := fs.Bool("dry-run", false, "print the plan and change nothing")
	keepState := fs.Bool("keep-state", false, "rewind a streamlet that keeps state (--state) with its states as they are: the replayed records see today's states")
	resetState := fs.Bool("reset-state", false, "empty the streamlet's states as well (not built: Kafka refuses DeleteRecords on a compacted topic)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	switch {
	case *keepState && *resetState:
		return fs.usageErr("give --keep-state or --reset-state, not both")
	case *resetState:
		return &exitError{code: 1, msg: "--reset-state is not built: emptying a changelog with DeleteRecords, as designed, is refused by Kafka on a topic whose cleanup.policy is compact (docs/state.md, Open questions). Rewind with --keep-state, or stop the streamlet and delete and create its changelog topics again, then rewind with --keep-state"}
	}
	g := *group
	switch {
	case g != "" && (*pipeline != "" || *streamlet != ""):
		return fs.usageErr("give --group, or --pipeline and --streamlet, not both")
	case g == "" && (*pipeline == "" || *streamlet == ""):
		return fs.usageErr("name the consumer group: --group GROUP, or --pipeline P --streamlet S for <pipeline>.<streamlet>")
	case g == "":
		g = *pipeline + "." + *streamlet
	}
	to, err := replay.ParseTarget(*toTime, *toOffset)
	if err != nil {
		return fs.usageErr(strings.TrimPrefix(err.Error(), replay.ErrUsage.Error()+": "))
	}
	k, err := replayKafka(fs, e, *brokers)
	if err != nil {
		return err
	}
	_, err = replay.Rewind(ctx, replay.RewindOptions{
		Kafka: k, Group: g, Topics: topics, Partitions: parts, To: to, DryRun: *dryRun, Out: e.stdout,
		Streamlet: *streamlet, KeepState: *keepState,
	})
	return replayErr(err)
}

func runRedrive(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "replay dead-letters", "--from TOPIC [--source-topic T] [--min-offset N] [--max-offset N] [--error-contains TEXT] [--dry-run]\n\n"+
		"Reads the dead-letter topic up to its end and produces each dead letter that passes the\n"+
		"filters back to the topic and partition its millrace-source-* headers name, with its key,\n"+
		"value and own headers (the millrace-* headers stripped). The dead-letter topic is left as it is."+replayKafkaHelp)
	brokers := brokersFlag(fs, e)
	from := fs.String("from", "", "the dead-letter `TOPIC` to read")
	source := fs.String("source-topic", "", "only dead letters read from `TOPIC`")
	minOff := fs.Int64("min-offset", -1, "only dead letters whose source offset is at least `N`")
	maxOff := fs.Int64("max-offset", -1, "only dead letters whose source offset is at most `N`")
	errText := fs.String("error-contains", "", "only dead letters whose millrace-error contains `TEXT`")
	dryRun := fs.Bool("dry-run", false, "print what would be sent and send nothing")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *from == "" {
		return fs.usageErr("name the dead-letter topic with --from TOPIC")
	}
	k, err := replayKafka(fs, e, *brokers)
	if err != nil {
		return err
	}
	_, err = replay.Redrive(ctx, replay.RedriveOptions{
		Kafka: k, From: *from, SourceTopic: *source,
		MinOffset: *minOff, MaxOffset: *maxOff, ErrorContains: *errText, DryRun: *dryRun, Out: e.stdout,
	})
	return replayErr(err)
}
