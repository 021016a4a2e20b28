package sidecar_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// grant is one ACL of the sidecar's least privilege, as README's table lists it.
type grant struct {
	name    string
	acl     kfake.ACL
	implied bool // the broker implies it from another grant (KIP-253)
}

func allow(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: rt, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// leastPrivilege is README's ACL table for one streamlet: group, inlet and outlet topics, and
// in exactly-once mode its transactional id.
func leastPrivilege(group, in, out, txnID string, eos bool) []grant {
	g := []grant{
		{"group Read", allow(kmsg.ACLResourceTypeGroup, group, kmsg.ACLOperationRead), false},
		{"inlet Read", allow(kmsg.ACLResourceTypeTopic, in, kmsg.ACLOperationRead), false},
		{"inlet Describe", allow(kmsg.ACLResourceTypeTopic, in, kmsg.ACLOperationDescribe), true},
		{"outlet Write", allow(kmsg.ACLResourceTypeTopic, out, kmsg.ACLOperationWrite), false},
		{"outlet Describe", allow(kmsg.ACLResourceTypeTopic, out, kmsg.ACLOperationDescribe), true},
		{"outlet DescribeConfigs", allow(kmsg.ACLResourceTypeTopic, out, kmsg.ACLOperationDescribeConfigs), false},
	}
	if eos {
		g = append(g,
			grant{"transactional id Write", allow(kmsg.ACLResourceTypeTransactionalId, txnID, kmsg.ACLOperationWrite), false},
			grant{"transactional id Describe", allow(kmsg.ACLResourceTypeTransactionalId, txnID, kmsg.ACLOperationDescribe), true},
			grant{"cluster IdempotentWrite", allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite), true},
		)
	}
	return g
}

// TestLeastPrivilege grants the sidecar's user exactly README's ACLs on a broker that
// enforces them and runs the echo in both delivery modes; then, for each ACL in turn, runs a
// sidecar without it: one the broker implies from another (Describe from Read or Write,
// IdempotentWrite from Write) changes nothing; any other stops the sidecar within seconds
// with an error naming it, having produced and committed nothing, and once it is granted a
// new sidecar delivers every record once.
func TestLeastPrivilege(t *testing.T) {
	for _, eos := range []bool{false, true} {
		mode := map[bool]string{false: "at-least-once", true: "exactly-once"}[eos]
		t.Run(mode+"/all granted", func(t *testing.T) { aclEcho(t, eos, -1) })
		for drop, g := range leastPrivilege("g", "i", "o", "t", eos) {
			t.Run(mode+"/without "+g.name, func(t *testing.T) { aclEcho(t, eos, drop) })
		}
	}
}

// aclEcho runs the echo on an ACL-enforcing broker granting leastPrivilege but the one at
// drop (-1: none).
func aclEcho(t *testing.T, eos bool, drop int) {
	const n = 20
	in, out := testkit.TopicName(t, "", "in"), testkit.TopicName(t, "", "out")
	group, pod := "group-"+in, "pod-0"
	grants := leastPrivilege(group, in, out, group+"."+pod, eos)
	var acls []kfake.ACL
	for i, g := range grants {
		if i != drop {
			acls = append(acls, g.acl)
		}
	}
	b, vars := securedBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512", ACLs: acls})
	createTopicNamed(t, b, in, 2)
	createTopicNamed(t, b, out, 2)
	b.Produce(t, records(in, 2, n)...)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	for k, v := range vars {
		e[k] = v
	}
	if eos {
		e["FLOW_DELIVERY"], e["FLOW_POD_NAME"] = "exactly-once", pod
	}
	if drop < 0 || grants[drop].implied {
		secureEcho(t, b, e, n)
		return
	}

	missing := grants[drop]
	r := start(t, e.config(t))
	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(10 * time.Second):
		t.Fatalf("the sidecar still runs 10s without %s; want it stopped naming it\n%s", missing.name, r.logs.String())
	}
	t.Logf("without %s: %v", missing.name, err)
	var perm *sidecar.PermissionError
	switch {
	case missing.acl.Resource == kmsg.ACLResourceTypeTransactionalId:
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || !strings.Contains(err.Error(), "Write and Describe on that TransactionalId") {
			t.Errorf("Run() without %s = %v; want the transactional id refused, naming the ACL", missing.name, err)
		}
	case !errors.As(err, &perm) || !errors.Is(err, sidecar.ErrPermission):
		t.Errorf("Run() without %s = %v; want a *PermissionError", missing.name, err)
	case opName(perm.Operation) != missing.acl.Operation || perm.Resource != missing.acl.Name:
		t.Errorf("Run() without %s = %v; want it to name %s on %s", missing.name, err, missing.acl.Operation, missing.acl.Name)
	}
	if got := committed(t, b, group, in); len(got) != 0 {
		t.Errorf("committed %v without %s; want nothing", got, missing.name)
	}
	if got := b.ReadAllUncommitted(t, out); len(got) != 0 {
		t.Errorf("%d records written without %s; want none", len(got), missing.name)
	}

	// Granted, a new sidecar delivers every record once: nothing was lost or skipped.
	b.GrantACL(t, missing.acl)
	secureEcho(t, b, e, n)
}

// opName is the kmsg operation README's spelling names.
func opName(s string) kmsg.ACLOperation {
	for op := kmsg.ACLOperation(0); op < 20; op++ {
		if strings.EqualFold(strings.ReplaceAll(op.String(), "_", ""), s) {
			return op
		}
	}
	return kmsg.ACLOperationUnknown
}
