package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Target is where a rewind goes on each partition: the first record at or after Time, the
// offset Offset, or the log start (Earliest). Exactly one is set.
type Target struct {
	Time     time.Time
	Offset   int64 // used when Time is zero and Earliest is false
	Earliest bool
}

// ParseTarget reads --to-time (RFC 3339) and --to-offset (a whole number, or earliest):
// exactly one must be given.
func ParseTarget(toTime, toOffset string) (Target, error) {
	switch {
	case toTime != "" && toOffset != "":
		return Target{}, fmt.Errorf("%w: give --to-time or --to-offset, not both", ErrUsage)
	case toTime != "":
		t, err := time.Parse(time.RFC3339, toTime)
		if err != nil {
			return Target{}, fmt.Errorf("%w: --to-time %q is not an RFC 3339 time such as 2026-12-01T08:00:00Z", ErrUsage, toTime)
		}
		return Target{Time: t}, nil
	case toOffset == "earliest":
		return Target{Earliest: true}, nil
	case toOffset != "":
		n, err := strconv.ParseInt(toOffset, 10, 64)
		if err != nil || n < 0 {
			return Target{}, fmt.Errorf("%w: --to-offset %q is neither a whole number nor earliest", ErrUsage, toOffset)
		}
		return Target{Offset: n}, nil
	}
	return Target{}, fmt.Errorf("%w: say where to rewind to: --to-time RFC3339, --to-offset N or --to-offset earliest", ErrUsage)
}

func (t Target) String() string {
	switch {
	case t.Earliest:
		return "the earliest offset"
	case !t.Time.IsZero():
		return "the first record at or after " + t.Time.UTC().Format(time.RFC3339)
	}
	return "offset " + strconv.FormatInt(t.Offset, 10)
}

// RewindOptions say which group to rewind, on which partitions, to where.
type RewindOptions struct {
	Kafka
	Group      string   // the streamlet's consumer group (required)
	Topics     []string // none: every topic the group has committed offsets on
	Partitions []int32  // none: every partition of those topics
	To         Target
	DryRun     bool      // print the plan, change nothing
	Out        io.Writer // the plan and the outcome (nil: discarded)
	// Streamlet is the streamlet's name when known: its changelogs as millrace run names them
	// (STREAMLET.PORT.state) are looked for too, beside GROUP.PORT.state.
	Streamlet string
	// KeepState rewinds a streamlet that keeps state, its states left as they are: the
	// replayed records see today's states. Without it such a rewind is refused (ErrStateful).
	KeepState bool
}

// Move is the rewind of one partition.
type Move struct {
	Topic     string
	Partition int32
	From      int64 // the committed offset before, -1 when none was
	To        int64
	Note      string // why To differs from what was asked (clamped to the log)
}

