package sidecar_test

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ankka-flow/millrace/sidecar"
	"github.com/ankka-flow/millrace/sidecar/internal/kube"
)

// fakeAPIServer records the Events posted to it, checking path and token.
type fakeAPIServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []map[string]any
}

func newAPIServer(t *testing.T) *fakeAPIServer {
	a := &fakeAPIServer{}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/shop/events" || r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("request %s %s with %q; want POST /api/v1/namespaces/shop/events with the token", r.Method, r.URL.Path, r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusForbidden)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("event body %s: %v", body, err)
		}
		a.mu.Lock()
		a.events = append(a.events, ev)
		a.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAPIServer) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.events)
}

func (a *fakeAPIServer) client(t *testing.T) *kube.Client {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(kube.Options{URL: a.srv.URL, TokenFile: token,
		CA:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}),
		Pod: kube.Pod{Name: "upper-0", Namespace: "shop", UID: "uid-1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestStallEvent makes the process fail every batch: once the partition has been stalled for
// FLOW_STALL_WARNING_AFTER, exactly one PartitionStalled Event is posted, however many more
// failures follow; after the partition recovers, a new stall gets a new Event.
func TestStallEvent(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	var failing atomic.Bool
	failing.Store(true)
	f := newProcess(t, func(c *call) error {
		if failing.Load() {
			return c.Fail("poison")
		}
		return echo(c)
	})
	api := newAPIServer(t)
	e := baseEnv(t, b, f, in, out)
	e["FLOW_STALL_WARNING_AFTER"] = "30ms"
	cfg := e.config(t)
	cfg.Events = api.client(t)
	b.Produce(t, records(in, 1, 3)...)
	r := start(t, cfg)

	waitFor(t, "a PartitionStalled event", func() bool { return api.count() >= 1 })
	convs := f.Conversations()
	waitFor(t, "five more failed conversations", func() bool { return f.Conversations() >= convs+5 })
	if n := api.count(); n != 1 {
		t.Fatalf("events during one stall = %d; want exactly 1", n)
	}
	api.mu.Lock()
	ev := api.events[0]
	api.mu.Unlock()
	msg, _ := ev["message"].(string)
	// The event's message is for a person reading the pod's events: it must name the place.
	for _, want := range []string{"topic " + in, "partition 0", "offset 0", "time(s) over"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event message %q; want it to name %q", msg, want)
		}
	}
	if ev["reason"] != sidecar.ReasonPartitionStalled || ev["type"] != "Warning" {
		t.Errorf("event reason %v type %v; want PartitionStalled Warning", ev["reason"], ev["type"])
	}
	if obj, _ := ev["involvedObject"].(map[string]any); obj["uid"] != "uid-1" || obj["name"] != "upper-0" {
		t.Errorf("event involvedObject = %v; want the sidecar's pod", obj)
	}

	failing.Store(false)
	waitFor(t, "the stalled records committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, map[int32]int64{0: 3}) })
	failing.Store(true)
	b.Produce(t, records(in, 1, 1)...)
	waitFor(t, "a second stall's event", func() bool { return api.count() == 2 })
	r.stop(t)
	if got := r.sc.Stats().StallWarnings; got != 2 {
		t.Errorf("Stats().StallWarnings = %d; want 2", got)
	}
}

// TestStallLoggedOutsideCluster: without a Kubernetes API the warning is logged.
func TestStallLoggedOutsideCluster(t *testing.T) {
	b := newBroker(t)
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, func(c *call) error { return c.Fail("poison") })
	e := baseEnv(t, b, f, in, out)
	e["FLOW_STALL_WARNING_AFTER"] = "20ms"
	b.Produce(t, records(in, 1, 1)...)
	r := start(t, e.config(t))
	waitFor(t, "the stall logged", func() bool { return r.stalled(in, 0, 0) })
}
