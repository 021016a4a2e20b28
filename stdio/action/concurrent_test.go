package action_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/action"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// conversation drives Serve over pipes, as the engine does: the test writes lines and reads
// the SDK's answers one message at a time (envelopes unpacked).
type conversation struct {
	t       *testing.T
	in      *io.PipeWriter
	out     *bufio.Reader
	pending []string
	done    chan error
}

func converse[In, Out any](t *testing.T, fn func(action.Context[action.NoConfig], In) ([]Out, error), opts ...action.Option) *conversation {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &conversation{t: t, in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := action.Serve(inR, outW, io.Discard, fn, opts...)
		outW.CloseWithError(io.EOF)
		c.done <- err
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return c
}

func (c *conversation) write(ls ...string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, lines(ls...)); err != nil {
		c.t.Fatalf("writing to the SDK: %v", err)
	}
}

// next returns the SDK's next message.
func (c *conversation) next() string {
	c.t.Helper()
	for len(c.pending) == 0 {
		line, err := c.out.ReadString('\n')
		if err != nil {
			c.t.Fatalf("reading the SDK's next message: %v", err)
		}
		c.pending = strings.Split(strings.TrimSuffix(unpacked(c.t, line), "\n"), "\n")
	}
	m := c.pending[0]
	c.pending = c.pending[1:]
	return m
}

func (c *conversation) expect(want ...string) {
	c.t.Helper()
	for _, w := range want {
		if got := c.next(); got != w {
			c.t.Fatalf("the SDK wrote %s; want %s", got, w)
		}
	}
}

func (c *conversation) end() {
	c.t.Helper()
	c.write(`{"type":"shutdown"}`)
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Fatalf("Serve after shutdown = %v; want nil", err)
		}
	case <-time.After(30 * time.Second):
		c.t.Fatal("Serve did not return after shutdown")
	}
}

func itemLine(d, payload string) string {
	return `{"type":"item","delivery":"` + d + `","id":"i-` + d + `","payload":` + payload + `,"attempt":1}`
}

// gate lets each call through when the test says so, by the call's payload.
type gate struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	entered chan string
}

func newGate() *gate { return &gate{open: map[string]chan struct{}{}, entered: make(chan string, 100)} }

func (g *gate) ch(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[name] == nil {
		g.open[name] = make(chan struct{})
	}
	return g.open[name]
}

func (g *gate) release(name string) { close(g.ch(name)) }

// TestConcurrentAnswersAsCallsReturn: with Concurrency the SDK declares concurrent and cancel,
// runs the calls at once and answers each as it returns, in any order, in the framing of what
// it answers.
func TestConcurrentAnswersAsCallsReturn(t *testing.T) {
	g := newGate()
	c := converse(t, func(ctx action.Context[action.NoConfig], in string) ([]string, error) {
		g.entered <- in
		<-g.ch(in)
		if in == "fail" {
			return nil, action.Retryable(errors.New("later"))
		}
		return []string{in + "!"}, nil
	}, action.Concurrency(4))
	c.write(`{"type":"hello","protocol":1,"action":"c"}`)
	c.expect(`{"type":"ready","window":4,"batch":true,"concurrent":true,"cancel":true}`)
	c.write(`{"type":"batch","messages":[` + itemLine("d1", `"a"`) + `,` + itemLine("d2", `"b"`) + `,` + itemLine("d3", `"fail"`) + `]}`)
	for range 3 { // all three calls run at once: none has returned yet
		<-g.entered
	}
	g.release("b")
	c.expect(`{"type":"emit","delivery":"d2","payload":"b!"}`, `{"type":"done","delivery":"d2"}`)
	g.release("fail")
	c.expect(`{"type":"error","delivery":"d3","message":"later","retryable":true}`)
	c.write(itemLine("d4", `"d"`))
	<-g.entered
	g.release("d")
	c.expect(`{"type":"emit","delivery":"d4","payload":"d!"}`, `{"type":"done","delivery":"d4"}`)
	g.release("a")
	c.expect(`{"type":"emit","delivery":"d1","payload":"a!"}`, `{"type":"done","delivery":"d1"}`)
	c.end()
}

