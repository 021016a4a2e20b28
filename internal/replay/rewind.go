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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrActiveGroup is returned by Rewind when the group has members: offsets can be set only
// while nobody consumes.
var ErrActiveGroup = errors.New("replay: the consumer group has active members")

// ErrUsage marks a mistake in what was asked (a bad target, a filter that matches nothing).
var ErrUsage = errors.New("replay: usage")

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
	if err := o.check(ctx); err != nil {
		return nil, err
	}
	cl, err := o.client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	g, err := describeGroup(ctx, cl, o.Group)
	if err != nil {
		return nil, err
	}
	if len(g.members) > 0 {
		return nil, fmt.Errorf("%w: group %s is %s with %d member(s) (%s): stop the streamlet first (scale its deployment to 0 and wait for its sidecars to leave), then rewind; offsets can only be set while nobody consumes",
			ErrActiveGroup, o.Group, strings.ToLower(g.state), len(g.members), strings.Join(g.members, ", "))
	}
	have, err := committed(ctx, cl, o.Group)
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
		moves, err := planTopic(ctx, o, cl, topic, have[topic])
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
	for _, m := range plan {
		from := "none committed"
		if m.From >= 0 {
			from = strconv.FormatInt(m.From, 10)
		}
		line := fmt.Sprintf("  %s/%d: %s → %d", m.Topic, m.Partition, from, m.To)
		switch {
		case m.From > m.To:
			line += fmt.Sprintf(" (%d records read again)", m.From-m.To)
		case m.From >= 0 && m.From < m.To:
			line += fmt.Sprintf(" (%d records skipped)", m.To-m.From)
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
	if err := commit(ctx, cl, o.Group, plan); err != nil {
		return plan, err
	}
	fmt.Fprintf(out, "rewound %d partition(s) of group %s. Before starting the streamlet again, bump FLOW_REPLAY_GENERATION on its bridge if systems downstream deduplicate on idempotencyKey: the replayed records then get new keys.\n", len(plan), o.Group)
	return plan, nil
}

// planTopic computes the moves of one topic's partitions.
func planTopic(ctx context.Context, o RewindOptions, cl *kgo.Client, topic string, have map[int32]int64) ([]Move, error) {
	ps, err := partitions(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	if len(o.Partitions) > 0 {
		ps = slices.DeleteFunc(ps, func(p int32) bool { return !slices.Contains(o.Partitions, p) })
	}
	if len(ps) == 0 {
		return nil, nil
	}
	starts, err := listOffsets(ctx, cl, topic, ps, -2)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(ctx, cl, topic, ps, -1)
	if err != nil {
		return nil, err
	}
	var to map[int32]int64
	switch {
	case o.To.Earliest:
		to = starts
	case !o.To.Time.IsZero():
		if to, err = listOffsets(ctx, cl, topic, ps, o.To.Time.UnixMilli()); err != nil {
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
func commit(ctx context.Context, cl *kgo.Client, group string, plan []Move) error {
	ids, names, err := topicIDs(ctx, cl)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	byTopic := map[string]int{}
	for _, m := range plan {
		i, ok := byTopic[m.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[m.Topic] = i
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic, rt.TopicID = m.Topic, ids[m.Topic]
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = m.Partition, m.To, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("replay: committing the offsets of group %s: %w", group, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == "" {
			t.Topic = names[t.TopicID]
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
					return fmt.Errorf("%w: group %s: committing %s/%d: %w (a member joined meanwhile: stop the streamlet and try again)", ErrActiveGroup, group, t.Topic, p.Partition, err)
				}
				return fmt.Errorf("replay: group %s: committing %s/%d: %w", group, t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}
