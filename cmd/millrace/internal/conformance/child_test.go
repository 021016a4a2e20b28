package conformance_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// envChild makes the test binary play an action: its value names the behaviour.
const envChild = testkit.EnvRole

// The behaviours the test binary plays, each a good action or one broken in exactly one way,
// and the one check that must catch it ("" for the good ones); no other check may fail, and
// every check must be judged unless the fault stops every conversation.
var behaviours = []struct {
	name  string
	catch string
	what  string
	// skips are checks the fault keeps from being judged (answers: it ends every conversation);
	// each such says "SKIP name: <catch> failed", and no other check may be skipped
	skips []string
}{
	{"good", "", "echoes each item's key and payload as one output", nil},
	{"good-multi", "", "emits two outputs per item, keyed distinctly", nil},
	{"chatty", "", "logs 64 KiB on stderr per item: the kit must read stderr as it comes", nil},
	{"slow-ready", "ready", "sleeps past the ready timeout before ready", nil},
	{"strict-keys", "unknown-keys", "decodes hello and items strictly and crashes on a key it does not know", nil},
	{"pretty", "framing", "writes every message pretty-printed over several lines", nil},
	{"skip-answer", "answers", "forgets to answer an item it drops (payload skip: true)", nil},
	{"never-answers", "answers", "answers ready but never an item: named once, by answers, the other checks skipped after a short wait", []string{"unknown-keys", "config", "non-ascii", "large-payload", "burst"}},
	{"double-done", "answers", "answers every item twice", nil},
	{"heartbeat", "silence", "writes a heartbeat metric after every answer", nil},
	{"config-crash", "config", "exits at hello when a config value has the wrong type", nil},
	{"exit-3", "shutdown", "exits with status 3 on shutdown", nil},
	{"stdout-log", "stdout", "logs a text line on stdout before each answer", nil},
	{"small-buffer", "large-payload", "reads stdin with a 64 KiB line buffer and dies on a longer line", nil},
	{"mangle", "non-ascii", "replaces non-ASCII characters with ? in its outputs", nil},
	{"reverse-burst", "burst", "answers items already waiting on stdin in reverse order", nil},
	{"long-stderr", "stderr", "writes a log line of 100 KiB with no newline per item", nil},
	{"same-key", "outputs", "emits two outputs per item with the same key", nil},
	{"huge-line", "framing", "answers every item with a 9 MiB line, over the protocol's 8 MiB", []string{"answers"}},
	{"mute", "ready", "reads hello and never answers ready (its stdout is stuck in a buffer)", []string{"answers"}},
	{"ignore-shutdown", "shutdown", "keeps running when shutdown arrives", nil},
	{"bad-json", "framing", `answers {"type":"done","delivery":dl-…}, the delivery unquoted (not JSON)`, []string{"answers"}},
	{"batch-good", "", "declares batch, reads envelopes and answers each in one envelope", nil},
	{"batch-unread", "batch", "declares batch but skips the envelopes it reads", nil},
	{"batch-small-buffer", "batch", "declares batch but reads stdin with a 4 MiB line buffer and dies on the envelope at the limit", nil},
	{"batch-malformed", "framing", `declares batch and answers in envelopes with "msgs" for "messages"`, []string{"batch"}},
	{"batch-undeclared", "framing", "answers in envelopes without declaring batch", []string{"answers"}},
	{"truncated", "framing", `answers {"type":"done","delivery":"…" without its closing brace, then waits`, []string{"answers"}},
	{"concurrent-good", "", "declares concurrent and cancel; answers what waits on stdin last first, every emit before any done, and a cancel at once with a retryable error", nil},
	{"concurrent-batch", "", "concurrent-good that also declares batch, reading envelopes (a cancel may come in one) and answering on lines", nil},
	{"concurrent-swap", "concurrent", "declares concurrent; answers what waits on stdin with each emit carrying the payload of another item read with it", nil},
	{"cancel-unanswered", "cancel", "declares cancel; drops a cancelled item without a final answer", nil},
	{"bad-utf8", "non-ascii", "writes its outputs' non-ASCII text as Latin-1 bytes, which is not UTF-8 (a Perl action without an encoding layer)", nil},
}

