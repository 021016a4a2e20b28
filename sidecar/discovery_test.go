package sidecar_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar"
)

// noBroker stands for Kafka in tests that never reach it: the sidecar joins no group before
// discovery succeeds.
var noBroker = &testkit.Broker{Addrs: []string{"127.0.0.1:9"}}

// refusedAtDiscovery waits for the sidecar r to stop, refusing process f at discovery before
// it opened Run, and returns f's one ReportError and Run's error (it wraps ErrRefused).
func refusedAtDiscovery(t *testing.T, r *running, f *fakeProcess) (*flowv1.Problems, error) {
	t.Helper()
	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-f.Started:
		t.Fatal("the sidecar opened Run with a refused process")
	}
	if !errors.Is(err, sidecar.ErrRefused) {
		t.Fatalf("Run() = %v; want an error wrapping ErrRefused", err)
	}
	reports := f.Reports()
	if len(reports) != 1 {
		t.Fatalf("ReportError calls = %d; want exactly 1", len(reports))
	}
	return reports[0], err
}

func TestDiscoveryRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *flowv1.Spec)
		want   []string // each in one problem of the single ReportError
	}{
		{name: "later major version", change: func(s *flowv1.Spec) { s.ProtocolVersion = "2.0" }, want: []string{"2.0", "1.1"}},
		{name: "later minor version", change: func(s *flowv1.Spec) { s.ProtocolVersion = "1.2" }, want: []string{"1.2", "later than 1.1"}},
		{name: "streamlet name", change: func(s *flowv1.Spec) { s.Streamlet.Name = "lower" }, want: []string{`name: differs from the deployed descriptor`, `"lower"`}},
		{name: "inlet missing", change: func(s *flowv1.Spec) { s.Streamlet.Inlets = nil }, want: []string{`inlets[0]`, `port "in" deployed but not discovered`}},
		{name: "outlet added", change: func(s *flowv1.Spec) {
			s.Streamlet.Outlets = append(s.Streamlet.Outlets, proto.Clone(s.Streamlet.Outlets[0]).(*flowv1.Port))
			s.Streamlet.Outlets[1].Name = "extra"
		}, want: []string{`port "extra" discovered but not deployed`}},
		{name: "outlet schema", change: func(s *flowv1.Spec) {
			s.Streamlet.Outlets[0].Contract.SchemaName = "text.v2"
			s.Streamlet.Outlets[0].Contract.Fingerprint = protocol.Fingerprint("text.v2")
		}, want: []string{"outlets[0].contract.schema_name", "outlets[0].contract.fingerprint"}},
		{name: "fingerprint wrong", change: func(s *flowv1.Spec) { s.Streamlet.Inlets[0].Contract.Fingerprint = "AAAA" }, want: []string{"inlets[0].contract.fingerprint"}},
		{name: "config type", change: func(s *flowv1.Spec) { s.Streamlet.ConfigParameters[1].Type = flowv1.ConfigType_DOUBLE }, want: []string{"config_parameters[1].type"}},
		{name: "config default", change: func(s *flowv1.Spec) { s.Streamlet.ConfigParameters[0].DefaultValue = "?" }, want: []string{"config_parameters[0].default_value"}},
		{name: "new required parameter", change: func(s *flowv1.Spec) {
			s.Streamlet.ConfigParameters = append(s.Streamlet.ConfigParameters, &flowv1.ConfigParameter{Key: "level", Type: flowv1.ConfigType_INTEGER})
		}, want: []string{`parameter "level" discovered but not deployed`, "config.level"}},
		{name: "everything at once", change: func(s *flowv1.Spec) {
			s.ProtocolVersion = "2.0"
			s.Streamlet.Name = "lower"
			s.Streamlet.Outlets[0].Contract.SchemaName = "text.v2"
		}, want: []string{"2.0", `"lower"`, "outlets[0].contract.schema_name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newProcess(t, echo)
			tc.change(f.Spec)
			e := baseEnv(t, noBroker, f, "in-topic", "out-topic")
			r := start(t, e.config(t))
			report, err := refusedAtDiscovery(t, r, f)
			var all []string
			for _, p := range report.Problems {
				all = append(all, p.Message)
			}
			joined := strings.Join(all, "\n")
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("ReportError problems:\n%s\nwant one naming %q", joined, w)
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run() = %v; want it to name %q", err, w)
				}
			}
			// The log is where an operator reads the problems: each is a record of its own.
			var logged []string
			for _, a := range r.records.Attrs("discovery refused the streamlet process") {
				logged = append(logged, fmt.Sprint(a["problem"]))
			}
			if !slices.Equal(logged, all) {
				t.Errorf("problems logged = %q; want each of the %d reported, in order: %q", logged, len(all), all)
			}
			if f.Conversations() != 0 {
				t.Errorf("conversations = %d; want none", f.Conversations())
			}
		})
	}
}

// TestDiscoveryRetries starts the sidecar before the process listens: Discover is retried
// until it answers, and the sidecar is not ready until then.
func TestDiscoveryRetries(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	f.Stop()
	e := baseEnv(t, b, f, in, out)
	r := start(t, e.config(t))
	waitFor(t, "a failed Discover", func() bool {
		n, _ := testkit.Gather(t, r.sc.Registry()).Value("millrace_sidecar_discovery_attempts_total", "result", "unanswered")
		return n > 0
	})
	if sidecar.Ready(e["FLOW_READINESS_FILE"]) {
		t.Errorf("ready before discovery; want not ready")
	}
	f.Restart(t)
	<-f.Started
	waitFor(t, "the readiness file", func() bool { return sidecar.Ready(e["FLOW_READINESS_FILE"]) })
}

// TestReadinessFileLife follows the readiness file: a stale one is removed at start-up, it is
// written once the conversation is open, removed on a stream failure, written again by the
// next conversation, and removed at shutdown.
func TestReadinessFileLife(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, nil)
	e := baseEnv(t, b, f, in, out)
	ready := e["FLOW_READINESS_FILE"]
	if err := os.WriteFile(ready, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	discovered := make(chan bool, 10)
	f.OnDiscover = func() { discovered <- sidecar.Ready(ready) }
	failNow := make(chan struct{})
	f.OnBatch = func(c *call) error {
		if c.Conv == 1 {
			<-failNow
			return c.Fail("first conversation fails")
		}
		return echo(c)
	}
	r := start(t, e.config(t))
	if <-discovered {
		t.Errorf("a stale readiness file survived start-up")
	}
	<-f.Started
	waitFor(t, "the readiness file after Start", func() bool { return sidecar.Ready(ready) })
	b.Produce(t, records(in, 1, 1)...)
	close(failNow)
	if <-discovered {
		t.Errorf("the readiness file survived a stream failure")
	}
	<-f.Started
	waitFor(t, "the readiness file after the second Start", func() bool { return sidecar.Ready(ready) })
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	if sidecar.Ready(ready) {
		t.Errorf("the readiness file survived shutdown")
	}
	if entries, _ := os.ReadDir(filepath.Dir(ready)); len(entries) != 0 {
		t.Errorf("files left beside the readiness file: %v", entries)
	}
}
