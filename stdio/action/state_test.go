package action_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/action"
	"github.com/ankka-flow/millrace/stdio/engine"
)

type tally struct {
	N int `json:"n"`
}

// count is a running count per key: payload "fail" stages a state and then fails, "clear"
// clears it, "ignore" sets a state the engine would refuse and ignores the error.
func count(ctx action.Context[action.NoConfig], in string) ([]tally, error) {
	var t tally
	if _, err := ctx.State(&t); err != nil {
		return nil, err
	}
	t.N++
	switch in {
	case "clear":
		ctx.ClearState()
		return nil, nil
	case "ignore":
		_ = ctx.SetState(strings.Repeat("x", 100))
		return nil, nil
	}
	if err := ctx.SetState(t); err != nil {
		return nil, err
	}
	if in == "fail" {
		return nil, errors.New("failed after staging")
	}
	return []tally{t}, nil
}

// TestStateUnderPool runs count under a pool that keeps state for inlet events, its states
// kept by the test as the bridge will: each item sees the one the previous staged.
func TestStateUnderPool(t *testing.T) {
	p, err := engine.Start(context.Background(), engine.Config{
		Name: "count", Command: []string{os.Args[0]}, Env: []string{childEnv + "=count", "GORACE=atexit_sleep_ms=0"},
		Concurrency: 2, State: map[string]engine.StateLimits{"events": {MaxValueBytes: 64}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background(), false) })
	var mu sync.Mutex
	states := map[string]json.RawMessage{}
	var items []stdio.Item
	var keys []string
	for i, payload := range []string{`"a"`, `"a"`, `"fail"`, `"a"`, `"clear"`, `"a"`, `"ignore"`, `"a"`} {
		key := "k0"
		if i == 1 {
			key = "k1"
		}
		keys = append(keys, key)
		items = append(items, stdio.Item{ID: fmt.Sprint(i), Key: &keys[i], Inlet: "events", Payload: json.RawMessage(payload)})
	}
	keyless := stdio.Item{ID: "keyless", Inlet: "events", Payload: json.RawMessage(`"a"`)}
	items, keys = append(items, keyless), append(keys, "")
	res := make([]engine.Result, len(items))
	var wg sync.WaitGroup
	wg.Add(len(items))
	errs := p.SubmitBatch(context.Background(), items, func(i int, r engine.Result) {
		if r.State != nil {
			mu.Lock()
			states[keys[i]] = r.State.Value
			mu.Unlock()
		}
		res[i] = r
		wg.Done()
	}, engine.WithState(func(i int) json.RawMessage {
		mu.Lock()
		defer mu.Unlock()
		return states[keys[i]]
	}))
	if errs != nil {
		t.Fatal(errs)
	}
	wg.Wait()
	emitted := func(i int) string {
		if len(res[i].Emits) != 1 {
			return fmt.Sprintf("%v %v", res[i].Outcome, res[i].Err)
		}
		return string(res[i].Emits[0].Payload)
	}
	// k0: 1, 2 (after "fail" staged nothing), cleared, then 1, 2 (after "ignore" failed). k1: 1.
	for i, want := range []string{`{"n":1}`, `{"n":1}`, "", `{"n":2}`, "", `{"n":1}`, "", `{"n":2}`} {
		if want != "" && emitted(i) != want {
			t.Errorf("item %d (key %s, %s) emitted %s; want %s", i, keys[i], items[i].Payload, emitted(i), want)
		}
	}
	if res[2].Outcome != engine.Failed || res[2].State != nil {
		t.Errorf("a failing function: %v, state %v; want failed, nothing staged", res[2].Outcome, res[2].State)
	}
	if res[4].Outcome != engine.Done || res[4].State == nil || res[4].State.Value != nil {
		t.Errorf("ClearState: %v, state %+v; want done, a deletion staged", res[4].Outcome, res[4].State)
	}
	if res[6].Outcome != engine.Failed || !strings.Contains(res[6].Err.Error(), "over max-bytes 64") {
		t.Errorf("an ignored refused state: %v %v; want failed, over max-bytes", res[6].Outcome, res[6].Err)
	}
	if r := res[8]; r.Outcome != engine.Failed || !strings.Contains(r.Err.Error(), "has no key, so it has no state") {
		t.Errorf("a keyless item: %v %v; want failed, refused by the SDK", r.Outcome, r.Err)
	}
}

// TestStateDeclared: the SDK declares "state": true only when hello names inlets that keep
// state, and writes the state message after the emits, before done.
func TestStateDeclared(t *testing.T) {
	item := `{"type":"item","delivery":"d1","id":"i","key":"k","inlet":"events","payload":"a","state":{"n":4},"attempt":1}`
	var out bytes.Buffer
	err := action.Serve(strings.NewReader(lines(`{"type":"hello","protocol":1,"action":"c","state":{"events":{"maxBytes":65536}}}`, item)), &out, &bytes.Buffer{}, count)
	want := lines(`{"type":"ready","window":64,"batch":true,"state":true}`, `{"type":"emit","delivery":"d1","key":"k","payload":{"n":5}}`, `{"type":"state","delivery":"d1","state":{"n":5}}`, `{"type":"done","delivery":"d1"}`)
	if err != nil || out.String() != want {
		t.Fatalf("Serve wrote\n%s(err %v)\nwant\n%s", out.String(), err, want)
	}
	out.Reset()
	err = action.Serve(strings.NewReader(lines(`{"type":"hello","protocol":1,"action":"c"}`, item)), &out, &bytes.Buffer{}, count)
	want = lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d1","message":"inlet events keeps no state: add --state events to the action line, or stage no state for its items","retryable":false}`)
	if err != nil || out.String() != want {
		t.Fatalf("without state in hello, Serve wrote\n%s(err %v)\nwant\n%s", out.String(), err, want)
	}
}