// child runs the behaviour named by its argument as an action on stdin/stdout.
func child(b string) int {
	if strings.HasPrefix(b, "state-") {
		return stateChild(b)
	}
	if strings.HasPrefix(b, "concurrent-") || strings.HasPrefix(b, "cancel-") {
		return concurrentChild(b)
	}
	out := bufio.NewWriter(os.Stdout)
	var collect *[]any // answers gathered for one envelope
	flushEnvelope := func(key string) {
		data, _ := json.Marshal(map[string]any{"type": "batch", key: *collect})
		out.Write(append(data, '\n'))
		out.Flush()
		collect = nil
	}
	send := func(v any) {
		if collect != nil {
			*collect = append(*collect, v)
			return
		}
		var data []byte
		if b == "pretty" {
			data, _ = json.MarshalIndent(v, "", "  ")
		} else {
			data, _ = json.Marshal(v)
		}
		if b == "bad-utf8" {
			data = latin1(data)
		}
		if b == "mangle" {
			data = []byte(strings.Map(func(r rune) rune {
				if r > 127 {
					return '?'
				}
				return r
			}, string(data)))
		}
		out.Write(data)
		out.WriteByte('\n')
		out.Flush()
	}
	var next func() ([]byte, bool)
	var buffered func() int
	if b == "small-buffer" || b == "batch-small-buffer" {
		sc := bufio.NewScanner(os.Stdin) // the classic bug: a 64 KiB limit on a line
		if b == "batch-small-buffer" {
			sc.Buffer(nil, 4<<20) // enough for a 1 MiB payload, not for a full line
		}
		next = func() ([]byte, bool) {
			if !sc.Scan() {
				if sc.Err() != nil {
					fmt.Fprintln(os.Stderr, "reading stdin:", sc.Err())
					os.Exit(1)
				}
				return nil, false
			}
			return sc.Bytes(), true
		}
		buffered = func() int { return 0 }
	} else {
		in := bufio.NewReaderSize(os.Stdin, 1<<16)
		next = func() ([]byte, bool) {
			line, err := in.ReadBytes('\n')
			return line, err == nil
		}
		buffered = in.Buffered
	}
	configBad := false
	answer := func(m map[string]any) {
		d := m["delivery"]
		if b == "stdout-log" {
			fmt.Fprintf(out, "processing %v\n", m["id"])
		}
		if b == "chatty" {
			line := strings.Repeat("x", 1023)
			for range 64 {
				fmt.Fprintln(os.Stderr, line)
			}
		}
		if b == "long-stderr" {
			fmt.Fprint(os.Stderr, strings.Repeat("=", 100<<10))
		}
		if b == "huge-line" {
			send(map[string]any{"type": "emit", "delivery": d, "payload": strings.Repeat("x", 9<<20)})
		}
		if configBad {
			send(map[string]any{"type": "error", "delivery": d, "message": "config n must be a number", "retryable": false})
			return
		}
		payload, _ := m["payload"].(map[string]any)
		if b == "skip-answer" && payload["skip"] == true || b == "never-answers" {
			return
		}
		key, _ := m["key"].(string)
		switch b {
		case "good-multi":
			send(map[string]any{"type": "emit", "delivery": d, "outlet": "out", "key": key + "-a", "payload": m["payload"]})
			send(map[string]any{"type": "emit", "delivery": d, "outlet": "out", "key": key + "-b", "payload": m["payload"]})
		case "same-key":
			send(map[string]any{"type": "emit", "delivery": d, "key": key, "payload": m["payload"]})
			send(map[string]any{"type": "emit", "delivery": d, "key": key, "payload": m["payload"]})
		case "truncated":
			fmt.Fprintf(out, "{\"type\":\"done\",\"delivery\":%q\n", d)
			out.Flush()
			return
		case "bad-json":
			fmt.Fprintf(out, "{\"type\":\"done\",\"delivery\":%v}\n", d)
			out.Flush()
			return
		default:
			e := map[string]any{"type": "emit", "delivery": d, "payload": m["payload"]}
			if _, ok := m["key"]; ok {
				e["key"] = key
			}
			send(e)
		}
		send(map[string]any{"type": "done", "delivery": d})
		if b == "double-done" {
			send(map[string]any{"type": "done", "delivery": d})
		}
		if b == "heartbeat" {
			send(map[string]any{"type": "metric", "name": "heartbeat", "value": 1})
		}
	}
	var held []map[string]any
	for {
		line, ok := next()
		if !ok {
			return 0
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			fmt.Fprintln(os.Stderr, "not JSON:", err)
			continue
		}
		if b == "strict-keys" {
			if err := strict(line, m["type"]); err != nil {
				fmt.Fprintln(os.Stderr, "cannot decode:", err)
				return 1
			}
		}
		switch m["type"] {
		case "hello":
			cfg, _ := m["config"].(map[string]any)
			if _, ok := cfg["n"].(float64); !ok {
				if b == "config-crash" {
					fmt.Fprintln(os.Stderr, "panic: config n is not a number")
					return 2
				}
				configBad = true
			}
			if b == "slow-ready" {
				time.Sleep(time.Second)
			}
			if b == "mute" {
				continue
			}
			if strings.HasPrefix(b, "batch-") && b != "batch-undeclared" {
				send(map[string]any{"type": "ready", "window": 64, "batch": true})
				continue
			}
			send(map[string]any{"type": "ready"})
		case "batch":
			if b == "batch-unread" {
				continue
			}
			var env struct{ Messages []map[string]any }
			if err := json.Unmarshal(line, &env); err != nil {
				fmt.Fprintln(os.Stderr, "not an envelope:", err)
				return 1
			}
			collect = new([]any)
			for _, m := range env.Messages {
				answer(m)
			}
			key := "messages"
			if b == "batch-malformed" {
				key = "msgs"
			}
			flushEnvelope(key)
		case "item":
			if b == "reverse-burst" {
				held = append(held, m)
				if buffered() > 0 {
					continue
				}
				slices.Reverse(held)
				for _, h := range held {
					answer(h)
				}
				held = held[:0]
				continue
			}
			if b == "batch-undeclared" {
				collect = new([]any)
				answer(m)
				flushEnvelope("messages")
				continue
			}
			answer(m)
		case "shutdown":
			if b == "exit-3" {
				return 3
			}
			if b == "ignore-shutdown" {
				time.Sleep(time.Hour) // until the kit kills it
			}
			return 0
		}
	}
}