// Rewind sets the group's committed offsets to the target on every partition asked, after
// checking that the group has no active member; with DryRun it only prints the plan. It
// returns the plan.
func Rewind(ctx context.Context, o RewindOptions) ([]Move, error) {
	if o.Group == "" {
		return nil, fmt.Errorf("%w: name the consumer group (--group, or --pipeline and --streamlet)", ErrUsage)
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	cl, err := o.client(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	g, err := describeGroup(ctx, adm, o.Group)
	if err != nil {
		return nil, err
	}
	if len(g.members) > 0 {
		return nil, fmt.Errorf("%w: group %s is %s with %d member(s) (%s): stop the streamlet first (scale its deployment to 0 and wait for its sidecars to leave), then rewind; offsets can only be set while nobody consumes",
			ErrActiveGroup, o.Group, strings.ToLower(g.state), len(g.members), strings.Join(g.members, ", "))
	}
	prefixes := []string{o.Group}
	if o.Streamlet != "" {
		prefixes = append(prefixes, o.Streamlet)
	}
	kept, err := changelogs(ctx, adm, prefixes)
	if err != nil {
		return nil, err
	}
	if len(kept) > 0 && !o.KeepState {
		return nil, fmt.Errorf("%w: group %s keeps state in %s, and rewinding offsets does not rewind state: the replayed records would see the states their first run left (a running count counts them again, a dedup drops them). Give --keep-state to rewind with the states as they are; emptying them (--reset-state) is not built, since Kafka refuses DeleteRecords on a compacted topic (docs/state.md, Open questions)",
			ErrStateful, o.Group, strings.Join(kept, ", "))
	}
	have, err := committed(ctx, adm, o.Group)
	if err != nil {
		return nil, err
	}
	topics := o.Topics
	if len(topics) == 0 {
		for t := range have {
			topics = append(topics, t)
		}
		slices.Sort(topics)
		if len(topics) == 0 {
			return nil, fmt.Errorf("%w: group %s has no committed offsets: name the topics to rewind with --topic", ErrUsage, o.Group)
		}
	}
	var plan []Move
	for _, topic := range topics {
		moves, err := planTopic(ctx, o, adm, topic, have[topic])
		if err != nil {
			return nil, err
		}
		plan = append(plan, moves...)
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("%w: no partition of %s matches --partition %v", ErrUsage, strings.Join(topics, ", "), o.Partitions)
	}
	verb := "rewinding"
	if o.DryRun {
		verb = "would rewind (dry run)"
	}
	fmt.Fprintf(out, "%s group %s to %s:\n", verb, o.Group, o.To)
	if len(kept) > 0 {
		fmt.Fprintf(out, "  (--keep-state: the states in %s stay as they are; replayed records see them)\n", strings.Join(kept, ", "))
	}
	for _, m := range plan {
		from := "none committed"
		if m.From >= 0 {
			from = strconv.FormatInt(m.From, 10)
		}
		line := fmt.Sprintf("  %s/%d: %s → %d", m.Topic, m.Partition, from, m.To)
		switch {
		case m.From > m.To:
			line += fmt.Sprintf(" (%s read again)", plural(m.From-m.To, "record", "records"))
		case m.From >= 0 && m.From < m.To:
			line += fmt.Sprintf(" (%s skipped)", plural(m.To-m.From, "record", "records"))
		case m.From == m.To:
			line += " (unchanged)"
		}
		if m.Note != "" {
			line += "; " + m.Note
		}
		fmt.Fprintln(out, line)
	}
	if o.DryRun {
		return plan, nil
	}
	if err := commit(ctx, adm, o.Group, plan); err != nil {
		return plan, err
	}
	fmt.Fprintf(out, "rewound %d partition(s) of group %s. Before starting the streamlet again, bump FLOW_REPLAY_GENERATION on its bridge if systems downstream deduplicate on idempotencyKey: the replayed records then get new keys.\n", len(plan), o.Group)
	return plan, nil
}

// planTopic computes the moves of one topic's partitions.
func planTopic(ctx context.Context, o RewindOptions, adm *kadm.Client, topic string, have map[int32]int64) ([]Move, error) {
	ps, err := partitions(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	if len(o.Partitions) > 0 {
		ps = slices.DeleteFunc(ps, func(p int32) bool { return !slices.Contains(o.Partitions, p) })
	}
	if len(ps) == 0 {
		return nil, nil
	}
	starts, err := listOffsets(ctx, adm, topic, ps, -2)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(ctx, adm, topic, ps, -1)
	if err != nil {
		return nil, err
	}
	var to map[int32]int64
	switch {
	case o.To.Earliest:
		to = starts
	case !o.To.Time.IsZero():
		if to, err = listOffsets(ctx, adm, topic, ps, o.To.Time.UnixMilli()); err != nil {
			return nil, err
		}
	}
	var moves []Move
	for _, p := range ps {
		m := Move{Topic: topic, Partition: p, From: -1}
		if c, ok := have[p]; ok {
			m.From = c
		}
		if to != nil {
			m.To = to[p]
		} else {
			m.To = o.To.Offset
			switch {
			case m.To < starts[p]:
				m.To, m.Note = starts[p], fmt.Sprintf("offset %d is before the log start, %d", o.To.Offset, starts[p])
			case m.To > ends[p]:
				m.To, m.Note = ends[p], fmt.Sprintf("offset %d is past the end, %d", o.To.Offset, ends[p])
			}
		}
		moves = append(moves, m)
	}
	return moves, nil
}

// commit commits the plan's offsets for the group as an admin does: no generation, no member
// (Kafka accepts it only while the group is empty).
func commit(ctx context.Context, adm *kadm.Client, group string, plan []Move) error {
	var offsets kadm.Offsets
	for _, m := range plan {
		offsets.AddOffset(m.Topic, m.Partition, m.To, -1)
	}
	resps, err := adm.CommitOffsets(ctx, group, offsets)
	if err != nil {
		return fmt.Errorf("committing the offsets of group %s: %w", group, err)
	}
	for _, o := range resps.Sorted() {
		if err := o.Err; err != nil {
			if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
				return fmt.Errorf("%w: group %s: committing %s/%d: %w (a member joined meanwhile: stop the streamlet and try again)", ErrActiveGroup, group, o.Topic, o.Partition, err)
			}
			return fmt.Errorf("group %s: committing %s/%d: %w", group, o.Topic, o.Partition, err)
		}
	}
	return nil
}

// plural is n with the noun that fits it: "1 item", "2 items".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
