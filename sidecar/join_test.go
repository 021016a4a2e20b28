package sidecar_test

import (
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStopWhileJoining stops the sidecar while its JoinGroup is held by the broker (as when
// the group waits out a dead member's session): Run still returns, the leave bounded, well
// within a pod's grace period. It needs the in-process broker to hold the join.
func TestStopWhileJoining(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding a request needs kfake
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	release := make(chan struct{})
	defer close(release)
	joins := make(chan struct{}, 100)
	b.Cluster.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		joins <- struct{}{}
		b.Cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	r := start(t, e.config(t))
	<-f.Started
	<-joins
	began := time.Now()
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	took := time.Since(began)
	t.Logf("Run returned %v after the stop, with the join held", took.Round(time.Millisecond))
}