// latin1 writes every character of data below U+0100 as its one Latin-1 byte (and the others
// as '?'), as a program that never encodes its text does.
func latin1(data []byte) []byte {
	var out []byte
	for _, r := range string(data) {
		switch {
		case r < 0x80:
			out = append(out, byte(r))
		case r < 0x100:
			out = append(out, byte(r))
		default:
			out = append(out, '?')
		}
	}
	return out
}

// strict decodes a hello or an item refusing unknown keys, as a naive typed decoder does.
func strict(line []byte, typ any) error {
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	switch typ {
	case "hello":
		var h struct {
			Type     string         `json:"type"`
			Protocol int            `json:"protocol"`
			Action   string         `json:"action"`
			Version  string         `json:"version"`
			Config   map[string]any `json:"config"`
			Vars     map[string]any `json:"vars"`
		}
		return dec.Decode(&h)
	case "item":
		var it struct {
			Type           string          `json:"type"`
			Delivery       string          `json:"delivery"`
			ID             string          `json:"id"`
			Run            string          `json:"run"`
			Key            *string         `json:"key"`
			Payload        json.RawMessage `json:"payload"`
			Headers        []any           `json:"headers"`
			Inlet          string          `json:"inlet"`
			Topic          string          `json:"topic"`
			Partition      int             `json:"partition"`
			Offset         int             `json:"offset"`
			Timestamp      int64           `json:"timestamp"`
			Attempt        int             `json:"attempt"`
			IdempotencyKey string          `json:"idempotencyKey"`
		}
		return dec.Decode(&it)
	}
	return nil
}

// concurrentChild plays an action that runs deliveries at once: it declares "concurrent" and
// "cancel" and answers the items it has read whenever its input runs dry, last read first,
// every emit before any done (out of order, its deliveries' messages interleaved).
func concurrentChild(b string) int {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
		data, _ := json.Marshal(v)
		out.Write(append(data, '\n'))
	}
	var held []map[string]any
	flush := func() {
		n := len(held)
		for i := n - 1; i >= 0; i-- {
			payload := held[i]["payload"]
			if b == "concurrent-swap" && n > 1 {
				payload = held[(i+1)%n]["payload"]
			}
			e := map[string]any{"type": "emit", "delivery": held[i]["delivery"], "payload": payload}
			if k, ok := held[i]["key"]; ok {
				e["key"] = k
			}
			send(e)
		}
		for i := n - 1; i >= 0; i-- {
			send(map[string]any{"type": "done", "delivery": held[i]["delivery"]})
		}
		held = held[:0]
		out.Flush()
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			fmt.Fprintln(os.Stderr, "not JSON:", err)
			continue
		}
		msgs := []map[string]any{m}
		if m["type"] == "batch" {
			var env struct{ Messages []map[string]any }
			if err := json.Unmarshal(line, &env); err != nil {
				fmt.Fprintln(os.Stderr, "not an envelope:", err)
				return 1
			}
			msgs = env.Messages
		}
		for _, m := range msgs {
			switch m["type"] {
			case "hello":
				send(map[string]any{"type": "ready", "window": 64, "concurrent": true, "cancel": true, "batch": b == "concurrent-batch"})
			case "item":
				held = append(held, m)
			case "cancel":
				for i, h := range held {
					if h["delivery"] != m["delivery"] {
						continue
					}
					held = slices.Delete(held, i, i+1)
					if b != "cancel-unanswered" {
						send(map[string]any{"type": "error", "delivery": m["delivery"], "retryable": true, "message": "cancelled"})
					}
					break
				}
			case "shutdown":
				return 0
			}
		}
		if in.Buffered() == 0 {
			flush()
		}
	}
}
