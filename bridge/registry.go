package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/internal/settings"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// ErrNoRegistry is returned by NewServer (and RegistryFor) for an action that declares a
// registry-encoded port (--decode, --encode) when no schema registry is given.
var ErrNoRegistry = errors.New("bridge: the action declares registry-encoded ports (--decode/--encode) and no schema registry is set: set " + EnvSchemaRegistryURL)

// EnvSchemaRegistryURL is the variable of the schema registry's URLs; its siblings
// (MILLRACE_SCHEMA_REGISTRY_*: credentials, TLS, timeout, cache) are package schema's, rows of
// [Settings] all the same.
const EnvSchemaRegistryURL = "MILLRACE_SCHEMA_REGISTRY_URL"

// DefaultRegistryRetryFor is how long the bridge retries a schema registry that does not
// answer before it fails the batch (Options.RegistryRetryFor).
const DefaultRegistryRetryFor = 30 * time.Second

// registryRows are the rows of the bridge's table that package schema reads
// (SettingsFromEnv).
func registryRows() settings.Table[Config] {
	rows := make(settings.Table[Config], len(schema.Vars))
	for i, v := range schema.Vars {
		v.Meaning += "; read for the ports of --decode/--encode"
		rows[i] = settings.Row[Config]{Var: v}
	}
	return rows
}

// RegistryFor returns the schema registry client of s ([Config].SchemaRegistry) for a, for
// [Options].Registry: nil when a declares no encoded port (nothing is contacted), an error
// wrapping [ErrNoRegistry] when it does and s has no URL.
func RegistryFor(s schema.Settings, a *actionconf.Action, log *slog.Logger) (*schema.Registry, error) {
	if !a.Encoded() {
		return nil, nil
	}
	if len(s.URLs) == 0 {
		return nil, ErrNoRegistry
	}
	reg, err := schema.New(s, log)
	if err != nil {
		return nil, fmt.Errorf("bridge: schema registry: %w", err)
	}
	return reg, nil
}

// portCodecs is how one port's values and keys are encoded; nil is plain JSON.
type portCodecs struct {
	value, key *schema.Codec
}

// codecsOf returns the codecs of ports, nil when none is encoded, so that a plain port costs
// a nil check.
func codecsOf(ports []actionconf.Port) (map[string]portCodecs, error) {
	var m map[string]portCodecs
	for _, p := range ports {
		pc := portCodecs{value: codecOf(p.Value), key: codecOf(p.Key)}
		if pc.value == nil && pc.key == nil {
			continue
		}
		for _, c := range []*schema.Codec{pc.value, pc.key} {
			if c == nil {
				continue
			}
			if err := c.Check(); err != nil {
				return nil, fmt.Errorf("bridge: port %q: %w", p.Name, err)
			}
		}
		if m == nil {
			m = map[string]portCodecs{}
		}
		m[p.Name] = pc
	}
	return m, nil
}

func codecOf(e actionconf.Encoding) *schema.Codec {
	if !e.Encoded() {
		return nil
	}
	return &schema.Codec{Format: schema.Format(e.Format), Strategy: schema.Strategy(e.Strategy), Record: e.Record, Subject: e.Subject, Version: e.Version, ID: e.ID}
}

// configFault reports whether err is the registry's or the port's configuration rather than
// the record: the registry did not answer, or holds no schema for the port's subject. Such a
// record is never dead-lettered: its batch fails, nothing is committed, and it is redelivered
// once the registry answers or the schema is registered.
func configFault(err error) bool {
	return errors.Is(err, schema.ErrUnavailable) || errors.Is(err, schema.ErrNoSubject) || errors.Is(err, schema.ErrCodec)
}

