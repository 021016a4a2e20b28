package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/protocol"
)

// The changelog topics' check at start (docs/state.md, "The changelog topic"). A changelog that
// is missing, not compacted, partitioned unlike its inlet or out of the principal's reach
// would lose or misplace state silently, so each such problem stops the sidecar at start,
// every one listed, before it discovers the process or consumes anything. The check also
// reads each changelog's max.message.bytes into s.limits, beside the outlets' limits: the
// effective limits of Opened and the state records' cap come from there.

// changelogOps are the operations the sidecar's principal needs on a changelog: Read and
// Describe to restore it, Write to keep it, DescribeConfigs for this check.
var changelogOps = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs}

// ChangelogProblem is one changelog's problem: String names the variable, the topic and the
// fix.
type ChangelogProblem struct {
	Inlet, Topic string
	Message      string
}

func (p ChangelogProblem) String() string {
	return protocol.StateTopicVar(p.Inlet) + "=" + p.Topic + ": " + p.Message
}

// ChangelogError lists every problem of the changelog topics found at start, or the partition
// a changelog lacks found at an assignment (checkPartition); the sidecar exits 1 with it.
type ChangelogError struct {
	Problems []ChangelogProblem
	Err      error // the request that could not be made, when the check itself failed
}

func (e *ChangelogError) Error() string {
	if e.Err != nil {
		return "sidecar: the changelog topics cannot be checked: " + e.Err.Error() + ": the sidecar asks Kafka for their metadata and configs at start; mend what this names (brokers of FLOW_BROKERS that do not answer, a broker error), then start it again"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "sidecar: the changelog topics cannot keep state (fix these, then start again):\n  " + strings.Join(lines, "\n  ")
}

func (e *ChangelogError) Unwrap() error        { return e.Err }
func (e *ChangelogError) Is(target error) bool { return target == ErrChangelog }

// checkChangelogs checks every stateful inlet's changelog and records its max.message.bytes.
// It returns a *ChangelogError (wrapping ErrChangelog) listing every problem, or the request
// error when Kafka could not answer; nil when no inlet keeps state.
func (s *Sidecar) checkChangelogs(ctx context.Context) error {
	var inlets []Inlet
	var topics []string // the changelogs, then their inlets' topics
	for _, in := range s.cfg.Inlets {
		if in.StateTopic != "" {
			inlets = append(inlets, in)
			topics = append(topics, in.StateTopic)
		}
	}
	if len(inlets) == 0 {
		return nil
	}
	for _, in := range inlets {
		topics = append(topics, in.Topic)
	}
	cl, err := kgo.NewClient(s.connOpts()...)
	if err != nil {
		return fmt.Errorf("sidecar: a client for the changelog check: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, permissionCheckTimeout)
	defer cancel()

	// Raw Metadata, as checkPermissions: kadm reads notReported as nothing allowed.
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return &ChangelogError{Err: err}
	}
	meta := map[string]kmsg.MetadataResponseTopic{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			meta[*t.Topic] = t
		}
	}
	var configs kadm.ResourceConfigs
	var configsErr error
	configs, configsErr = kadm.NewClient(cl).DescribeTopicConfigs(ctx, topics[:len(inlets)]...)

	principal := s.principal()
	var ps []ChangelogProblem
	for _, in := range inlets {
		bad := func(format string, args ...any) {
			ps = append(ps, ChangelogProblem{Inlet: in.Port, Topic: in.StateTopic, Message: fmt.Sprintf(format, args...)})
		}
		inletParts := -1 // unknown
		if it, ok := meta[in.Topic]; ok && it.ErrorCode == 0 {
			inletParts = len(it.Partitions)
		}
		t, ok := meta[in.StateTopic]
		terr := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case !ok, errors.Is(terr, kerr.UnknownTopicOrPartition):
			as := "as many partitions as topic " + in.Topic
			if inletParts >= 0 {
				as = fmt.Sprintf("%d partitions (as topic %s)", inletParts, in.Topic)
			}
			bad("the topic does not exist: create it with %s and cleanup.policy=compact (deploy/kubernetes/topics.yaml)", as)
			continue
		case errors.Is(terr, kerr.TopicAuthorizationFailed):
			bad("%s", denyText(principal, "Describe"))
			continue
		case terr != nil:
			return &ChangelogError{Err: fmt.Errorf("metadata of topic %s: %w", in.StateTopic, terr)}
		}
		if t.AuthorizedOperations != notReported {
			var missing []string
			for _, op := range changelogOps {
				if t.AuthorizedOperations&(1<<int32(op)) == 0 {
					missing = append(missing, opNames[op])
				}
			}
			if len(missing) > 0 {
				bad("%s", denyText(principal, strings.Join(missing, ", ")))
			}
		}
		s.mu.Lock()
		s.changelogParts[in.StateTopic] = int32(len(t.Partitions))
		s.mu.Unlock()
		if inletParts >= 0 && len(t.Partitions) != inletParts {
			bad("%d partitions, but inlet topic %s has %d: a changelog has exactly its inlet's partitions (create it again with %d; its states are per partition)", len(t.Partitions), in.Topic, inletParts, inletParts)
		}
		rc, err := configs.On(in.StateTopic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil && configsErr != nil {
			err = configsErr
		}
		switch {
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			if t.AuthorizedOperations == notReported {
				bad("%s", denyText(principal, "DescribeConfigs"))
			}
			continue
		case err != nil:
			return &ChangelogError{Err: fmt.Errorf("configs of topic %s: %w", in.StateTopic, err)}
		}
		if policy := configValue(rc.Configs, "cleanup.policy"); policy != "compact" {
			bad("cleanup.policy is %q: set it to compact exactly, since retention would delete the last state of keys still alive (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)", policy, in.StateTopic)
		}
		if n, ok := effectiveMaxMessageBytes(rc.Configs); ok {
			if s.limits.set(in.StateTopic, n) {
				s.log.Info("changelog topic limit", "topic", in.StateTopic, "inlet", in.Port, "max_message_bytes", n, "source", limitRead)
			}
		} else {
			s.limitUnread(in.StateTopic, errNoLimit)
		}
	}
	if len(ps) > 0 {
		return &ChangelogError{Problems: ps}
	}
	return nil
}

// denyText is a changelog's missing ACLs, as docs/sidecar.md's table names them.
func denyText(principal, ops string) string {
	who := "the sidecar's principal"
	if principal != "" {
		who += " " + principal
	}
	return fmt.Sprintf("Kafka does not allow %s %s on the topic: grant Read, Write, Describe and DescribeConfigs on each changelog (docs/sidecar.md, \"Secured clusters\")", who, ops)
}

// configValue is the value of a described config, "" when absent or null.
func configValue(cs []kadm.Config, key string) string {
	for _, c := range cs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// maxRecordBytes is what one record of changelog topic may be, key and value together: its
// max.message.bytes less a record batch's and a record's framing, and at least 1 KiB under
// FLOW_MAX_MESSAGE_BYTES so that one entry always fits in a State message.
func (s *Sidecar) maxRecordBytes(topic string) int {
	return max(min(s.limits.of(topic)-batchFraming-recordFraming, s.cfg.MaxMessageBytes-batchOverhead), 1)
}

// changelogLimits reads the changelogs' max.message.bytes again at a conversation start, as
// the outlets' are read, so that Opened gives the limits of now.
func (s *Sidecar) changelogLimits(ctx context.Context) {
	var topics []string
	for _, in := range s.cfg.Inlets {
		if in.StateTopic != "" {
			topics = append(topics, in.StateTopic)
		}
	}
	if len(topics) > 0 {
		s.readLimits(ctx, topics)
	}
}

// A changelog keeps the states of its inlet's keys by the inlet's partitions. When the inlet
// topic grows partitions, its keys hash to other partitions than those holding their states,
// and the new partitions have no changelog partition at all: the sidecar stops at the first
// assignment of one (checkPartition), as Kafka Streams does when its input topics grow.

// checkPartition returns nil when p's changelog has p's partition, and a *ChangelogError
// (wrapping ErrChangelog) naming both topics' counts and the fix when it has not. The counts
// of the start check answer first; a partition past them asks Kafka again, since the
// changelog may have been given the same partitions since. Any other error is the request's.
func (s *Sidecar) checkPartition(ctx context.Context, p *partition) error {
	in := p.inlet
	s.mu.Lock()
	n, known := s.changelogParts[in.StateTopic]
	s.mu.Unlock()
	if known && p.partition < n {
		return nil
	}
	cl, err := kgo.NewClient(s.connOpts()...)
	if err != nil {
		return fmt.Errorf("sidecar: a client for the partitions of changelog %s: %w", in.StateTopic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, permissionCheckTimeout)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, in.StateTopic, in.Topic)
	if err == nil {
		err = errors.Join(topics[in.StateTopic].Err, topics[in.Topic].Err)
	}
	if err != nil {
		return fmt.Errorf("sidecar: the partitions of changelog %s and inlet topic %s: %w", in.StateTopic, in.Topic, err)
	}
	n = int32(len(topics[in.StateTopic].Partitions))
	s.mu.Lock()
	s.changelogParts[in.StateTopic] = n
	s.mu.Unlock()
	if p.partition < n {
		return nil
	}
	inletParts := len(topics[in.Topic].Partitions)
	return &ChangelogError{Problems: []ChangelogProblem{{Inlet: in.Port, Topic: in.StateTopic, Message: fmt.Sprintf(
		"%d partitions, but inlet topic %s has %d now (its partition %d was assigned): its keys hash to other partitions than their states; add the same partitions to the changelog, knowing that keys moved partitions start from no state (kafka-topics.sh --alter --topic %s --partitions %d)",
		n, in.Topic, inletParts, p.partition, in.StateTopic, inletParts)}}}
}
