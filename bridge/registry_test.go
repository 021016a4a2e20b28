package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

const (
	// listingAvsc is the inlet's schema: in-topic-value.
	listingAvsc = `{"type":"record","name":"Listing","namespace":"acme","fields":[{"name":"id","type":"string"},{"name":"rooms","type":"int"}]}`
	// scoreAvsc is the outlet's schema: out-topic-value. It wants a field the listing has not.
	scoreAvsc  = `{"type":"record","name":"Listing","namespace":"acme","fields":[{"name":"id","type":"string"},{"name":"rooms","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
	strictAvsc = `{"type":"record","name":"Score","namespace":"acme","fields":[{"name":"score","type":"double"}]}`
)

// registry is an srfake registry on 127.0.0.1 with the subjects seeded, and the client of it.
type registry struct {
	fake     *srfake.Registry
	reg      *schema.Registry
	down     atomic.Bool // the registry answers 503 while set
	subjects atomic.Bool // the registry answers 503 to requests about subjects while set
}

func newRegistry(t *testing.T, subjects map[string]string) *registry {
	t.Helper()
	r := &registry{fake: srfake.New()}
	t.Cleanup(r.fake.Close)
	r.fake.Intercept(func(w http.ResponseWriter, req *http.Request) bool {
		if r.down.Load() || r.subjects.Load() && strings.HasPrefix(req.URL.Path, "/subjects/") {
			http.Error(w, `{"error_code":50301,"message":"down for the test"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	for subject, avsc := range subjects {
		if _, _, err := r.fake.RegisterSchema(subject, sr.Schema{Schema: avsc, Type: sr.TypeAvro}); err != nil {
			t.Fatalf("register %s: %v", subject, err)
		}
	}
	reg, err := schema.New(schema.Settings{URLs: []string{r.fake.URL()}, Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r.reg = reg
	return r
}

// encode is what a producer with the Confluent serializer writes for v to topic's values.
func (r *registry) encode(t *testing.T, topic, v string) string {
	t.Helper()
	b, err := r.reg.Encode(context.Background(), topic, false, schema.Codec{Format: schema.Avro}, []byte(v))
	if err != nil {
		t.Fatalf("encode %s for %s: %v", v, topic, err)
	}
	return string(b)
}

// decoded is what a consumer with the Confluent deserializer reads from an emit to topic.
func (r *registry) decoded(t *testing.T, topic string, e *flowv1.Emit) map[string]any {
	t.Helper()
	v := e.GetRecord().GetValue()
	if len(v) < 5 || v[0] != 0 {
		t.Fatalf("emit value %q is not in the wire format (magic byte 0, schema id)", v)
	}
	j, err := r.reg.Decode(context.Background(), topic, false, schema.Codec{Format: schema.Avro}, v)
	if err != nil {
		t.Fatalf("decode the emit to %s: %v", topic, err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func errorHeader(e *flowv1.Emit) string {
	h, _ := headersOf(e.GetRecord())
	return h["millrace-error"]
}

// TestEncodedNeedsRegistry: an action with an encoded port and no registry does not start,
// with the variable to set; the bridge's settings read the registry's (every bad value named);
// a plain action gets no registry, whatever they say.
func TestEncodedNeedsRegistry(t *testing.T) {
	a, err := actionconf.ParseString(`t --in in=x.v1 --decode in=avro -- prog`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.NewServer(bridge.Options{Action: a}); !errors.Is(err, bridge.ErrNoRegistry) || !strings.Contains(err.Error(), bridge.EnvSchemaRegistryURL) {
		t.Errorf("NewServer(encoded, no registry) = %v; want ErrNoRegistry naming %s", err, bridge.EnvSchemaRegistryURL)
	}
	cfg, err := bridge.ConfigFromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.RegistryFor(cfg.SchemaRegistry, a, nil); !errors.Is(err, bridge.ErrNoRegistry) {
		t.Errorf("RegistryFor(encoded, no URL) = %v; want ErrNoRegistry", err)
	}
	env := map[string]string{bridge.EnvSchemaRegistryURL: "http://127.0.0.1:8081"}
	cfg, err = bridge.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || !reflect.DeepEqual(cfg.SchemaRegistry.URLs, []string{"http://127.0.0.1:8081"}) {
		t.Fatalf("ConfigFromEnv(%v) = %+v, %v; want the registry's URL", env, cfg, err)
	}
	if reg, err := bridge.RegistryFor(cfg.SchemaRegistry, a, nil); reg == nil || err != nil {
		t.Errorf("RegistryFor(encoded, a URL) = %v, %v; want a client", reg, err)
	}
	plain, err := actionconf.ParseString(`t --in in=x.v1 -- prog`)
	if err != nil {
		t.Fatal(err)
	}
	if reg, err := bridge.RegistryFor(cfg.SchemaRegistry, plain, nil); reg != nil || err != nil {
		t.Errorf("RegistryFor(plain) = %v, %v; want none", reg, err)
	}
	env["MILLRACE_SCHEMA_REGISTRY_TIMEOUT"] = "soon"
	if _, err := bridge.ConfigFromEnv(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "MILLRACE_SCHEMA_REGISTRY_TIMEOUT") {
		t.Errorf("ConfigFromEnv(a bad timeout) = %v; want an error naming MILLRACE_SCHEMA_REGISTRY_TIMEOUT", err)
	}
}

// TestDecodeEncode: a record of an Avro inlet reaches the program as JSON, and its emit to an
// Avro outlet is in the wire format with the outlet's schema; a record that is not in the wire
// format never reaches the program and is dead-lettered with the reason; an emit that does not
// fit the outlet's schema is dead-lettered too, naming the field.
func TestDecodeEncode(t *testing.T) {
	r := newRegistry(t, map[string]string{"in-topic-value": listingAvsc, "out-topic-value": scoreAvsc})
	var got events
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq --decode in=avro --encode out=avro", func(o *bridge.Options) {
		o.Registry, o.Events = r.reg, got.add
	})
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	good := r.encode(t, "in-topic", `{"id":"l-1","rooms":3}`)
	// no magic byte; an id the registry does not know; the listing's id with bytes that are no listing
	bad := map[int64]struct{ value, reason string }{
		2: {`{"id":"not-avro","rooms":1}`, "magic"},
		3: {"\x00\x00\x00\x03\xe7\x02\x06", "999"},
		4: {good[:5] + "\xff\xff\xff", "schema id"},
	}
	s.batch(1, 0, rec(1, nil, good), rec(2, nil, bad[2].value), rec(3, nil, bad[3].value), rec(4, nil, bad[4].value), rec(5, nil, good))
	a := s.wait(1)
	if !a.ack || len(a.emits) != 5 {
		t.Fatalf("answer = %v; want Ack after 2 emits and 3 dead letters", a)
	}
	for _, i := range []int{0, 4} {
		if a.emits[i].GetOutlet() != "out" {
			t.Fatalf("emit %d to %q; want out", i, a.emits[i].GetOutlet())
		}
		if m := r.decoded(t, "out-topic", a.emits[i]); m["id"] != "l-1" || m["rooms"] != float64(3) {
			t.Errorf("emit %d decodes to %v; want the listing back", i, m)
		}
	}
	var de *schema.DataError
	for off := int64(2); off <= 4; off++ {
		dl := a.emits[off-1]
		if dl.GetOutlet() != "dlq" || string(dl.GetRecord().GetValue()) != bad[off].value || !strings.Contains(errorHeader(dl), "cannot be decoded") || !strings.Contains(errorHeader(dl), bad[off].reason) || !strings.Contains(errorHeader(dl), "produce records in the format the action line's --decode names") {
			t.Errorf("dead letter of offset %d = %v, millrace-error %q; want the record unchanged and the decode error naming %q and the fix", off, dl, errorHeader(dl), bad[off].reason)
		}
		id := fmt.Sprintf("in-topic/0/%d", off)
		if ev, ok := got.record(bridge.EventDecodeFailed, id); !ok || !errors.As(ev.Err, &de) {
			t.Errorf("decode-failed of %s = %+v (found %v); want a *schema.DataError", id, ev, ok)
		}
		if _, ok := got.record(bridge.EventRecordDeadLettered, id); !ok {
			t.Errorf("no record-dead-lettered event for %s", id)
		}
	}
	expectEOF(t, s.stop())
	s.check()

	// an emit that does not fit: the outlet's schema wants a score
	r2 := newRegistry(t, map[string]string{"in-topic-value": listingAvsc, "out-topic-value": strictAvsc})
	var got2 events
	b2 := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq --decode in=avro --encode out=avro", func(o *bridge.Options) {
		o.Registry, o.Events = r2.reg, got2.add
	})
	s2 := dial(t, b2.addr)
	s2.start(b2, "c2", 0)
	s2.batch(1, 0, rec(4, nil, r2.encode(t, "in-topic", `{"id":"l-2","rooms":1}`)))
	a2 := s2.wait(1)
	if !a2.ack || len(a2.emits) != 1 || a2.emits[0].GetOutlet() != "dlq" || !strings.Contains(errorHeader(a2.emits[0]), "does not fit its schema") {
		t.Fatalf("answer = %v; want Ack after the record dead-lettered for its emit", a2)
	}
	if ev, ok := got2.record(bridge.EventEncodeFailed, "in-topic/0/4"); !ok || !errors.As(ev.Err, &de) {
		t.Errorf("encode-failed of in-topic/0/4 = %+v (found %v); want a *schema.DataError", ev, ok)
	}
	expectEOF(t, s2.stop())
	s2.check()
}

// TestUndecodableWithoutDeadLetter: without --dead-letter a record that cannot be decoded fails
// its batch, as a value that is not JSON does.
func TestUndecodableWithoutDeadLetter(t *testing.T) {
	r := newRegistry(t, map[string]string{"in-topic-value": listingAvsc})
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --decode in=avro", func(o *bridge.Options) { o.Registry = r.reg })
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	s.batch(1, 0, rec(7, nil, "\x00\x00\x00\x03\x99garbage"))
	a := s.wait(1)
	if a.fail == nil || !strings.Contains(a.fail.GetError().GetMessage(), "in-topic/0/7") || !strings.Contains(a.fail.GetError().GetMessage(), "cannot be decoded") {
		t.Fatalf("answer = %v; want Fail naming the record and the decode", a)
	}
	expectEOF(t, s.stop())
	s.check()
}

// TestRegistryDown: while the registry does not answer, a batch of an encoded inlet is retried
// for RegistryRetryFor and then failed, nothing of it dead-lettered and nothing handed to the
// program; once it answers again the redelivered batch goes through.
func TestRegistryDown(t *testing.T) {
	r := newRegistry(t, map[string]string{"in-topic-value": listingAvsc, "out-topic-value": scoreAvsc})
	good := r.encode(t, "in-topic", `{"id":"l-3","rooms":2}`)
	// a fresh client, whose cache holds nothing yet
	reg, err := schema.New(schema.Settings{URLs: []string{r.fake.URL()}, Timeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var got events
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq --decode in=avro --encode out=avro", func(o *bridge.Options) {
		o.Registry, o.Events, o.RegistryRetryFor = reg, got.add, 300*time.Millisecond
	})
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	r.down.Store(true)
	s.batch(1, 0, rec(1, nil, good))
	a := s.wait(1)
	if a.fail == nil || len(a.emits) != 0 {
		t.Fatalf("answer = %v; want Fail and no dead letter", a)
	}
	if msg := a.fail.GetError().GetMessage(); !strings.Contains(msg, "check that the schema registry "+bridge.EnvSchemaRegistryURL+" names is up") || !strings.Contains(msg, "nothing of it is committed") {
		t.Errorf("Fail message %q; want it naming the fix (%s) and that nothing is committed", msg, bridge.EnvSchemaRegistryURL)
	}
	evs := got.of(bridge.EventRegistryFailed)
	if len(evs) != 1 || !errors.Is(evs[0].Err, schema.ErrUnavailable) {
		t.Errorf("registry-failed events = %+v; want one wrapping schema.ErrUnavailable", evs)
	}
	if evs := got.of(bridge.EventRecordDeadLettered); len(evs) != 0 {
		t.Errorf("record-dead-lettered events = %+v; want none", evs)
	}
	r.down.Store(false)
	s.batch(2, 0, rec(1, nil, good))
	if a := s.wait(2); !a.ack || len(a.emits) != 1 || r.decoded(t, "out-topic", a.emits[0])["id"] != "l-3" {
		t.Fatalf("redelivered answer = %v; want Ack after the emit", a)
	}
	expectEOF(t, s.stop())
	s.check()
}

// TestRegistryDownOnEncode: when the registry answers for the input's schema id but not for
// the outlet's subject, the emit cannot be encoded: the batch is failed after the retries,
// the record is not dead-lettered (it is not the record's fault), and a registry-failed event
// names it.
func TestRegistryDownOnEncode(t *testing.T) {
	r := newRegistry(t, map[string]string{"in-topic-value": listingAvsc, "out-topic-value": scoreAvsc})
	good := r.encode(t, "in-topic", `{"id":"l-5","rooms":2}`)
	reg, err := schema.New(schema.Settings{URLs: []string{r.fake.URL()}, Timeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var got events
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq --decode in=avro --encode out=avro", func(o *bridge.Options) {
		o.Registry, o.Events, o.RegistryRetryFor = reg, got.add, 300*time.Millisecond
	})
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	r.subjects.Store(true)
	s.batch(1, 0, rec(1, nil, good), rec(2, nil, good))
	a := s.wait(1)
	if a.fail == nil || len(a.emits) != 0 {
		t.Fatalf("answer = %v; want Fail and no dead letter", a)
	}
	if msg := a.fail.GetError().GetMessage(); !strings.Contains(msg, "cannot be encoded") || !strings.Contains(msg, "check that the schema registry "+bridge.EnvSchemaRegistryURL+" names is up") {
		t.Errorf("Fail message %q; want the emit that cannot be encoded and the fix (%s)", msg, bridge.EnvSchemaRegistryURL)
	}
	if ev, ok := got.record(bridge.EventRegistryFailed, "in-topic/0/1"); !ok || !errors.Is(ev.Err, schema.ErrUnavailable) {
		t.Errorf("registry-failed of in-topic/0/1 = %+v (found %v); want it wrapping schema.ErrUnavailable", ev, ok)
	}
	if evs := got.of(bridge.EventRecordDeadLettered); len(evs) != 0 {
		t.Errorf("record-dead-lettered events = %+v; want none", evs)
	}
	expectEOF(t, s.stop())
	s.check()
}

// TestEncodedKeys: an encoded key reaches the program as its JSON text, and the program's key
// to an encoded outlet key is encoded from its JSON text; the value may be plain meanwhile.
func TestEncodedKeys(t *testing.T) {
	const opAvsc = `{"type":"record","name":"Op","fields":[{"name":"op","type":"string"}]}`
	r := newRegistry(t, map[string]string{"in-topic-value": opAvsc, "in-topic-key": `"string"`, "out-topic-key": `"string"`})
	key, err := r.reg.Encode(context.Background(), "in-topic", true, schema.Codec{Format: schema.Avro}, []byte(`"k1"`))
	if err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --decode in=avro --decode in.key=avro --encode out.key=avro", func(o *bridge.Options) { o.Registry = r.reg })
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	s.batch(1, 0, rec(1, key, r.encode(t, "in-topic", `{"op":"inspect"}`)))
	a := s.wait(1)
	if !a.ack || len(a.emits) != 1 {
		t.Fatalf("answer = %v; want Ack after 1 emit", a)
	}
	var seen struct {
		Item struct {
			Key     string          `json:"key"`
			Payload json.RawMessage `json:"payload"`
		} `json:"item"`
	}
	if err := json.Unmarshal(a.emits[0].GetRecord().GetValue(), &seen); err != nil || seen.Item.Key != `"k1"` || string(seen.Item.Payload) != `{"op":"inspect"}` {
		t.Errorf("the program saw key %q and payload %s (%v); want the key's JSON text \"k1\" and the decoded op", seen.Item.Key, seen.Item.Payload, err)
	}
	k, err := r.reg.Decode(context.Background(), "out-topic", true, schema.Codec{Format: schema.Avro}, a.emits[0].GetRecord().GetKey())
	if err != nil || string(k) != `"k1"` {
		t.Errorf("the emit's key decodes to %s, %v; want \"k1\"", k, err)
	}
	expectEOF(t, s.stop())
	s.check()
}

// TestEncodeMisfitNamesField: an emit whose field does not fit the outlet's schema is
// dead-lettered with the field's path, the reason and the fix in millrace-error.
func TestEncodeMisfitNamesField(t *testing.T) {
	const roomsAsText = `{"type":"record","name":"Listing","namespace":"acme","fields":[{"name":"id","type":"string"},{"name":"rooms","type":"string"}]}`
	r := newRegistry(t, map[string]string{"in-topic-value": listingAvsc, "out-topic-value": roomsAsText})
	b := startBridge(t, "t --in in=x.v1 --out out=y.v1 --out dlq=x.v1 --dead-letter dlq --decode in=avro --encode out=avro", func(o *bridge.Options) { o.Registry = r.reg })
	s := dial(t, b.addr)
	s.start(b, "c", 0)
	s.batch(1, 0, rec(1, nil, r.encode(t, "in-topic", `{"id":"l-7","rooms":2}`)))
	a := s.wait(1)
	if !a.ack || len(a.emits) != 1 || a.emits[0].GetOutlet() != "dlq" {
		t.Fatalf("answer = %v; want Ack after the record dead-lettered for its emit", a)
	}
	for _, want := range []string{`emit 1 to outlet "out"`, "does not fit its schema", "$.rooms", "emit a payload the outlet's schema accepts"} {
		if !strings.Contains(errorHeader(a.emits[0]), want) {
			t.Errorf("millrace-error %q; want it with %q", errorHeader(a.emits[0]), want)
		}
	}
	expectEOF(t, s.stop())
	s.check()
}
