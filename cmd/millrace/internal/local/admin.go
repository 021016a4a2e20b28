package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopics creates every bound topic; one that exists is left as it is.
func (r *runner) createTopics(ctx context.Context, partitionsGiven bool) error {
	seen := map[string]bool{r.p.Input: true}
	topics := []string{r.p.Input}
	for _, s := range r.p.Streamlets {
		for _, t := range s.Bindings {
			if !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	sort.Strings(topics)
	// At the broker's defaults, as a user's cluster has them: an emit too large for a default
	// topic is refused here as it would be there (the sidecar reads the limit at each start).
	resps, err := r.adm.CreateTopics(ctx, int32(r.opts.Partitions), -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("creating the topics %s: %w (is the broker reachable?)", strings.Join(topics, ", "), err)
	}
	var existing []string
	for _, t := range resps.Sorted() {
		switch {
		case errors.Is(t.Err, kerr.TopicAlreadyExists):
			existing = append(existing, t.Topic)
		case t.Err != nil:
			return fmt.Errorf("creating topic %s: %w", t.Topic, t.Err)
		}
	}
	if err := r.awaitTopics(ctx, topics); err != nil {
		return err
	}
	if !partitionsGiven || len(existing) == 0 {
		return nil
	}
	// an existing topic keeps its partitions: a --partitions that differs is said, not ignored
	parts, err := r.partitions(ctx, existing)
	if err != nil {
		return err
	}
	for _, t := range existing {
		if n := len(parts[t]); n != r.opts.Partitions {
			where := "on the brokers"
			if r.opts.DataDir != "" {
				where = "in --data " + r.opts.DataDir
			}
			return fmt.Errorf("--partitions %d, but topic %s exists %s with %d: partitions are set when a topic is created; use a new --data folder, or leave --partitions out", r.opts.Partitions, t, where, n)
		}
	}
	return nil
}

// topicWait bounds the wait for created topics to show in the cluster's metadata.
const topicWait = 30 * time.Second

// awaitTopics waits until the cluster's metadata shows every topic of topics with a leader for
// each of its partitions. A real cluster creates a topic asynchronously: for a moment after
// CreateTopics answered, its brokers may answer UNKNOWN_TOPIC_OR_PARTITION or
// LEADER_NOT_AVAILABLE for it (the in-process broker never does). A non-retriable error is
// returned at once; a topic still missing after topicWait is an error naming it.
func (r *runner) awaitTopics(ctx context.Context, topics []string) error {
	deadline := time.Now().Add(topicWait)
	wait := 10 * time.Millisecond
	for {
		err := r.topicsReady(ctx, topics)
		if err == nil || !kerr.IsRetriable(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w, %v after it was created: is every broker of the cluster up?", err, topicWait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// topicsReady returns nil when the metadata shows every topic with a leader for each
// partition, else the first topic's error (retriable while the cluster is still creating it).
//
// It asks the brokers with a raw Metadata request: kadm's Metadata and ListTopics answer from
// the client's metadata cache, which keeps a topic's UNKNOWN_TOPIC_OR_PARTITION for
// MetadataMinAge (5 s), so each poll would see the first answer again. The request refreshes
// that cache too, for the kadm calls after it.
func (r *runner) topicsReady(ctx context.Context, topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := req.RequestWith(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("topic metadata: %w", err)
	}
	shown := map[string]bool{}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("topic %s: %w", deref(t.Topic), err)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("topic %s has no partitions yet: %w", deref(t.Topic), kerr.LeaderNotAvailable)
		}
		for _, p := range t.Partitions {
			if p.Leader < 0 || p.ErrorCode == kerr.LeaderNotAvailable.Code {
				return fmt.Errorf("topic %s partition %d has no leader yet: %w", deref(t.Topic), p.Partition, kerr.LeaderNotAvailable)
			}
		}
		shown[deref(t.Topic)] = true
	}
	for _, t := range topics {
		if !shown[t] {
			return fmt.Errorf("topic %s: %w", t, kerr.UnknownTopicOrPartition)
		}
	}
	return nil
}

// partitions returns the partitions of each topic, from the cluster's metadata.
func (r *runner) partitions(ctx context.Context, topics []string) (map[string][]int32, error) {
	tds, err := r.adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("topic metadata: %w", err)
	}
	out := map[string][]int32{}
	for _, t := range tds.Sorted() {
		if t.Err != nil {
			return nil, fmt.Errorf("topic %s: %w", t.Topic, t.Err)
		}
		out[t.Topic] = t.Partitions.Numbers()
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// endOffsets returns the end offset of every partition of topics.
func (r *runner) endOffsets(ctx context.Context, topics []string) (map[string]map[int32]int64, error) {
	listed, err := r.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	out := map[string]map[int32]int64{}
	var failed error
	listed.Each(func(o kadm.ListedOffset) {
		switch {
		case failed != nil:
		case o.Err != nil && o.Partition < 0: // kadm's entry for a topic it could not list
			failed = fmt.Errorf("topic %s: %w", o.Topic, o.Err)
		case o.Err != nil:
			failed = fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
		default:
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = o.Offset
		}
	})
	if failed != nil {
		return nil, failed
	}
	return out, nil
}

// committed returns the offsets a streamlet's consumer group committed on its inlets (a
// partition whose offset the group cannot fetch is left out: nothing committed).
func (r *runner) committed(ctx context.Context, st *running) (map[string]map[int32]int64, error) {
	fetched, err := r.adm.FetchOffsets(ctx, st.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil // the group has not joined yet: nothing committed
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", st.group, err)
	}
	out := map[string]map[int32]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.At
	})
	return out, nil
}

// uncommitted returns how many records of the streamlets' inlets are not committed yet, over
// every streamlet (in exactly-once mode an inner topic's transaction markers left out, as in
// caughtUp).
func (r *runner) uncommitted(ctx context.Context) (int64, error) {
	var topics []string
	for _, st := range r.streamlets {
		topics = append(topics, st.s.Inlets()...)
	}
	slices.Sort(topics)
	ends, err := r.endOffsets(ctx, slices.Compact(topics))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, st := range r.streamlets {
		c, err := r.committed(ctx, st)
		if err != nil {
			return 0, err
		}
		for _, t := range st.s.Inlets() {
			_, written := r.outlets[t]
			for p, end := range ends[t] {
				if r.opts.ExactlyOnce && written {
					r.mu.Lock()
					end = r.data[t][p]
					r.mu.Unlock()
				}
				n += max(end-max(c[t][p], 0), 0)
			}
		}
	}
	return n, nil
}

// caughtUp reports whether every streamlet started a conversation, committed everything on
// its inlets, and the printer read everything on the outlets. A streamlet whose sidecar has
// not started one yet is not caught up even with nothing to commit: its discovery may still
// be refused (an empty input is caught up at once, before any discovery answered). Commits
// are read before end offsets: a commit comes after its emits were written, so every emit of
// a commit seen here is under the end offsets read after it. In exactly-once mode an inlet
// another streamlet writes ends with a transaction's marker, which no commit covers: there the
// commit must reach the last record the printer read, and the printer the end.
func (r *runner) caughtUp(ctx context.Context) (bool, error) {
	for _, st := range r.streamlets {
		if st.sc.Conversations() == 0 {
			return false, nil
		}
	}
	commits := map[*running]map[string]map[int32]int64{}
	for _, st := range r.streamlets {
		c, err := r.committed(ctx, st)
		if err != nil {
			return false, err
		}
		commits[st] = c
	}
	var topics []string
	for _, st := range r.streamlets {
		topics = append(topics, st.s.Inlets()...)
	}
	for t := range r.outlets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	ends, err := r.endOffsets(ctx, slices.Compact(topics))
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.streamlets {
		for _, t := range st.s.Inlets() {
			_, written := r.outlets[t]
			for p, end := range ends[t] {
				c, ok := commits[st][t][p]
				if !ok || c < 0 {
					c = 0
				}
				if r.opts.ExactlyOnce && written {
					end = r.data[t][p]
				}
				if c < end {
					return false, nil
				}
			}
		}
	}
	for t := range r.outlets {
		for p, end := range ends[t] {
			if r.pos[t][p] < end {
				return false, nil
			}
		}
	}
	return true, nil
}