// TestConcurrentCancel: a cancel cancels the call's Context and answers a retryable error at
// once; what the call returns after is dropped; the other calls go on; a cancel for a
// delivery already answered, or unknown, is ignored.
func TestConcurrentCancel(t *testing.T) {
	g := newGate()
	returned := make(chan error, 1)
	c := converse(t, func(ctx action.Context[action.NoConfig], in string) ([]string, error) {
		g.entered <- in
		if in == "hang" {
			<-ctx.Done()
			returned <- ctx.Err()
			ctx.Metric("late", 1, nil)
			return []string{"too late"}, nil
		}
		<-g.ch(in)
		return []string{in}, nil
	}, action.Concurrency(action.ConcurrentWindow))
	c.write(`{"type":"hello","protocol":1,"action":"c"}`)
	c.expect(`{"type":"ready","window":128,"batch":true,"concurrent":true,"cancel":true}`)
	c.write(itemLine("d1", `"hang"`), itemLine("d2", `"ok"`))
	<-g.entered
	<-g.entered
	c.write(`{"type":"cancel","delivery":"d1"}`, `{"type":"cancel","delivery":"nobody"}`)
	c.expect(`{"type":"error","delivery":"d1","message":"cancelled: the engine cancelled delivery d1 (its timeout passed); what its call returns is dropped","retryable":true}`)
	if err := <-returned; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call's ctx.Err() = %v; want context.Canceled", err)
	}
	g.release("ok")
	c.expect(`{"type":"emit","delivery":"d2","payload":"ok"}`, `{"type":"done","delivery":"d2"}`)
	c.write(`{"type":"batch","messages":[{"type":"cancel","delivery":"d2"},` + itemLine("d3", `"last"`) + `]}`)
	<-g.entered
	g.release("last")
	c.expect(`{"type":"emit","delivery":"d3","payload":"last"}`, `{"type":"done","delivery":"d3"}`)
	c.end()
	if rest, _ := io.ReadAll(c.out); len(c.pending) > 0 || len(rest) > 0 {
		t.Errorf("after the answers, the SDK wrote %q %s; want nothing (the cancelled call's late result dropped)", c.pending, rest)
	}
}

// TestConcurrentKeepsEachCallsOwn: many calls at once, each with its own key, state, metrics
// and outputs: nothing of one call lands in another's answer.
func TestConcurrentKeepsEachCallsOwn(t *testing.T) {
	const n = 300
	var in bytes.Buffer
	in.WriteString(lines(`{"type":"hello","protocol":1,"action":"count","state":{"events":{"maxBytes":64}}}`))
	for i := range n {
		fmt.Fprintf(&in, `{"type":"item","delivery":"d%d","id":"i%d","key":"k%d","inlet":"events","payload":"x","state":{"n":%d},"attempt":1}`+"\n", i, i, i, i)
	}
	var out bytes.Buffer
	err := action.Serve(&in, &out, io.Discard, func(ctx action.Context[action.NoConfig], _ string) ([]tally, error) {
		var t tally
		if _, err := ctx.State(&t); err != nil {
			return nil, err
		}
		t.N *= 2
		ctx.Metric("n", float64(t.N), nil)
		if err := ctx.SetState(t); err != nil {
			return nil, err
		}
		return []tally{t, t}, nil
	}, action.Concurrency(16))
	if err != nil {
		t.Fatal(err)
	}
	byDelivery := map[string][]stdio.Message{}
	for _, line := range strings.Split(strings.TrimSpace(unpacked(t, out.String())), "\n")[1:] {
		var m stdio.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		byDelivery[m.Delivery] = append(byDelivery[m.Delivery], m)
	}
	for i := range n {
		d := fmt.Sprint("d", i)
		ms := byDelivery[d]
		want := fmt.Sprintf(`{"n":%d}`, 2*i)
		if len(ms) != 5 || ms[0].Type != "metric" || ms[0].Value != float64(2*i) || string(ms[1].Payload) != want || *ms[2].Key != fmt.Sprint("k", i) ||
			ms[3].Type != "state" || string(ms[3].State) != want || ms[4].Type != "done" {
			t.Fatalf("delivery %s got %+v; want a metric, two emits of key k%d, state and done, all %s", d, ms, i, want)
		}
	}
}

// TestConcurrentUnderPool runs a concurrent SDK action as a real child of a stdio pool.
func TestConcurrentUnderPool(t *testing.T) {
	exited := make(chan error, 1)
	p, err := engine.Start(context.Background(), engine.Config{
		Name: "score", Command: []string{os.Args[0]}, Env: []string{childEnv + "=score-concurrent", "GORACE=atexit_sleep_ms=0"},
		Concurrency: 1, Hello: stdio.Hello{Config: json.RawMessage(`{"minRooms":2,"currency":"EUR"}`)},
		Hooks: engine.Hooks{ProcessExited: func(_ int, err error) { exited <- err }},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Window() != action.ConcurrentWindow {
		t.Errorf("Window() = %d; want %d", p.Window(), action.ConcurrentWindow)
	}
	items := make([]stdio.Item, 500)
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

func TestConcurrencyBelowOnePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "want at least 1") {
			t.Errorf("Concurrency(0) panicked with %v; want a panic saying at least 1", r)
		}
	}()
	action.Concurrency(0)
}
