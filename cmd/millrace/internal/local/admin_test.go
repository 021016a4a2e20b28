package local_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// TestRunTopicsNotYetShown: a real cluster creates a topic asynchronously, and for a moment
// after CreateTopics answers, its metadata says UNKNOWN_TOPIC_OR_PARTITION for it. Run waits
// for its topics to show instead of failing (it failed when it first asked for the outlet's
// end offsets). The broker here answers the first metadata requests that name the outlet so.
func TestRunTopicsNotYetShown(t *testing.T) {
	a, err := actiondir.Load(initAction(t, "greet"))
	if err != nil {
		t.Fatal(err)
	}
	p := actiondir.Single(a)
	outlet := p.Streamlets[0].Bindings["out"]
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var mu sync.Mutex
	refused := 0
	cluster.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		m := req.(*kmsg.MetadataRequest)
		mu.Lock()
		defer mu.Unlock()
		names := false
		for _, rt := range m.Topics {
			names = names || rt.Topic != nil && *rt.Topic == outlet
		}
		if !names || refused == 3 {
			return nil, nil, false
		}
		refused++
		resp := m.ResponseKind().(*kmsg.MetadataResponse)
		for _, rt := range m.Topics {
			st := kmsg.NewMetadataResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := local.Run(ctx, p, local.Options{Brokers: cluster.ListenAddrs(), Input: strings.NewReader(`{"key": "u1", "payload": {"name": "Ada"}}` + "\n"), Out: &out, Logger: testLogger(t), Version: "test"})
	if err != nil {
		t.Fatalf("Run with topics shown late: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 3 || sum.Total() != 1 || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("metadata refused %d times (want 3), %d records in, output %q; want 1 record through", refused, sum.Total(), out.String())
	}
}
