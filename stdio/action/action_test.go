package action_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/action"
	"github.com/ankka-flow/millrace/stdio/engine"
)

const childEnv = testkit.EnvRole

type config struct {
	MinRooms int    `json:"minRooms"`
	Currency string `json:"currency"`
}

type listing struct {
	Rooms int `json:"rooms"`
}

type priced struct {
	Rooms    int    `json:"rooms"`
	Currency string `json:"currency"`
}

// score is the test action: it exercises every part of the SDK, chosen by the payload.
func score(ctx action.Context[config], in listing) ([]priced, error) {
	switch {
	case in.Rooms == 0:
		return nil, ctx.Abstain("no rooms")
	case in.Rooms < 0:
		return nil, action.Retryable(errors.New("negative rooms, maybe later"))
	case in.Rooms == 13:
		panic("unlucky")
	case in.Rooms < ctx.Config().MinRooms:
		return nil, fmt.Errorf("too small: %d rooms", in.Rooms)
	}
	ctx.Metric("rooms", float64(in.Rooms), map[string]string{"attempt": fmt.Sprint(ctx.Attempt())})
	return []priced{{in.Rooms, ctx.Config().Currency}, {in.Rooms * 2, ctx.Config().Currency}}, nil
}

func TestMain(m *testing.M) {
	testkit.Main(m, func(role string) int {
		if role == "score" {
			action.Map(score)
		}
		if role == "score-concurrent" {
			action.Map(score, action.Concurrency(action.ConcurrentWindow))
		}
		if role == "count" {
			action.Map(count)
		}
		return 2
	}, nil)
}

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// unpacked returns out with each batch envelope's messages on lines of their own.
func unpacked(t *testing.T, out string) string {
	t.Helper()
	var b strings.Builder
	for line := range strings.SplitAfterSeq(out, "\n") {
		isBatch, err := stdio.SplitBatch([]byte(strings.TrimSuffix(line, "\n")), func(msg []byte) error {
			b.Write(msg)
			b.WriteByte('\n')
			return nil
		})
		if err != nil {
			t.Fatalf("the SDK wrote a malformed envelope: %v", err)
		}
		if !isBatch {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestServeFraming: items in an envelope or on lines are answered alike, the answers to an
// envelope's items in one envelope, those to a line on lines, a single answer on a line of
// its own; a malformed envelope from the engine stops the SDK with an error naming it.
func TestServeFraming(t *testing.T) {
	echo := func(_ action.Context[action.NoConfig], in json.RawMessage) ([]json.RawMessage, error) {
		if string(in) == `"none"` {
			return nil, nil
		}
		return []json.RawMessage{in}, nil
	}
	const ready = `{"type":"ready","window":64,"batch":true}`
	item := func(d, payload string) string {
		return `{"type":"item","delivery":"` + d + `","id":"i","payload":` + payload + `,"attempt":1}`
	}
	tests := []struct {
		name, in, want string
	}{
		{"an envelope of items", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[`+item("d1", "1")+","+item("d2", `"none"`)+`],"future":1}`),
			lines(ready, `{"type":"batch","messages":[{"type":"emit","delivery":"d1","payload":1},{"type":"done","delivery":"d1"},{"type":"done","delivery":"d2"}]}`)},
		{"a single answer is a line", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[`+item("d1", `"none"`)+`]}`),
			lines(ready, `{"type":"done","delivery":"d1"}`)},
		{"items on lines are answered on lines", lines(`{"type":"hello","protocol":1,"action":"e"}`, item("d1", "1"), item("d2", "2")),
			lines(ready, `{"type":"emit","delivery":"d1","payload":1}`, `{"type":"done","delivery":"d1"}`, `{"type":"emit","delivery":"d2","payload":2}`, `{"type":"done","delivery":"d2"}`)},
		{"an envelope, then a line", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[`+item("d1", "1")+`]}`, item("d2", "2")),
			lines(ready, `{"type":"batch","messages":[{"type":"emit","delivery":"d1","payload":1},{"type":"done","delivery":"d1"}]}`, `{"type":"emit","delivery":"d2","payload":2}`, `{"type":"done","delivery":"d2"}`)},
		{"a message type the SDK does not know is ignored", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"cancel","delivery":"d0"}`, `{"type":"future"}`, item("d1", `"none"`)),
			lines(ready, `{"type":"done","delivery":"d1"}`)},
		{"an empty envelope means nothing", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[]}`, item("d1", `"none"`)),
			lines(ready, `{"type":"done","delivery":"d1"}`)},
		{"shutdown in an envelope", lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[`+item("d1", `"none"`)+`,{"type":"shutdown"},`+item("d2", "2")+`]}`),
			lines(ready, `{"type":"done","delivery":"d1"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := action.Serve(strings.NewReader(tt.in), &out, &bytes.Buffer{}, echo); err != nil || out.String() != tt.want {
				t.Fatalf("Serve wrote\n%s(err %v)\nwant\n%s", out.String(), err, tt.want)
			}
		})
	}
	var out bytes.Buffer
	err := action.Serve(strings.NewReader(lines(`{"type":"hello","protocol":1,"action":"e"}`, `{"type":"batch","messages":[`+item("d1", "1")+`,7]}`)), &out, &bytes.Buffer{}, echo)
	if !errors.Is(err, stdio.ErrMalformedBatch) || !strings.Contains(err.Error(), "message 2 is not a JSON object") {
		t.Fatalf("Serve over a malformed envelope = %v; want a malformed batch envelope error", err)
	}
	if got := unpacked(t, out.String()); got != lines(ready, `{"type":"emit","delivery":"d1","payload":1}`, `{"type":"done","delivery":"d1"}`) {
		t.Errorf("before the fault the SDK wrote\n%s; want the first item answered", got)
	}
}

const hello = `{"type":"hello","protocol":1,"action":"score","config":{"minRooms":2,"currency":"EUR"},"vars":{"city":"Lyon"}}`

func TestServe(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"two outputs keep the key", lines(hello, `{"type":"item","delivery":"d1","id":"i1","key":"k1","payload":{"rooms":3},"attempt":2,"future":1}`, `{"type":"shutdown"}`),
			lines(`{"type":"ready","window":64,"batch":true}`,
				`{"type":"metric","delivery":"d1","name":"rooms","value":3,"labels":{"attempt":"2"}}`,
				`{"type":"emit","delivery":"d1","key":"k1","payload":{"rooms":3,"currency":"EUR"}}`,
				`{"type":"emit","delivery":"d1","key":"k1","payload":{"rooms":6,"currency":"EUR"}}`,
				`{"type":"done","delivery":"d1"}`)},
		{"abstain", lines(hello, `{"type":"item","delivery":"d2","id":"i2","payload":{"rooms":0},"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"abstain","delivery":"d2","reason":"no rooms"}`)},
		{"retryable error", lines(hello, `{"type":"item","delivery":"d3","id":"i3","payload":{"rooms":-1},"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d3","message":"negative rooms, maybe later","retryable":true}`)},
		{"error", lines(hello, `{"type":"item","delivery":"d4","id":"i4","payload":{"rooms":1},"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d4","message":"too small: 1 rooms","retryable":false}`)},
		{"panic", lines(hello, `{"type":"item","delivery":"d5","id":"i5","payload":{"rooms":13},"attempt":1}`, `{"type":"item","delivery":"d6","id":"i6","payload":{"rooms":0},"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d5","message":"panic: unlucky","retryable":false}`, `{"type":"abstain","delivery":"d6","reason":"no rooms"}`)},
		{"payload of the wrong shape", lines(hello, `{"type":"item","delivery":"d7","id":"i7","payload":[1],"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d7","message":"the payload of item i7 does not decode into action_test.listing: `)},
		{"bad config answers every item", lines(`{"type":"hello","protocol":1,"action":"score","config":{"minRooms":"two"}}`,
			`{"type":"item","delivery":"d8","id":"i8","payload":{"rooms":3},"attempt":1}`, `{"type":"item","delivery":"d9","id":"i9","payload":{"rooms":3},"attempt":1}`),
			lines(`{"type":"ready","window":64,"batch":true}`, `{"type":"error","delivery":"d8","message":"the action's config does not decode into action_test.config: `)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, logs bytes.Buffer
			if err := action.Serve(strings.NewReader(tt.in), &out, &logs, score); err != nil {
				t.Fatalf("Serve = %v; want nil", err)
			}
			got := unpacked(t, out.String())
			if !strings.HasPrefix(got, strings.TrimSuffix(tt.want, "\n")) {
				t.Fatalf("Serve(%s) wrote\n%s\nwant it to start with\n%s", tt.name, got, tt.want)
			}
			if tt.name == "bad config answers every item" && strings.Count(got, `"retryable":false`) != 2 {
				t.Fatalf("bad config: wrote\n%s\nwant a non-retryable error for each item", got)
			}
		})
	}
}