// withRegistry calls f, and again with exponential backoff while the registry does not
// answer, for up to RegistryRetryFor or until the conversation ends (unless it gave up within
// the last RegistryRetryFor: then at once). The first call costs nothing more than f.
func (c *conversation) withRegistry(f func() error) error {
	err := f()
	if err == nil || !errors.Is(err, schema.ErrUnavailable) {
		return err
	}
	if t := c.s.registryGaveUp.Load(); t != 0 && time.Since(time.Unix(0, t)) < c.s.opts.RegistryRetryFor {
		return err // given up on moments ago: this batch fails at once, and is redelivered
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = c.s.opts.RegistryRetryFor
	c.log.Warn("the schema registry did not answer; retrying", "error", err, "for", b.MaxElapsedTime.String())
	last := err
	retryErr := backoff.Retry(func() error {
		last = f()
		if last != nil && !errors.Is(last, schema.ErrUnavailable) {
			return backoff.Permanent(last)
		}
		return last
	}, backoff.WithContext(b, c.ctx))
	if retryErr == nil {
		return nil
	}
	if errors.Is(last, schema.ErrUnavailable) {
		c.s.registryGaveUp.Store(time.Now().UnixNano())
	}
	return last
}

// decode decodes b, a record's value or key (key), with the registry, retried while it does
// not answer (withRegistry).
func (c *conversation) decode(topic string, key bool, codec schema.Codec, b []byte) (out []byte, err error) {
	err = c.withRegistry(func() (err error) {
		out, err = c.s.opts.Registry.Decode(c.ctx, topic, key, codec, b)
		return err
	})
	return out, err
}

// encode encodes b, an emit's payload or key (key), with the registry, retried while it does
// not answer (withRegistry).
func (c *conversation) encode(topic string, key bool, codec schema.Codec, b []byte) (out []byte, err error) {
	err = c.withRegistry(func() (err error) {
		out, err = c.s.opts.Registry.Encode(c.ctx, topic, key, codec, b)
		return err
	})
	return out, err
}

// decodeBatch decodes the records of an encoded inlet into items[i]'s payload and key. It
// returns the records that cannot be decoded (their own fault: a *schema.DataError), by
// index, and an error, wrapping the registry's, when the batch cannot be decoded at all: the
// registry did not answer for RegistryRetryFor, or holds no schema the port needs.
func (c *conversation) decodeBatch(pc portCodecs, topic string, recs []*flowv1.InputRecord, items []stdio.Item) (map[int]error, error) {
	var bad map[int]error
	for i, in := range recs {
		r := in.GetRecord()
		var err error
		if pc.value != nil && len(r.GetValue()) > 0 { // an empty value (a tombstone) stays null
			var v []byte
			if v, err = c.decode(topic, false, *pc.value, r.GetValue()); err == nil {
				items[i].Payload = json.RawMessage(v)
			}
		}
		if err == nil && pc.key != nil && len(r.GetKey()) > 0 {
			var k []byte
			if k, err = c.decode(topic, true, *pc.key, r.GetKey()); err == nil {
				s := string(k)
				items[i].Key, items[i].KeyBase64 = &s, ""
			}
		}
		if err == nil {
			continue
		}
		if c.ctx.Err() != nil || configFault(err) {
			return nil, err
		}
		record := recordID(topic, items[i].Partition, items[i].Offset)
		c.s.emit(Event{Kind: EventDecodeFailed, Conversation: c.id, Record: record, Err: err})
		if bad == nil {
			bad = map[int]error{}
		}
		bad[i] = fmt.Errorf("the record cannot be decoded for the action: %w; produce records in the format the action line's --decode names, or route such records away with --dead-letter", err)
	}
	return bad, nil
}

// submitDecoded hands the decoded items to the pool, and the records that could not be
// decoded straight to r as failed for good; a registry fault fails the whole batch before any
// record is handed over.
func (c *conversation) submitDecoded(r *batchRun, pc portCodecs, topic string, items []stdio.Item) {
	b := r.b
	bad, err := c.decodeBatch(pc, topic, b.GetRecords(), items)
	if err != nil {
		if c.ctx.Err() == nil {
			c.s.emit(Event{Kind: EventRegistryFailed, Conversation: c.id, Err: err})
			c.log.Warn("batch failed: the schema registry did not answer, or lacks a schema the inlet needs; the sidecar redelivers it", "batch", b.GetBatchId(), "error", err)
		}
		c.s.opts.Metrics.batch("fail")
		c.answer(b.GetBatchId(), []*flowv1.FromProcess{failMsg(b.GetBatchId(), fmt.Sprintf("batch %d of topic %s cannot be decoded: %v%s; nothing of it is committed and the sidecar redelivers it", b.GetBatchId(), topic, err, registryFix(err)))})
		putBlocks(r.batchBlocks)
		c.batches.Done()
		return
	}
	if len(bad) == 0 {
		c.submit(r, items, nil)
		return
	}
	good := make([]stdio.Item, 0, len(items)-len(bad))
	index := make([]int, 0, len(items)-len(bad))
	for i := range items {
		if _, ok := bad[i]; !ok {
			good = append(good, items[i])
			index = append(index, i)
		}
	}
	if len(good) > 0 {
		c.submit(r, good, index)
	}
	for i, err := range bad {
		r.finished(i, engine.Result{Outcome: engine.Failed, Err: err})
	}
}

// encodeEmit encodes an emit's payload and key for an encoded outlet. A payload that does not
// fit the schema is the record's fault (a *schema.DataError, never retried); a registry that
// does not answer is retried (withRegistry), then fails the batch.
func (c *conversation) encodeEmit(n int, pc portCodecs, outlet string, rec *flowv1.Record, textKey bool) error {
	topic := c.outlets[outlet]
	if pc.value != nil && len(rec.Value) > 0 && string(rec.Value) != "null" { // no payload, or null: a tombstone
		v, err := c.encode(topic, false, *pc.value, rec.Value)
		if err != nil {
			return c.encodeFailed(n, outlet, topic, err)
		}
		rec.Value = v
	} else if pc.value != nil {
		rec.Value = nil
	}
	if pc.key != nil && rec.Key != nil {
		if !textKey {
			return fmt.Errorf("emit %d: the keys of outlet %q are %s-encoded, from the JSON text in \"key\": give the key as JSON text there, not as keyBase64", n, outlet, pc.key.Format)
		}
		k, err := c.encode(topic, true, *pc.key, rec.Key)
		if err != nil {
			return c.encodeFailed(n, outlet, topic, err)
		}
		rec.Key = k
	}
	return nil
}

// registryFix is the fix of a registry that did not answer, for the message of the batch it
// fails; the other faults of configuration name theirs in err already.
func registryFix(err error) string {
	if errors.Is(err, schema.ErrUnavailable) {
		return "; check that the schema registry " + EnvSchemaRegistryURL + " names is up and reachable from the bridge"
	}
	return ""
}

func (c *conversation) encodeFailed(n int, outlet, topic string, err error) error {
	if configFault(err) {
		return fmt.Errorf("emit %d to outlet %q (topic %s) cannot be encoded: %w%s", n, outlet, topic, err, registryFix(err))
	}
	return fmt.Errorf("emit %d to outlet %q (topic %s) does not fit its schema: %w; emit a payload the outlet's schema accepts", n, outlet, topic, err)
}
