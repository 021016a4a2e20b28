package sidecar_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// holdFetch holds the first fetch request for topic (named or by its topic id) at kfake until
// release is called; held is closed once it is held.
func holdFetch(t *testing.T, b *testkit.Broker, topic string) (held <-chan struct{}, release func()) {
	t.Helper()
	id := topicID(t, b, topic)
	h, r := make(chan struct{}), make(chan struct{})
	b.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		hit := false
		for _, ft := range req.(*kmsg.FetchRequest).Topics {
			hit = hit || ft.Topic == topic || ft.TopicID == id
		}
		if !hit {
			return nil, nil, false
		}
		b.Cluster.DropControl()
		close(h)
		b.Cluster.SleepControl(func() { <-r })
		return nil, nil, false
	})
	var once sync.Once
	release = func() { once.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}

// TestStateRestoreMetrics holds the restore's first fetch of a changelog of 3 records: while
// it waits, the partition restores with 3 records left and its store file has a size; once
// the restore ends, none is left, and the file still has its size.
func TestStateRestoreMetrics(t *testing.T) {
	t.Setenv(testkit.EnvBrokers, "") // holding a fetch needs kfake
	st := newStateSetup(t, 1, false)
	st.b.Produce(t, &kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k1"), Value: []byte("41")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: []byte("7")},
		&kgo.Record{Topic: st.changelog, Partition: 0, Key: []byte("k0"), Value: nil})
	held, release := holdFetch(t, st.b, st.changelog)
	r := st.start(t, nil)
	select {
	case <-held:
	case <-time.After(waitTimeout):
		t.Fatalf("the restore never fetched the changelog")
	}
	series := func(m testkit.Exposition, name string) (float64, bool) {
		return m.Value(name, "topic", st.changelog, "partition", "0")
	}
	waitFor(t, "the restore's metrics while it waits", func() bool {
		m := testkit.Gather(t, r.sc.Registry())
		restoring, _ := series(m, "millrace_sidecar_state_restoring")
		left, _ := series(m, "millrace_sidecar_state_restore_remaining_records")
		size, _ := series(m, "millrace_sidecar_state_file_bytes")
		return restoring == 1 && left == 3 && size > 0
	})
	release()
	waitFor(t, "the restore's metrics once it ended", func() bool {
		m := testkit.Gather(t, r.sc.Registry())
		restoring, _ := series(m, "millrace_sidecar_state_restoring")
		left, ok := series(m, "millrace_sidecar_state_restore_remaining_records")
		size, _ := series(m, "millrace_sidecar_state_file_bytes")
		keys, _ := series(m, "millrace_sidecar_state_keys")
		return restoring == 0 && ok && left == 0 && size > 0 && keys == 1
	})
}
