package local

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/sidecar"
	"github.com/ankka-flow/millrace/stdio"
)

// envelope is one input line of `millrace run`: the record to produce. Only Payload is
// needed; Topic defaults to the pipeline's input topic.
type envelope struct {
	Key       *string         `json:"key"`
	KeyBase64 string          `json:"keyBase64"`
	Payload   json.RawMessage `json:"payload"`
	Headers   []stdio.Header  `json:"headers"`
	Topic     string          `json:"topic"`
}

// parseRecord returns the record of an input line: an envelope, or with bare the payload itself.
// n is the line's number, for errors.
func parseRecord(line []byte, bare bool, n int, defaultTopic string) (*kgo.Record, error) {
	line = bytes.TrimSpace(line)
	rec := &kgo.Record{Topic: defaultTopic}
	if bare {
		if !json.Valid(line) {
			return nil, fmt.Errorf("%w %d: not JSON; with --bare each line is one JSON payload: %.80q", errInput, n, line)
		}
		var buf bytes.Buffer
		_ = json.Compact(&buf, line)
		rec.Value = buf.Bytes()
		return rec, nil
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || len(line) == 0 || line[0] != '{' {
		why := "not a JSON object"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("%w %d: %s; an input line is {\"key\": \"k1\", \"payload\": {…}, \"headers\": [{\"key\": \"h\", \"value\": \"v\"}]} (or a bare payload with --bare): %.80q", errInput, n, why, line)
	}
	if env.Topic != "" {
		rec.Topic = env.Topic
	}
	key, err := textOrBase64Bytes(env.Key, env.KeyBase64)
	if err != nil {
		return nil, fmt.Errorf("%w %d: keyBase64 is not base64: %w", errInput, n, err)
	}
	rec.Key = key
	if p := bytes.TrimSpace(env.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		var buf bytes.Buffer
		_ = json.Compact(&buf, p)
		rec.Value = buf.Bytes()
	}
	for _, h := range env.Headers {
		v, err := textOrBase64Bytes(h.Value, h.ValueBase64)
		if err != nil {
			return nil, fmt.Errorf("%w %d: header %q: valueBase64 is not base64: %w", errInput, n, h.Key, err)
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: v})
	}
	return rec, nil
}

// textOrBase64Bytes returns the bytes of a key or header value given as text or as Base64
// (text first; neither: nil, absent). It undoes the printer's textOrBase64.
func textOrBase64Bytes(text *string, b64 string) ([]byte, error) {
	switch {
	case text != nil:
		return []byte(*text), nil
	case b64 != "":
		return base64.StdEncoding.DecodeString(b64)
	}
	return nil, nil
}

// produceInput produces every input line, then marks the input done (or failed).
func (r *runner) produceInput(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	finish := func(err error) {
		r.mu.Lock()
		r.inputErr, r.inputEOF = err, err == nil
		r.mu.Unlock()
	}
	if r.opts.Input == nil {
		finish(nil)
		return
	}
	var (
		failMu  sync.Mutex
		failure error
	)
	lr := stdio.NewLineReader(r.opts.Input, sidecar.DefaultMaxMessageBytes)
	for n := 1; ; n++ {
		line, err := lr.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, stdio.ErrLineTooLong) {
			finish(fmt.Errorf("%w %d: longer than %d MiB, the largest record the sidecar passes to a streamlet: keep large data elsewhere and send a reference", errInput, n, sidecar.DefaultMaxMessageBytes>>20))
			return
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			finish(fmt.Errorf("%w %d: %w", errInput, n, err))
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				break
			}
			continue
		}
		rec, rerr := parseRecord(line, r.opts.Bare, n, r.p.Input)
		if rerr == nil {
			rerr = r.lr.encodeInput(ctx, rec, n)
		}
		if rerr != nil {
			finish(rerr)
			return
		}
		r.admin.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			if err != nil {
				failMu.Lock()
				switch {
				case failure != nil:
				case errors.Is(err, kerr.MessageTooLarge):
					failure = fmt.Errorf("%w %d: its record is %d bytes, more than topic %s accepts (Kafka's default max.message.bytes is 1 MiB, and a cluster at its defaults refuses it too): keep large data elsewhere and send a reference", errInput, n, len(rec.Value), rec.Topic)
				default:
					failure = fmt.Errorf("producing input line %d to %s: %w", n, rec.Topic, err)
				}
				failMu.Unlock()
			}
		})
		r.mu.Lock()
		r.in++
		r.mu.Unlock()
		if err != nil { // the last line, without a newline
			break
		}
		if ctx.Err() != nil {
			return
		}
	}
	if err := r.admin.Flush(ctx); err != nil {
		finish(fmt.Errorf("producing the input: %w", err))
		return
	}
	failMu.Lock()
	defer failMu.Unlock()
	finish(failure)
}
