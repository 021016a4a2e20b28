package sidecar_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// statefulEnv is baseEnv for a deployment whose inlet "in" keeps state in changelog.
func statefulEnv(t testing.TB, b *testkit.Broker, f *fakeProcess, in, out, changelog string) env {
	e := baseEnv(t, b, f, in, out)
	e["FLOW_DESCRIPTOR"] = writeDescriptor(t, statefulSpec())
	e["FLOW_INLET_IN_STATE_TOPIC"] = changelog
	return e
}

// refusedAtStart runs a sidecar that must stop before discovery and returns its error.
func refusedAtStart(t *testing.T, e env, f *fakeProcess) error {
	t.Helper()
	discovered := make(chan struct{}, 10)
	f.OnDiscover = func() { discovered <- struct{}{} }
	r := start(t, e.config(t))
	select {
	case err := <-r.done:
		close(r.done)
		if len(discovered) > 0 || f.Conversations() > 0 {
			t.Errorf("the sidecar discovered the process before refusing its changelogs")
		}
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("the sidecar still runs; want it stopped at start\n%s", r.logs.String())
		return nil
	}
}

func TestChangelogRefusedAtStart(t *testing.T) {
	b := newBroker(t)
	for _, tc := range []struct {
		name   string
		create func(t *testing.T) string // the changelog's name
		want   []string
		n      int // problems
	}{
		{name: "missing", create: func(t *testing.T) string { return testkit.TopicName(t, "", "missing.state") },
			want: []string{"the topic does not exist: create it with 4 partitions (as topic ", "cleanup.policy=compact"}, n: 1},
		{name: "delete", create: func(t *testing.T) string { return b.Topic(t, "state", 4) },
			want: []string{`cleanup.policy is "delete": set it to compact exactly`, "--add-config cleanup.policy=compact"}, n: 1},
		{name: "compact,delete", create: func(t *testing.T) string { return b.Topic(t, "state", 4, "cleanup.policy", "compact,delete") },
			want: []string{`cleanup.policy is "compact,delete": set it to compact exactly`}, n: 1},
		{name: "wrong partitions", create: func(t *testing.T) string { return b.Topic(t, "state", 3, "cleanup.policy", "compact") },
			want: []string{"3 partitions, but inlet topic ", " has 4: a changelog has exactly its inlet's partitions (create it again with 4"}, n: 1},
		{name: "every problem of a topic at once", create: func(t *testing.T) string { return b.Topic(t, "state", 2) },
			want: []string{`cleanup.policy is "delete"`, "2 partitions, but inlet topic "}, n: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, out := b.Topic(t, "in", 4), b.Topic(t, "out", 1)
			b.Produce(t, records(in, 4, 8)...)
			changelog := tc.create(t)
			f := newProcess(t, echo)
			e := statefulEnv(t, b, f, in, out, changelog)
			err := refusedAtStart(t, e, f)
			var ce *sidecar.ChangelogError
			if !errors.Is(err, sidecar.ErrChangelog) || !errors.As(err, &ce) {
				t.Fatalf("Run() = %v; want a *ChangelogError", err)
			}
			if len(ce.Problems) != tc.n {
				t.Errorf("problems = %q; want %d", err, tc.n)
			}
			for _, w := range append(tc.want, "FLOW_INLET_IN_STATE_TOPIC="+changelog+": ", "fix these, then start again") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run() = %v; want it to name %q", err, w)
				}
			}
			if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); len(got) != 0 {
				t.Errorf("committed %v; want nothing consumed", got)
			}
		})
	}
}

// TestChangelogACLs runs the check against a broker enforcing ACLs that grants the changelog
// all but Write: the sidecar stops at start naming the operation.
func TestChangelogACLs(t *testing.T) {
	in, out := testkit.TopicName(t, "", "in"), testkit.TopicName(t, "", "out")
	changelog := testkit.TopicName(t, "", "state")
	group := "group-" + in
	acls := []kfake.ACL{}
	for _, g := range leastPrivilege(group, in, out, "", false) {
		acls = append(acls, g.acl)
	}
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs} {
		acls = append(acls, allow(kmsg.ACLResourceTypeTopic, changelog, op))
	}
	b, vars := securedBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512", ACLs: acls})
	createTopicNamed(t, b, in, 2)
	createTopicNamed(t, b, out, 2)
	if err := b.CreateTopic(t.Context(), changelog, 2, "cleanup.policy", "compact"); err != nil {
		t.Fatal(err)
	}
	f := newProcess(t, echo)
	e := statefulEnv(t, b, f, in, out, changelog)
	for k, v := range vars {
		e[k] = v
	}
	err := refusedAtStart(t, e, f)
	if !errors.Is(err, sidecar.ErrChangelog) || !strings.Contains(err.Error(), "FLOW_INLET_IN_STATE_TOPIC="+changelog+": Kafka does not allow the sidecar's principal") ||
		!strings.Contains(err.Error(), " Write on the topic: grant Read, Write, Describe and DescribeConfigs") {
		t.Errorf("Run() = %v; want the changelog refused naming Write", err)
	}
}

// TestChangelogInletGrew: the inlet topic does not exist at start (so the start check cannot
// compare it), then appears with 2 partitions against the changelog's 1. At the assignment
// of partition 1 the sidecar stops: Run returns a *ChangelogError naming both counts and the
// fix, and no batch of partition 1 was sent.
func TestChangelogInletGrew(t *testing.T) {
	b := newBroker(t)
	in, out := testkit.TopicName(t, "", "in"), b.Topic(t, "out", 2)
	changelog := b.Topic(t, "state", 1, "cleanup.policy", "compact")
	sb := newStateBridge(t)
	f := newProcess(t, sb.counter(false))
	f.Spec, f.OnStart = stateSpec(), sb.onStart
	e := statefulEnv(t, b, f, in, out, changelog)
	e["FLOW_STATE_DIR"] = t.TempDir()
	e["FLOW_SIDECAR_PORT"] = strconv.Itoa(testkit.FreePort(t))
	sb.addr = "127.0.0.1:" + e["FLOW_SIDECAR_PORT"]
	r := start(t, e.config(t))
	waitFor(t, "the process's Open", func() bool { return sb.opened() >= 1 })
	createTopicNamed(t, b, in, 2)
	st := &stateSetup{b: b, in: in}
	st.produceKeys(t, 0, 1, 3)
	st.produceKeys(t, 1, 1, 3)

	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(waitTimeout):
		t.Fatalf("the sidecar still runs; want it stopped at the assignment of partition 1")
	}
	var ce *sidecar.ChangelogError
	if !errors.Is(err, sidecar.ErrChangelog) || !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("Run() = %v; want a *ChangelogError with one problem", err)
	}
	for _, w := range []string{"FLOW_INLET_IN_STATE_TOPIC=" + changelog + ": 1 partitions, but inlet topic " + in + " has 2 now (its partition 1 was assigned)",
		"add the same partitions to the changelog, knowing that keys moved partitions start from no state",
		"--alter --topic " + changelog + " --partitions 2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Run() = %v; want it to name %q", err, w)
		}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for _, s := range sb.seen {
		if strings.HasPrefix(s, "p1-") {
			t.Errorf("a batch of partition 1 was sent (its key %s); want none before the stop", s)
		}
	}
	if got := committed(t, b, e["FLOW_CONSUMER_GROUP"], in); got[1] != 0 {
		t.Errorf("committed %v; want nothing of partition 1", got)
	}
}