func TestServeKeyed(t *testing.T) {
	var out bytes.Buffer
	in := lines(`{"type":"hello","protocol":1,"action":"k"}`, `{"type":"item","delivery":"d","id":"i","key":"mine","payload":"x","attempt":1}`)
	err := action.ServeKeyed(strings.NewReader(in), &out, &bytes.Buffer{}, func(ctx action.Context[action.NoConfig], in string) ([]action.Keyed[string], error) {
		return []action.Keyed[string]{{Value: in + "1"}, {Key: "theirs", Value: in + "2", Outlet: "audit"}}, nil
	})
	want := lines(`{"type":"ready","window":64,"batch":true}`,
		`{"type":"emit","delivery":"d","key":"mine","payload":"x1"}`,
		`{"type":"emit","delivery":"d","outlet":"audit","key":"theirs","payload":"x2"}`,
		`{"type":"done","delivery":"d"}`)
	if err != nil || unpacked(t, out.String()) != want {
		t.Fatalf("ServeKeyed wrote\n%s (err %v)\nwant\n%s", out.String(), err, want)
	}
}

// TestItemFields: every field of the item line reaches the function through the Context's
// typed accessors.
func TestItemFields(t *testing.T) {
	in := lines(`{"type":"hello","protocol":1,"action":"k"}`,
		`{"type":"item","delivery":"d7","id":"orders/2/9","run":"r1","key":"k1","payload":1,"headers":[{"key":"h","value":"v"},{"key":"b","valueBase64":"/w=="}],`+
			`"inlet":"orders","topic":"shop.orders","partition":2,"offset":9,"timestamp":1767225600000,"attempt":3,"idempotencyKey":"idem",`+
			`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=1"}`)
	type seen struct {
		id, delivery, run, key, inlet, topic, idem string
		traceparent, tracestate                    string
		hasKey                                     bool
		headers                                    []stdio.Header
		partition                                  int32
		offset                                     int64
		ts                                         time.Time
		attempt                                    int
	}
	var got seen
	err := action.Serve(strings.NewReader(in), &bytes.Buffer{}, &bytes.Buffer{}, func(ctx action.Context[action.NoConfig], _ json.RawMessage) ([]json.RawMessage, error) {
		got = seen{id: ctx.ID(), delivery: ctx.Delivery(), run: ctx.Run(), inlet: ctx.Inlet(), topic: ctx.Topic(), idem: ctx.IdempotencyKey(),
			headers: ctx.Headers(), partition: ctx.Partition(), offset: ctx.Offset(), ts: ctx.Timestamp(), attempt: ctx.Attempt(),
			traceparent: ctx.Traceparent(), tracestate: ctx.Tracestate()}
		got.key, got.hasKey = ctx.Key()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.id != "orders/2/9" || got.delivery != "d7" || got.run != "r1" || got.key != "k1" || !got.hasKey || got.inlet != "orders" ||
		got.topic != "shop.orders" || got.partition != 2 || got.offset != 9 || got.attempt != 3 || got.idem != "idem" ||
		got.traceparent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || got.tracestate != "vendor=1" ||
		!got.ts.Equal(time.UnixMilli(1767225600000)) {
		t.Errorf("the function saw %+v", got)
	}
	if len(got.headers) != 2 || got.headers[0].Key != "h" || *got.headers[0].Value != "v" || got.headers[1].ValueBase64 != "/w==" {
		t.Errorf("headers = %+v", got.headers)
	}
}

func TestServeBadEngineLine(t *testing.T) {
	var out bytes.Buffer
	err := action.Serve(strings.NewReader(lines(hello, `not json`)), &out, &bytes.Buffer{}, score)
	if !errors.Is(err, stdio.ErrProtocol) || !strings.Contains(err.Error(), "not json") {
		t.Fatalf("Serve over a garbage line = %v; want a protocol error quoting it", err)
	}
}

// TestUnderPool runs the SDK action as a real child of a stdio pool: it declares its window,
// answers through the engine, and exits 0 on shutdown.
func TestUnderPool(t *testing.T) {
	exited := make(chan error, 1)
	cfg := engine.Config{
		Name:        "score",
		Command:     []string{os.Args[0]},
		Env:         []string{childEnv + "=score", "GORACE=atexit_sleep_ms=0"},
		Concurrency: 1,
		Hello:       stdio.Hello{Config: json.RawMessage(`{"minRooms":2,"currency":"EUR"}`)},
		Hooks:       engine.Hooks{ProcessExited: func(_ int, err error) { exited <- err }},
	}
	p, err := engine.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Window() != action.Window {
		t.Errorf("Window() = %d; want the SDK's %d", p.Window(), action.Window)
	}
	results := make(chan engine.Result, 3)
	key := "listing-42"
	for i, payload := range []string{`{"rooms":3}`, `{"rooms":0}`, `{"rooms":1}`} {
		if err := p.Submit(context.Background(), stdio.Item{ID: fmt.Sprint(i), Key: &key, Payload: json.RawMessage(payload)}, func(r engine.Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
	}
	r := <-results
	if r.Outcome != engine.Done || len(r.Emits) != 2 || *r.Emits[0].Key != key || string(r.Emits[0].Payload) != `{"rooms":3,"currency":"EUR"}` || len(r.Metrics) != 1 {
		t.Errorf("first = %+v; want done with two keyed emits and a metric", r)
	}
	if r = <-results; r.Outcome != engine.Abstained {
		t.Errorf("second = %v; want abstained", r.Outcome)
	}
	if r = <-results; r.Outcome != engine.Failed || !errors.Is(r.Err, engine.ErrAction) || !strings.Contains(r.Err.Error(), "too small") {
		t.Errorf("third = %v %v; want failed with the action's own error, too small", r.Outcome, r.Err)
	}
	// Many items at once: written to the SDK in envelopes and answered in envelopes.
	items := make([]stdio.Item, 200)
	for i := range items {
		items[i] = stdio.Item{ID: fmt.Sprint("many-", i), Payload: json.RawMessage(fmt.Sprintf(`{"rooms":%d}`, 2+i%5))}
	}
	many := make(chan engine.Result, len(items))
	if errs := p.SubmitBatch(context.Background(), items, func(_ int, r engine.Result) { many <- r }); errs != nil {
		t.Fatal(errs)
	}
	for range items {
		if r := <-many; r.Outcome != engine.Done || len(r.Emits) != 2 {
			t.Fatalf("one of many = %v, %d emits (%v); want done with two", r.Outcome, len(r.Emits), r.Err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("exit after shutdown = %v; want status 0", err)
	}
}
