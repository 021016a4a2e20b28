package bridge_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// envChild turns the test binary into the fake action the tests run as the bridge's child.
const envChild = testkit.EnvRole

func TestMain(m *testing.M) {
	testkit.Main(m, func(role string) int {
		switch role {
		case "action":
			return child()
		case "native":
			return runNative()
		}
		return 2
	}, nil)
}

// childMsg is every field the fake action reads.
type childMsg struct {
	Type           string          `json:"type"`
	Delivery       string          `json:"delivery"`
	ID             string          `json:"id"`
	Key            *string         `json:"key"`
	KeyBase64      string          `json:"keyBase64"`
	Payload        json.RawMessage `json:"payload"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Config         json.RawMessage `json:"config"`
	Vars           json.RawMessage `json:"vars"`
	State          json.RawMessage `json:"state"` // hello: the stateful inlets; item: its key's state
}

// op is what an item's payload asks the fake action to do.
type op struct {
	Op      string   `json:"op"`
	N       int      `json:"n"`       // emits, bytes, failing attempts
	Outlets []string `json:"outlets"` // emits: outlets in turn ("" leaves it out)
	Ms      int      `json:"ms"`      // sleep
	Key     string   `json:"key"`     // order: the record's key, for the log
	Seq     int      `json:"seq"`     // order: the record's position
	Own     string   `json:"own"`     // trace: a traceparent of the action's own for a second emit
}

// child is the fake action: it answers hello with ready and each item as its payload says.
// Payloads that are not an op object are echoed to the only outlet.
func child() int {
	if once := os.Getenv("BRIDGE_TEST_ONCE"); once != "" { // starts once, then never again
		if _, err := os.Stat(once); err == nil {
			fmt.Fprintln(os.Stderr, "fake action: cannot start twice")
			return 1
		}
		os.WriteFile(once, nil, 0o644)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	send := func(v map[string]any) {
		b, _ := json.Marshal(v)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	var hello json.RawMessage
	for in.Scan() {
		line := append([]byte(nil), in.Bytes()...)
		var m childMsg
		if err := json.Unmarshal(line, &m); err != nil {
			fmt.Fprintf(os.Stderr, "fake action: bad line %q: %v\n", line, err)
			return 1
		}
		switch m.Type {
		case "hello":
			hello = line
			gate(m.Config)
			if m.State != nil { // a line with --state: declare it, as an SDK that keeps state does
				send(map[string]any{"type": "ready", "state": true})
			} else {
				send(map[string]any{"type": "ready"})
			}
			continue
		case "shutdown":
			return 0
		case "item":
		default:
			continue
		}
		d := m.Delivery
		emit := func(outlet string, payload any) {
			e := map[string]any{"type": "emit", "delivery": d, "payload": payload}
			if outlet != "" {
				e["outlet"] = outlet
			}
			send(e)
		}
		var o op
		if json.Unmarshal(m.Payload, &o) != nil || o.Op == "" {
			emit("", m.Payload)
			send(map[string]any{"type": "done", "delivery": d})
			continue
		}
		switch o.Op {
		case "skip":
		case "debug": // a debug print on stdout on the first N attempts: a protocol violation
			if m.Attempt <= o.N {
				fmt.Fprintf(out, "debug: got %s\n", d)
				out.Flush()
				continue
			}
			emit("", map[string]any{"attempt": m.Attempt})
		case "emits":
			for i := range o.N {
				outlet := ""
				if len(o.Outlets) > 0 {
					outlet = o.Outlets[i%len(o.Outlets)]
				}
				emit(outlet, map[string]any{"i": i})
			}
		case "inspect": // the item and the hello as received, keyed as the input
			e := map[string]any{"type": "emit", "delivery": d, "payload": map[string]any{"item": json.RawMessage(line), "hello": hello}}
			if m.Key != nil {
				e["key"] = *m.Key
			}
			if m.KeyBase64 != "" {
				e["keyBase64"] = m.KeyBase64
			}
			send(e)
		case "trace": // fails retryably on the first N attempts, then emits the item line as received
			if m.Attempt <= o.N {
				send(map[string]any{"type": "error", "delivery": d, "message": "not yet", "retryable": true})
				continue
			}
			emit(o.Outlets[0], map[string]any{"item": json.RawMessage(line)})
			if o.Own != "" {
				send(map[string]any{"type": "emit", "delivery": d, "outlet": o.Outlets[0], "payload": "own", "headers": []map[string]string{{"key": "traceparent", "value": o.Own}}})
			}
		case "count": // a running count: emits the state it saw and n, stages {"n": n}
			var st struct{ N int }
			json.Unmarshal(m.State, &st)
			e := map[string]any{"type": "emit", "delivery": d, "payload": map[string]any{"n": st.N + 1, "saw": m.State}}
			if m.Key != nil {
				e["key"] = *m.Key
			}
			send(e)
			send(map[string]any{"type": "state", "delivery": d, "state": map[string]any{"n": st.N + 1}})
		case "clear": // deletes the key's state
			send(map[string]any{"type": "state", "delivery": d, "state": nil})
		case "fail":
			send(map[string]any{"type": "error", "delivery": d, "message": "cannot score this listing", "retryable": false})
			continue
		case "flaky": // fails retryably on the first N attempts
			if m.Attempt <= o.N {
				send(map[string]any{"type": "error", "delivery": d, "message": fmt.Sprintf("flaky attempt %d", m.Attempt), "retryable": true})
				continue
			}
			outlet := ""
			if len(o.Outlets) > 0 {
				outlet = o.Outlets[0]
			}
			emit(outlet, map[string]any{"attempt": m.Attempt, "idempotencyKey": m.IdempotencyKey})
		case "abstain":
			send(map[string]any{"type": "abstain", "delivery": d, "reason": "no surface area"})
			continue
		case "crash": // dies on the first N attempts
			if m.Attempt <= o.N {
				fmt.Fprintln(os.Stderr, "fake action: crashing on purpose")
				os.Exit(3)
			}
			emit("", map[string]any{"attempt": m.Attempt})
		case "hang":
			if m.Attempt <= o.N {
				time.Sleep(time.Hour) // until killed
			}
			emit("", map[string]any{"attempt": m.Attempt})
		case "sleep":
			time.Sleep(time.Duration(o.Ms) * time.Millisecond)
			emit("", map[string]any{"slept": o.Ms})
		case "fanout": // n emits of ms KiB each
			chunk := strings.Repeat("x", o.Ms<<10)
			for i := range o.N {
				emit("", fmt.Sprintf("%d-%s", i, chunk))
			}
		case "big":
			emit("", strings.Repeat("x", o.N))
		case "to":
			emit(o.Outlets[0], map[string]any{"to": o.Outlets[0]})
		case "metric":
			send(map[string]any{"type": "metric", "delivery": d, "name": "pages_fetched", "value": 12, "labels": map[string]string{"site": "lyon"}})
		case "order": // appends "key seq" to the file named by BRIDGE_TEST_ORDER, slowly
			f, err := os.OpenFile(os.Getenv("BRIDGE_TEST_ORDER"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintf(f, "%s %d start\n", o.Key, o.Seq)
			time.Sleep(time.Duration(o.Ms) * time.Millisecond)
			fmt.Fprintf(f, "%s %d end\n", o.Key, o.Seq)
			f.Close()
			emit("", map[string]any{"key": o.Key, "seq": o.Seq})
		default:
			fmt.Fprintf(os.Stderr, "fake action: unknown op %q\n", o.Op)
			return 1
		}
		send(map[string]any{"type": "done", "delivery": d})
	}
	return 0
}

// gate holds the ready line back when hello's config names a gate: it writes GATE/NAME.hello,
// then waits for the test to create GATE/NAME.go (a slow-starting action whose start the test
// orders).
func gate(config json.RawMessage) {
	var g struct{ Gate, Name string }
	if json.Unmarshal(config, &g) != nil || g.Gate == "" {
		return
	}
	base := filepath.Join(g.Gate, g.Name)
	os.WriteFile(base+".hello", nil, 0o644)
	for {
		if _, err := os.Stat(base + ".go"); err == nil {
			return
		}
		time.Sleep(2 * time.Millisecond) // polling a file: the test's only way to signal a child
	}
}
