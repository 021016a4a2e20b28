package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
)

// PermissionError is an operation the broker does not allow the sidecar's principal: the ACL
// to grant.
type PermissionError struct {
	Operation    string // Read, Write, DescribeConfigs…
	ResourceType string // Group, Topic
	Resource     string
	Role         string // what the resource is to the sidecar, e.g. "inlet in"
	Principal    string // "User:<name>" when the sidecar authenticates with a user name
	Err          error  // the broker's error, when it refused outright
}

func (e *PermissionError) Error() string {
	who := "the sidecar's principal"
	if e.Principal != "" {
		who = "the sidecar's principal " + e.Principal
	}
	msg := fmt.Sprintf("sidecar: Kafka does not allow %s %s on %s %q (%s): grant that ACL (docs/sidecar.md, \"Secured clusters\")",
		who, e.Operation, e.ResourceType, e.Resource, e.Role)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}
func (e *PermissionError) Unwrap() error        { return e.Err }
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// notReported is the authorized operations of a broker that does not report them.
const notReported = math.MinInt32

// checkPermissions asks the broker which operations it allows on the group and the topics
// (the authorized operations of Metadata and DescribeGroups, KIP-430) and returns a
// *PermissionError for the first missing one, so that a missing ACL stops the sidecar at
// start with its name instead of a consumer or producer retrying it forever. The
// transactional id's Write is checked where the producer is initialized. A broker that does
// not report authorized operations is not checked.
func (s *Sidecar) checkPermissions(ctx context.Context) error {
	cl, err := kgo.NewClient(s.connOpts()...)
	if err != nil {
		return fmt.Errorf("sidecar: a client for the permission check: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, permissionCheckTimeout)
	defer cancel()

	type need struct {
		topic, role string
		ops         []kmsg.ACLOperation
	}
	var needs []need
	for _, in := range s.cfg.Inlets {
		needs = append(needs, need{in.Topic, "inlet " + in.Port, []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}})
	}
	for _, out := range s.cfg.Outlets {
		needs = append(needs, need{out.Topic, "outlet " + out.Port, []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs}})
	}
	principal := s.principal()
	denied := func(p *PermissionError) error { p.Principal = principal; return p }
	if len(needs) > 0 {
		// Raw Metadata: kadm reads notReported as nothing allowed and hides which topic was denied.
		req := kmsg.NewPtrMetadataRequest()
		req.IncludeTopicAuthorizedOperations = true
		req.AllowAutoTopicCreation = false
		for _, n := range needs {
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(n.topic)
			req.Topics = append(req.Topics, t)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return s.uncheckable(ctx, err)
		}
		got := map[string]kmsg.MetadataResponseTopic{}
		for _, t := range resp.Topics {
			if t.Topic != nil {
				got[*t.Topic] = t
			}
		}
		for _, n := range needs {
			t, ok := got[n.topic]
			if !ok {
				continue
			}
			if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.TopicAuthorizationFailed) {
				return denied(&PermissionError{Operation: "Describe", ResourceType: "Topic", Resource: n.topic, Role: n.role, Err: err})
			}
			if t.AuthorizedOperations == notReported || t.ErrorCode != 0 {
				continue
			}
			for _, op := range n.ops {
				if t.AuthorizedOperations&(1<<int32(op)) == 0 {
					return denied(&PermissionError{Operation: opNames[op], ResourceType: "Topic", Resource: n.topic, Role: n.role})
				}
			}
		}
	}

	if len(s.cfg.Inlets) == 0 {
		return nil // no inlet, no group
	}
	// Raw DescribeGroups: kadm reads notReported as nothing allowed.
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{s.cfg.ConsumerGroup}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, cl)
	role := "the consumer group, FLOW_CONSUMER_GROUP"
	if errors.Is(err, kerr.GroupAuthorizationFailed) {
		return denied(&PermissionError{Operation: "Read", ResourceType: "Group", Resource: s.cfg.ConsumerGroup, Role: role, Err: err})
	}
	if err != nil {
		return s.uncheckable(ctx, err)
	}
	for _, g := range resp.Groups {
		err := kerr.ErrorForCode(g.ErrorCode)
		switch {
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			return denied(&PermissionError{Operation: "Read", ResourceType: "Group", Resource: g.Group, Role: role, Err: err})
		case err != nil && !errors.Is(err, kerr.GroupIDNotFound), g.AuthorizedOperations == notReported:
		case g.AuthorizedOperations&(1<<int32(kmsg.ACLOperationRead)) == 0:
			return denied(&PermissionError{Operation: "Read", ResourceType: "Group", Resource: g.Group, Role: role})
		}
	}
	return nil
}

// permissionCheckTimeout bounds the permission check, as kafkaconn.CheckTimeout the
// connection check.
const permissionCheckTimeout = 10 * time.Second

// uncheckable logs a permission check that could not be made (a broker slow to answer): the
// clients will meet any missing permission themselves.
func (s *Sidecar) uncheckable(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		s.log.Warn("could not check the sidecar's Kafka permissions; going on", "error", err)
	}
	return nil
}

// opNames are the operations as Kafka's ACL tools and docs/sidecar.md's table spell them.
var opNames = map[kmsg.ACLOperation]string{
	kmsg.ACLOperationRead: "Read", kmsg.ACLOperationWrite: "Write", kmsg.ACLOperationDescribe: "Describe",
	kmsg.ACLOperationDescribeConfigs: "DescribeConfigs",
}

// principal is the principal the sidecar authenticates as, "User:<name>", when it uses a
// user name ("" otherwise: a certificate's or a token's principal is the broker's to say).
func (s *Sidecar) principal() string {
	if a, ok := s.cfg.SASL.(*kafkaconn.Auth); ok && a.User != "" {
		return "User:" + a.User
	}
	return ""
}

// denied returns err with a *PermissionError in its chain when err is the broker refusing an
// operation for a missing ACL while the sidecar runs (an ACL removed after the start-up
// check), and marks the sidecar not ready until a commit succeeds again: topic is the topic
// of the produce, fetch or commit that was refused. Any other error is returned as it is.
func (s *Sidecar) denied(err error, topic string) error {
	var p *PermissionError
	switch {
	case err == nil || errors.As(err, &p):
		return err
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		p = &PermissionError{Operation: "Read", ResourceType: "Topic", Resource: topic, Role: "an inlet"}
		for _, out := range s.cfg.Outlets {
			if out.Topic == topic {
				p.Operation, p.Role = "Write", "outlet "+out.Port
			}
		}
		for _, in := range s.cfg.Inlets {
			if in.Topic == topic {
				p.Operation, p.Role = "Read", "inlet "+in.Port
			}
		}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		p = &PermissionError{Operation: "Read", ResourceType: "Group", Resource: s.cfg.ConsumerGroup, Role: "the consumer group, FLOW_CONSUMER_GROUP"}
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		p = &PermissionError{Operation: "Write", ResourceType: "TransactionalId", Resource: s.cfg.TransactionalID, Role: "the transactional id, FLOW_DELIVERY=exactly-once"}
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		p = &PermissionError{Operation: "IdempotentWrite", ResourceType: "Cluster", Resource: "kafka-cluster", Role: "idempotent and transactional produce"}
	default:
		return err
	}
	p.Principal, p.Err = s.principal(), err
	s.deny(p)
	return p
}
