package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/testkit"
)

const stateLine = "count --in events=event.v1 --in audit=audit.v1 --out counts=count.v1 --state events,ttl=1h -- python3 main.py"

// statePipeline is the pipeline `millrace run LINE` makes of stateLine, its topics given a
// name of the test's own (a real broker is shared).
func statePipeline(t *testing.T) *actiondir.Pipeline {
	t.Helper()
	a, err := actiondir.Load(stateLine)
	if err != nil {
		t.Fatal(err)
	}
	p := actiondir.Single(a)
	p.Name = a.Name
	prefix := testkit.TopicName(t, "", "run")
	s := p.Streamlets[0]
	for port, topic := range s.Bindings {
		s.Bindings[port] = prefix + "." + topic
	}
	p.Input = s.Bindings["events"]
	return p
}

// testRunner is a runner of p on the test's broker, ready for the admin calls Run makes
// before it starts any streamlet.
func testRunner(t *testing.T, b *testkit.Broker, p *actiondir.Pipeline, partitions int) *runner {
	t.Helper()
	adm := kadm.NewClient(b.Admin)
	adm.SetTimeoutMillis(10_000)
	return &runner{p: p, opts: Options{Partitions: partitions, Logger: slog.New(slog.DiscardHandler)}, log: slog.New(slog.DiscardHandler), admin: b.Admin, adm: adm, outlets: map[string]outletName{}}
}

// topicState returns a topic's partition count and cleanup.policy as the broker has them.
func topicState(t *testing.T, r *runner, topic string) (int, string) {
	t.Helper()
	ctx := context.Background()
	parts, err := r.partitions(ctx, []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := r.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			return len(parts[topic]), *c.Value
		}
	}
	return len(parts[topic]), ""
}

// TestCreateChangelogs: the changelog of the stateful inlet only, STREAMLET.PORT.state, is
// created compacted with the inlet topic's partitions (the broker's, not --partitions', when
// the inlet topic existed); a second run leaves it as it is; an existing changelog partitioned
// otherwise or not compacted is refused, naming it and the fix.
func TestCreateChangelogs(t *testing.T) {
	b := testkit.NewBroker(t, testkit.BrokerOptions{KfakeOnly: true}) // the changelog names are fixed, STREAMLET.PORT.state: not on a shared broker
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := statePipeline(t)
	events := p.Streamlets[0].Bindings["events"]
	if err := b.CreateTopic(ctx, events, 3); err != nil { // an inlet topic of an earlier run
		t.Fatal(err)
	}
	r := testRunner(t, b, p, 1)
	if err := r.createTopics(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := r.createChangelogs(ctx); err != nil {
		t.Fatalf("createChangelogs = %v", err)
	}
	if n, policy := topicState(t, r, "count.events.state"); n != 3 || policy != "compact" {
		t.Errorf("count.events.state: %d partitions, cleanup.policy %q; want 3 (as %s) and compact", n, policy, events)
	}
	if tds, err := r.adm.ListTopics(ctx, "count.audit.state"); err != nil || tds.Has("count.audit.state") {
		t.Errorf("count.audit.state exists (%v): want no changelog for an inlet without --state", err)
	}
	if err := r.createChangelogs(ctx); err != nil {
		t.Errorf("createChangelogs on the changelog it made = %v; want nil", err)
	}

	// Topics of a streamlet of the same name made otherwise before: each problem named.
	for _, tt := range []struct {
		partitions int32
		configs    []string
		want       string
	}{
		{2, []string{"cleanup.policy", "compact"}, "has 2 partitions, but its inlet's topic " + events + " has 3"},
		{3, nil, `has cleanup.policy "delete": set it to compact`},
		{3, []string{"cleanup.policy", "compact,delete"}, `has cleanup.policy "compact,delete"`},
	} {
		t.Run(fmt.Sprint(tt.partitions, tt.configs), func(t *testing.T) {
			if err := b.DeleteTopic(ctx, "count.events.state"); err != nil {
				t.Fatal(err)
			}
			if err := b.CreateTopic(ctx, "count.events.state", tt.partitions, tt.configs...); err != nil {
				t.Fatal(err)
			}
			err := r.createChangelogs(ctx)
			if err == nil || !strings.Contains(err.Error(), "changelog topic count.events.state "+tt.want) {
				t.Errorf("createChangelogs = %v; want an error saying the changelog topic count.events.state %s", err, tt.want)
			}
		})
	}
}

// TestSidecarConfigState: the in-process sidecar of a stateful streamlet gets the stateful
// inlet's changelog (and no other inlet one), the State service's port and its store folder
// under the run's; a stateless streamlet's gets none of them.
func TestSidecarConfigState(t *testing.T) {
	p := statePipeline(t)
	r := &runner{p: p, stateRoot: "/data/state"}
	cfg := r.sidecarConfig(p.Streamlets[0], "count.count", []string{"127.0.0.1:9092"}, 4000, 4001)
	got := map[string]string{}
	for _, in := range cfg.Inlets {
		got[in.Port] = in.StateTopic
	}
	if got["events"] != "count.events.state" || got["audit"] != "" || len(got) != 2 {
		t.Errorf("the inlets' StateTopic = %v; want events: count.events.state, audit none", got)
	}
	if cfg.StateDir != filepath.Join("/data/state", "count") || cfg.SidecarPort != 4001 || cfg.ProcessPort != 4000 {
		t.Errorf("StateDir %q, SidecarPort %d, ProcessPort %d; want /data/state/count, 4001, 4000", cfg.StateDir, cfg.SidecarPort, cfg.ProcessPort)
	}

	a, err := actiondir.Load("echo --in in=x.v1 --out out=x.v1 -- cat")
	if err != nil {
		t.Fatal(err)
	}
	ps := actiondir.Single(a)
	cfg = (&runner{p: ps}).sidecarConfig(ps.Streamlets[0], "echo.echo", nil, 4000, 0)
	if cfg.StateDir != "" || cfg.SidecarPort != 0 || cfg.Inlets[0].StateTopic != "" {
		t.Errorf("a stateless streamlet's sidecar: StateDir %q, SidecarPort %d, StateTopic %q; want none", cfg.StateDir, cfg.SidecarPort, cfg.Inlets[0].StateTopic)
	}
}

// TestStateRoot: with --data the stores go in DATA/state and stay; without, in a temporary
// folder that the cleanup removes, files and all; a pipeline that keeps no state gets none.
func TestStateRoot(t *testing.T) {
	p := statePipeline(t)
	data := t.TempDir()
	root, cleanup, err := stateRoot(p, data)
	if err != nil || root != filepath.Join(data, "state") {
		t.Fatalf("stateRoot with --data = %q, %v; want %s", root, err, filepath.Join(data, "state"))
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the cleanup of a --data run removed its state (%v); want it kept for the next run", err)
	}

	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	root, cleanup, err = stateRoot(p, "")
	if err != nil || filepath.Dir(root) != tmp {
		t.Fatalf("stateRoot without --data = %q, %v; want a folder in %s", root, err, tmp)
	}
	store := filepath.Join(root, "count", "count.events.state", "0.db")
	if err := os.MkdirAll(filepath.Dir(store), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the cleanup, %s: %v; want it removed", root, err)
	}

	a, err := actiondir.Load("echo --in in=x.v1 --out out=x.v1 -- cat")
	if err != nil {
		t.Fatal(err)
	}
	if root, _, err := stateRoot(actiondir.Single(a), ""); root != "" || err != nil {
		t.Errorf("stateRoot of a stateless pipeline = %q, %v; want none", root, err)
	}
}
