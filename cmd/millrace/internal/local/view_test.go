package local_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// observer keeps what a run tells its Observer.
type observer struct {
	mu      sync.Mutex
	view    *local.View
	events  []bridge.Event
	ended   bool
	endErr  error
	started int
}

func (o *observer) Started(v *local.View) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.view, o.started = v, o.started+1
}

func (o *observer) Event(e bridge.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *observer) Ended(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended, o.endErr = true, err
}

// TestRunObserver: a run tells its Observer its view once the streamlets run, its bridges'
// events and its end; the view names the streamlets and the input topic, its counters are the
// run's, and Produce writes only to an input topic and only while the run runs.
func TestRunObserver(t *testing.T) {
	testkit.NeedTools(t, "python3")
	a, err := actiondir.Load("../../../../actions/score-listing")
	if err != nil {
		t.Fatal(err)
	}
	p := actiondir.Single(a)
	p.Name = a.Name
	var o observer
	in := `{"key": "l-1", "payload": {"id": "l-1", "rooms": 3, "surface_m2": 70, "price_eur": 250000, "city": "Lyon", "age_hours": 10}}` + "\n" +
		`{"key": "l-3", "payload": {"id": "l-3", "rooms": 4}}` + "\n"
	if _, err := local.Run(context.Background(), p, local.Options{Input: strings.NewReader(in), Logger: testLogger(t), Version: "test", Observer: &o}); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started != 1 || !o.ended || o.endErr != nil {
		t.Fatalf("started %d times, ended %v (%v); want once each, no error", o.started, o.ended, o.endErr)
	}
	v := o.view
	if ss := v.Streamlets(); len(ss) != 1 || ss[0].Name != "score-listing" || ss[0].Fallback != "unsure" || len(ss[0].Outlets) != 3 {
		t.Errorf("streamlets = %+v; want score-listing with its three outlets and --fallback unsure", ss)
	}
	if got := v.InputTopics(); len(got) != 1 || got[0] != "score-listing.listings" {
		t.Errorf("input topics = %v; want [score-listing.listings]", got)
	}
	st := v.Stats()
	if len(st) != 1 || st[0].Committed["score-listing.listings"] != 2 || st[0].Outcomes["done"] != 1 || st[0].Outcomes["fallback"] != 1 {
		t.Errorf("stats = %+v; want 2 committed, 1 done, 1 fallback", st)
	}
	if len(st) == 1 && (len(st[0].Metrics) != 1 || st[0].Metrics[0].Name != "price_per_m2" || st[0].Metrics[0].Count != 1) {
		t.Errorf("action metrics = %+v; want price_per_m2 once", st[0].Metrics)
	}
	started := false
	for _, e := range o.events {
		started = started || e.Kind == bridge.EventConversationStarted && e.Streamlet == "score-listing"
	}
	if !started {
		t.Errorf("events = %+v; want the conversation's start", o.events)
	}
	if _, _, err := v.Produce(context.Background(), &kgo.Record{Topic: "score-listing.scores", Value: []byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "not an input topic") {
		t.Errorf("Produce to an outlet = %v; want it refused, naming the input topics", err)
	}
	if _, _, err := v.Produce(context.Background(), &kgo.Record{Topic: "score-listing.listings", Value: []byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "the run has ended") {
		t.Errorf("Produce after the run = %v; want it refused: the run has ended", err)
	}
}
