package engine_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// window is the window every batch child declares.
const batchWindow = 4

// badEnvelopes are the lines the "batchbad" child answers an item with, by its payload: each a
// malformed envelope (D stands for the delivery). Those holding a metric first show that the
// messages before the fault are applied.
var badEnvelopes = map[string]string{
	"missing":     `{"type":"batch"}`,
	"notarray":    `{"type":"batch","messages":{"type":"done","delivery":"D"}}`,
	"notobject":   `{"type":"batch","messages":[M,"done"]}`,
	"unknowntype": `{"type":"batch","messages":[M,{"type":"launch","delivery":"D"}]}`,
	"notype":      `{"type":"batch","messages":[M,{"delivery":"D"}]}`,
	"nested":      `{"type":"batch","messages":[M,{"type":"batch","messages":[{"type":"done","delivery":"D"}]}]}`,
	"hello":       `{"type":"batch","messages":[M,{"type":"hello","protocol":1}]}`,
	"ready":       `{"type":"batch","messages":[M,{"type":"ready"}]}`,
	"shutdown":    `{"type":"batch","messages":[M,{"type":"shutdown"}]}`,
	"item":        `{"type":"batch","messages":[M,{"type":"item","delivery":"D","id":"x","payload":1}]}`,
	"unclosed":    `{"type":"batch","messages":[M,{"type":"done","delivery":"D"`,
}

// runBatchChild plays an action that declares a window of 4 and, except "batchundeclared",
// batch envelopes. Every emit it answers says how its item came: {"in": "line" or "batch",
// "n": messages in the envelope, "len": bytes of the line, "size": of the payload, "p": the
// payload when short}. It answers all items of one line in one write, packed as envelopes,
// except keyed "single", answered on lines of their own. Modes:
//
//   - batch: items with payload "gate" are held until four are, then answered once the
//     marker file exists; "at-limit" and "over-limit" are answered with an envelope of exactly
//     MaxLineBytes, and one byte more.
//   - batchbad: answers with the malformed envelope its payload names (badEnvelopes).
//   - batchundeclared: declares no batch, yet answers in envelopes.
//   - batchcrash: on attempt 1 holds items until four are, then writes half an envelope and
//     exits 3; later attempts are answered at once.
func runBatchChild(c *child, mode string) int {
	if hello, ok := c.next(); !ok || hello.Type != stdio.TypeHello {
		return 8
	}
	c.send(stdio.Message{Type: stdio.TypeReady, Window: batchWindow, Batch: mode != "batchundeclared"})
	marker := os.Getenv("STDIO_TEST_MARKER")
	var held []stdio.Message
	var out stdio.Packer
	for {
		l, ok := c.nextLine()
		if !ok {
			return 0
		}
		line, items, isBatch := l.raw, l.items, l.batch
		in := "line"
		if isBatch {
			in = "batch"
		}
		for _, m := range items {
			if m.Type == stdio.TypeShutdown {
				return 0
			}
			if m.Type != stdio.TypeItem {
				continue
			}
			payload := string(m.Payload)
			switch {
			case mode == "batchbad":
				kind, _ := strconv.Unquote(payload)
				metric := string(stdio.AppendMessage(nil, &stdio.Message{Type: stdio.TypeMetric, Delivery: m.Delivery, Name: "before", Value: 1}))
				bad := strings.ReplaceAll(badEnvelopes[kind], "M", strings.TrimSuffix(metric, "\n"))
				c.raw(strings.ReplaceAll(bad, `"D"`, strconv.Quote(m.Delivery)) + "\n")
			case mode == "batchcrash" && m.Attempt == 1:
				if held = append(held, m); len(held) == batchWindow {
					c.raw(`{"type":"batch","messages":[{"type":"done","delivery":"` + held[0].Delivery + `"},`)
					fmt.Fprintln(os.Stderr, "crash in the middle of an envelope")
					return 3
				}
			case payload == `"gate"`:
				if held = append(held, m); len(held) == batchWindow {
					awaitFile(marker)
					for _, h := range held {
						answer(&out, h, "gate", 0, 0)
					}
					held = held[:0]
				}
			case payload == `"at-limit"`, payload == `"over-limit"`:
				c.raw(limitEnvelope(m.Delivery, payload == `"over-limit"`))
			case m.Key != nil && *m.Key == "single":
				var lines stdio.Packer
				lines.Single = true
				answer(&lines, m, in, len(items), len(line))
				c.raw(string(lines.Bytes()))
			default:
				answer(&out, m, in, len(items), len(line))
			}
		}
		c.raw(string(out.Bytes()))
		out.Reset()
	}
}

// answer packs m's emit, telling how it came, and its done.
func answer(out *stdio.Packer, m stdio.Message, in string, n, size int) {
	p := fmt.Sprintf(`{"in":%q,"n":%d,"len":%d,"size":%d`, in, n, size, len(m.Payload))
	if len(m.Payload) <= 1000 {
		p += `,"p":` + string(m.Payload)
	}
	out.AppendMessage(&stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Key: m.Key, Payload: []byte(p + "}")})
	out.AppendMessage(&stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
}

// limitEnvelope returns an envelope of an emit and a done for delivery, of MaxLineBytes
// exactly (one byte more when over), with its newline.
func limitEnvelope(delivery string, over bool) string {
	emit := `{"type":"emit","delivery":"` + delivery + `","payload":"`
	done := `{"type":"done","delivery":"` + delivery + `"}`
	pad := stdio.MaxLineBytes - stdio.BatchOverhead - len(emit) - len(`"}`) - len(",") - len(done)
	if over {
		pad++
	}
	return `{"type":"batch","messages":[` + emit + strings.Repeat("x", pad) + `"},` + done + "]}\n"
}

// awaitFile waits, at most 20 s, until the test creates path.
func awaitFile(path string) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}
