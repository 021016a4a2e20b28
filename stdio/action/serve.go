package action

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"

	gojson "github.com/goccy/go-json"

	"github.com/ankka-flow/millrace/stdio"
)

// answersHeld bounds the answer bytes the SDK packs before it writes them even though more
// input is waiting.
const answersHeld = 1 << 20

// typeCancel is the engine's {"type":"cancel","delivery":…}, sent only to an action whose
// ready declared "cancel": true.
const typeCancel = "cancel"

// session is one conversation with the engine.
type session[C any] struct {
	log       *slog.Logger
	config    C
	configErr error
	vars      map[string]any
	inlets    map[string]stdio.StateInlet // from hello: the inlets that keep state
	window    int                         // declared in ready
	seq       delivery                    // the one delivery in flight, one at a time

	// mu guards w and out: with Concurrency, calls answer from their own goroutines.
	mu  sync.Mutex
	w   *bufio.Writer
	out stdio.Packer // the answers not yet written, packed into envelopes

	conc *concurrent // nil: one at a time
}

// delivery is one item in the hands of the function, and what its call staged.
type delivery struct {
	item     stdio.Message
	emitted  int
	staged   bool // the function staged a state (state: nil deletes)
	state    json.RawMessage
	stateErr error // a state the engine would refuse: the item's error

	direct *stdio.Packer   // one at a time: messages go straight to the session's answers
	msgs   []stdio.Message // with Concurrency: held until the call returns
	c      context.Context // nil: never cancelled
	cancel context.CancelFunc
	single bool // the item came on a line of its own: its answers go on lines
	// answered: its final answer is written (or it was cancelled); guarded by session.mu.
	answered bool
}

func (d *delivery) ctx() context.Context {
	if d.c == nil {
		return context.Background()
	}
	return d.c
}

func (d *delivery) send(m *stdio.Message) {
	if d.direct != nil {
		d.direct.AppendMessage(m)
		return
	}
	d.msgs = append(d.msgs, *m)
}

// stage stages raw (nil: delete) as the item's new state, refusing what the engine refuses.
func (d *delivery) stage(inlets map[string]stdio.StateInlet, raw json.RawMessage) error {
	it := &d.item
	lim, ok := inlets[it.Inlet]
	var err error
	switch {
	case it.Key == nil && it.KeyBase64 == "":
		err = fmt.Errorf("item %s has no key, so it has no state: a state message is only for keyed records (route keyless ones elsewhere, or stage no state for them)", it.ID)
	case !ok:
		err = fmt.Errorf("inlet %s keeps no state: add --state %s to the action line, or stage no state for its items", it.Inlet, it.Inlet)
	case string(raw) == "null":
		raw = nil
	case lim.MaxBytes > 0 && len(raw) > lim.MaxBytes:
		err = fmt.Errorf("the state staged for item %s is %d bytes, over max-bytes %d (--state %s,max-bytes=…): keep less per key, or raise max-bytes", it.ID, len(raw), lim.MaxBytes, it.Inlet)
	}
	if err != nil {
		d.stateErr = err
		return err
	}
	d.staged, d.state = true, raw
	return nil
}

// emit stages one output, keeping the item's key unless key is set.
func (d *delivery) emit(v any, key *string, outlet string) error {
	var payload []byte
	switch p := v.(type) {
	case json.RawMessage:
		payload = p
	default:
		b, err := gojson.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding output %d as JSON: %w", d.emitted+1, err)
		}
		payload = b
	}
	m := stdio.Message{Type: stdio.TypeEmit, Delivery: d.item.Delivery, Outlet: outlet, Key: key, Payload: payload}
	if key == nil {
		m.Key, m.KeyBase64 = d.item.Key, d.item.KeyBase64
	}
	d.emitted++
	d.send(&m)
	return nil
}

// flushLocked writes the answers packed so far, then everything buffered. s.mu is held.
func (s *session[C]) flushLocked() error {
	s.w.Write(s.out.Bytes())
	s.out.Reset()
	return s.w.Flush()
}

func (s *session[C]) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

// ready is the action's ready line; concurrent and cancel are declared only with Concurrency,
// state only when the action line keeps state.
type ready struct {
	Type       string          `json:"type"`
	Window     int             `json:"window"`
	Batch      bool            `json:"batch"`
	Concurrent bool            `json:"concurrent,omitempty"`
	Cancel     bool            `json:"cancel,omitempty"`
	State      json.RawMessage `json:"state,omitempty"`
}

func serve[C, In any](in io.Reader, out, logs io.Writer, opts []Option, handle func(Context[C], In) error) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := &session[C]{w: bufio.NewWriterSize(out, 64<<10), log: slog.New(slog.NewJSONHandler(logs, nil)), window: Window}
	s.seq.direct = &s.out
	if o.concurrency > 1 {
		s.window = o.concurrency
		s.conc = newConcurrent(o.concurrency)
		go s.writer()
	}
	err := read(s, in, handle)
	if s.conc != nil {
		if err != nil || !s.conc.shutdown {
			s.conc.stop() // nobody reads the answers of the calls in flight: cancel them
		}
		s.conc.calls.Wait()
		s.conc.close()
		if err == nil && s.conc.werr != nil {
			err = fmt.Errorf("writing to stdout: %w", s.conc.werr)
		}
	}
	if ferr := s.flush(); err == nil && ferr != nil {
		err = fmt.Errorf("writing to stdout: %w", ferr)
	}
	return err
}

