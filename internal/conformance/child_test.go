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
	stops bool // the fault ends every conversation: the checks it keeps from being judged say "SKIP name: <catch> failed"
}{
	{"good", "", "echoes each item's key and payload as one output", false},
	{"good-multi", "", "emits two outputs per item, keyed distinctly", false},
	{"chatty", "", "logs 64 KiB on stderr per item: the kit must read stderr as it comes", false},
	{"slow-ready", "ready", "sleeps past the ready timeout before ready", false},
	{"strict-keys", "unknown-keys", "decodes hello and items strictly and crashes on a key it does not know", false},
	{"pretty", "framing", "writes every message pretty-printed over several lines", false},
	{"skip-answer", "answers", "forgets to answer an item it drops (payload skip: true)", false},
	{"double-done", "answers", "answers every item twice", false},
	{"heartbeat", "silence", "writes a heartbeat metric after every answer", false},
	{"config-crash", "config", "exits at hello when a config value has the wrong type", false},
	{"exit-3", "shutdown", "exits with status 3 on shutdown", false},
	{"stdout-log", "stdout", "logs a text line on stdout before each answer", false},
	{"small-buffer", "large-payload", "reads stdin with a 64 KiB line buffer and dies on a longer line", false},
	{"mangle", "non-ascii", "replaces non-ASCII characters with ? in its outputs", false},
	{"reverse-burst", "burst", "answers items already waiting on stdin in reverse order", false},
	{"long-stderr", "stderr", "writes a log line of 100 KiB with no newline per item", false},
	{"same-key", "outputs", "emits two outputs per item with the same key", false},
	{"huge-line", "framing", "answers every item with a 9 MiB line, over the protocol's 8 MiB", true},
	{"mute", "ready", "reads hello and never answers ready (its stdout is stuck in a buffer)", true},
	{"ignore-shutdown", "shutdown", "keeps running when shutdown arrives", false},
	{"bad-json", "framing", `answers {"type":"done","delivery":dl-…}, the delivery unquoted (not JSON)`, true},
	{"bad-utf8", "non-ascii", "writes its outputs' non-ASCII text as Latin-1 bytes, which is not UTF-8 (a Perl action without an encoding layer)", false},
}

// child runs the behaviour named by its argument as an action on stdin/stdout.
func child(b string) int {
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
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
	if b == "small-buffer" {
		sc := bufio.NewScanner(os.Stdin) // the classic bug: a 64 KiB limit on a line
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
		if b == "skip-answer" && payload["skip"] == true {
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
			send(map[string]any{"type": "ready"})
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
