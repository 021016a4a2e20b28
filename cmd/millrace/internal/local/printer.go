package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/stdio"
)

// startPrinter consumes the outlet topics from the positions in r.pos and writes each record
// as a JSON line.
func (r *runner) startPrinter(ctx context.Context, brokers []string, wg *sync.WaitGroup) error {
	parts := map[string]map[int32]kgo.Offset{}
	for t, ps := range r.pos {
		parts[t] = map[int32]kgo.Offset{}
		for p, off := range ps {
			parts[t][p] = kgo.NewOffset().At(off)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	// read_committed: an aborted write of an exactly-once sidecar is never printed. Control
	// records are kept to move the position past a transaction's marker (caughtUp compares it
	// with the end offsets).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(parts), kafkaLogger(r.log, "printer"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return fmt.Errorf("the output consumer: %w", err)
	}
	several := len(r.p.Streamlets) > 1
	wg.Go(func() {
		defer cl.Close()
		w := bufio.NewWriter(r.opts.Out)
		for {
			fetches := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fetches.EachRecord(func(rec *kgo.Record) {
				if rec.Attrs.IsControl() {
					r.mu.Lock()
					r.pos[rec.Topic][rec.Partition] = rec.Offset + 1
					r.mu.Unlock()
					return
				}
				who := r.outlets[rec.Topic]
				r.lr.decodeOutput(ctx, rec)
				line := outputLine(rec, who, several)
				w.Write(line)
				w.WriteByte('\n')
				r.mu.Lock()
				r.out[who.label(several)]++
				r.pos[rec.Topic][rec.Partition] = rec.Offset + 1
				r.data[rec.Topic][rec.Partition] = rec.Offset + 1
				r.mu.Unlock()
			})
			w.Flush()
		}
	})
	return nil
}

func (o outletName) label(several bool) string {
	if several {
		return o.streamlet + "." + o.port
	}
	return o.port
}

// outputRecord is one line `millrace run` prints: a record one of the streamlets produced.
// Key and header values that are not UTF-8 come in the Base64 siblings; a value that is not
// JSON comes as ValueBase64 instead of Payload.
type outputRecord struct {
	Streamlet   string          `json:"streamlet,omitempty"` // in a pipeline of several
	Outlet      string          `json:"outlet"`
	Key         *string         `json:"key,omitempty"`
	KeyBase64   string          `json:"keyBase64,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	ValueBase64 string          `json:"valueBase64,omitempty"`
	Headers     []stdio.Header  `json:"headers,omitempty"`
}

func outputLine(rec *kgo.Record, who outletName, several bool) []byte {
	o := outputRecord{Outlet: who.port}
	if several {
		o.Streamlet = who.streamlet
	}
	if rec.Key != nil {
		o.Key, o.KeyBase64 = textOrBase64(rec.Key)
	}
	switch {
	case len(rec.Value) == 0:
		o.Payload = json.RawMessage("null")
	case json.Valid(rec.Value):
		var buf bytes.Buffer
		_ = json.Compact(&buf, rec.Value)
		o.Payload = buf.Bytes()
	default:
		o.ValueBase64 = base64.StdEncoding.EncodeToString(rec.Value)
	}
	for _, h := range rec.Headers {
		sh := stdio.Header{Key: h.Key}
		sh.Value, sh.ValueBase64 = textOrBase64(h.Value)
		o.Headers = append(o.Headers, sh)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(o)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func textOrBase64(b []byte) (*string, string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

// outletName is who writes an outlet topic: a streamlet's port.
type outletName struct{ streamlet, port string }