// read reads the engine's lines until shutdown or the end of in.
func read[C, In any](s *session[C], in io.Reader, handle func(Context[C], In) error) error {
	lr := stdio.NewLineReader(in, stdio.MaxLineBytes)
	var m stdio.Message
	helloSeen, stop := false, false
	// one is what a message means, on its own line or in an envelope; raw is its text.
	one := func(m *stdio.Message, raw []byte, single bool) error {
		switch m.Type {
		case stdio.TypeHello:
			helloSeen = true
			s.hello(m)
		case stdio.TypeShutdown:
			stop = true
			if s.conc != nil {
				s.conc.shutdown = true
			}
		case typeCancel:
			if s.conc != nil {
				s.cancelDelivery(m.Delivery)
			}
		case stdio.TypeItem:
			if !helloSeen {
				return errors.New("an item before hello")
			}
			if s.conc != nil {
				return s.start(raw, single, func(d *delivery) { answer(s, d, handle) })
			}
			s.seq.item = *m
			answer(s, &s.seq, handle)
			if s.out.Len() >= answersHeld {
				s.mu.Lock()
				s.w.Write(s.out.Bytes())
				s.out.Reset()
				s.mu.Unlock()
			}
		}
		return nil
	}
	inBatch := func(msg []byte) error {
		if stop {
			return nil // what follows a shutdown is not read
		}
		if err := known(stdio.DecodeInBatch(msg, &m)); err != nil {
			return err
		}
		return one(&m, msg, false)
	}
	for !stop {
		if lr.Buffered() == 0 {
			// Nothing more is waiting: answers go out now, not when the buffer fills.
			if err := s.flush(); err != nil {
				return fmt.Errorf("writing to stdout: %w", err)
			}
		}
		line, err := lr.ReadLine()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			if s.conc == nil {
				// Answers take the framing of what they answer: those to the items of an
				// envelope go in one, those to a line on lines (an engine that wrote
				// lines, or a tool that knows no envelopes, reads lines back).
				s.out.Bytes()
				s.out.Single = false
			}
			var isBatch bool
			if isBatch, err = stdio.SplitBatch(line, inBatch); !isBatch {
				if s.conc == nil {
					s.out.Single = true
				}
				if err = known(stdio.DecodeMessage(line, &m)); err == nil {
					err = one(&m, line, true)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("reading the engine's line: %w", err)
		}
	}
	return nil
}

// known passes the error of decoding a line from the engine, except for a message type the SDK
// does not know (the decoder then has filled the message, type included): the protocol may
// grow, and such a message is ignored, as an unknown key is. The engine sends cancel only
// to an action that declared it.
func known(err error) error {
	var pe *stdio.ProtocolError
	if errors.As(err, &pe) && pe.Rule == stdio.RuleUnknownType {
		return nil
	}
	return err
}

// hello keeps what hello says and answers ready, on a line of its own: the engine reads
// nothing else first.
func (s *session[C]) hello(m *stdio.Message) {
	s.vars = m.Vars
	if cfg := m.Config; len(cfg) > 0 && string(cfg) != "null" {
		if err := gojson.Unmarshal(cfg, &s.config); err != nil {
			var zero C
			s.configErr = fmt.Errorf("the action's config does not decode into %T: %w (fix the config; every item fails until then)", zero, err)
			s.log.Error("bad config", "err", s.configErr.Error())
		}
	}
	inlets, err := m.HelloState()
	if err != nil {
		s.log.Error("bad hello", "err", err.Error())
	}
	s.inlets = inlets
	r := ready{Type: stdio.TypeReady, Window: s.window, Batch: true, Concurrent: s.conc != nil, Cancel: s.conc != nil}
	if len(inlets) > 0 { // declared only when the action line keeps state
		r.State = json.RawMessage(`true`)
	}
	line, _ := json.Marshal(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(s.out.Bytes())
	s.out.Reset()
	s.w.Write(append(line, '\n'))
}

// answer runs the function for d's item and stages its answer.
func answer[C, In any](s *session[C], d *delivery, handle func(Context[C], In) error) {
	d.emitted = 0
	d.staged, d.state, d.stateErr = false, nil, nil
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic", "delivery", d.item.Delivery, "item", d.item.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		if s.configErr != nil {
			return s.configErr
		}
		var v In
		if raw, ok := any(&v).(*json.RawMessage); ok {
			*raw = d.item.Payload
		} else if len(d.item.Payload) > 0 {
			if err := gojson.Unmarshal(d.item.Payload, &v); err != nil {
				return fmt.Errorf("the payload of item %s does not decode into %T: %w", d.item.ID, v, err)
			}
		}
		if err := handle(Context[C]{s: s, d: d}, v); err != nil {
			return err
		}
		return d.stateErr
	}()
	id := d.item.Delivery
	var ab *abstainError
	switch {
	case err == nil:
		if d.staged {
			state := d.state
			if state == nil {
				state = json.RawMessage(`null`)
			}
			d.send(&stdio.Message{Type: stdio.TypeState, Delivery: id, State: state})
		}
		d.send(&stdio.Message{Type: stdio.TypeDone, Delivery: id})
	case errors.As(err, &ab):
		d.send(&stdio.Message{Type: stdio.TypeAbstain, Delivery: id, Reason: ab.reason})
	default:
		d.send(&stdio.Message{Type: stdio.TypeError, Delivery: id, Message: err.Error(), Retryable: IsRetryable(err)})
	}
}
