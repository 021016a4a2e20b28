package schema_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// fake is a registry on 127.0.0.1 with a client of it.
type fake struct {
	*srfake.Registry
	reg *schema.Registry
	// fetches counts the requests per path.
	mu      sync.Mutex
	fetches map[string]int
}

func newFake(t testing.TB, s schema.Settings) *fake {
	t.Helper()
	f := &fake{Registry: srfake.New(), fetches: map[string]int{}}
	t.Cleanup(f.Close)
	f.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		f.mu.Lock()
		f.fetches[r.URL.Path]++
		f.mu.Unlock()
		return false
	})
	s.URLs = []string{f.URL()}
	reg, err := schema.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.reg = reg
	return f
}

func (f *fake) fetched(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches[path]
}

func (f *fake) register(t testing.TB, subject string, s sr.Schema) int {
	t.Helper()
	id, _, err := f.RegisterSchema(subject, s)
	if err != nil {
		t.Fatalf("RegisterSchema(%s): %v", subject, err)
	}
	return id
}

// sameJSON fails unless got and want are the same JSON value.
func sameJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s = %s: not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s; want %s", what, got, want)
	}
}

// dataErr fails unless err is a *DataError at path whose reason holds reason.
func dataErr(t *testing.T, what string, err error, path, reason string) *schema.DataError {
	t.Helper()
	var de *schema.DataError
	if !errors.As(err, &de) {
		t.Fatalf("%s: err = %v; want a *DataError", what, err)
	}
	if de.Path != path || !strings.Contains(de.Reason, reason) {
		t.Errorf("%s: DataError{Path: %q, Reason: %q}; want path %q and a reason with %q", what, de.Path, de.Reason, path, reason)
	}
	return de
}

func wire(id int, payload []byte) []byte {
	var h sr.ConfluentHeader
	b, _ := h.AppendEncode(nil, id, nil)
	return append(b, payload...)
}

// orderJSON is a testdata/order.avsc Order in the Avro JSON encoding: the union tagged, the bytes and fixed as
// code points 0-255, the logical types as the types under them.
const orderJSON = `{"id":7,"at":1700000000123,"day":19000,"price":"\u0001\u00e2","ref":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
	"blob":"\u00ff\u0000a","tag":"ab","note":{"string":"leave at door"},"ship":{"zip":"00100","lines":["Main St 1"]},
	"state":"PAID","counts":{"apples":3}}`

// TestAvro: bytes a plain Avro encoder wrote decode to the Avro JSON encoding, and that JSON
// encodes to the same bytes.
func TestAvro(t *testing.T) {
	f := newFake(t, schema.Settings{})
	id := f.register(t, "orders-value", sr.Schema{Schema: readTestdata(t, "order.avsc")})
	s := avro.MustParse(readTestdata(t, "order.avsc"))
	var v any
	if err := s.DecodeJSON([]byte(orderJSON), &v); err != nil {
		t.Fatal(err)
	}
	payload, err := s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	c := schema.Codec{Format: schema.Avro}
	ctx := context.Background()

	got, err := f.reg.Decode(ctx, "orders", false, c, wire(id, payload))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sameJSON(t, "Decode", got, orderJSON)

	enc, err := f.reg.Encode(ctx, "orders", false, c, []byte(orderJSON))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if !bytes.Equal(enc, wire(id, payload)) {
		t.Errorf("Encode = %x; want %x", enc, wire(id, payload))
	}

	// A union branch given bare, and a field left to its default, encode too.
	bare := strings.Replace(orderJSON, `"note":{"string":"leave at door"},`, ``, 1)
	enc, err = f.reg.Encode(ctx, "orders", false, c, []byte(bare))
	if err != nil {
		t.Fatalf("Encode without the defaulted union: %v", err)
	}
	got, err = f.reg.Decode(ctx, "orders", false, c, enc)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "Decode(Encode(note left out))", got, strings.Replace(orderJSON, `{"string":"leave at door"}`, `null`, 1))
}

// TestAvroDataErrors: each fault of the record is a *DataError naming the field and why.
func TestAvroDataErrors(t *testing.T) {
	f := newFake(t, schema.Settings{})
	id := f.register(t, "orders-value", sr.Schema{Schema: readTestdata(t, "order.avsc")})
	c := schema.Codec{Format: schema.Avro}
	ctx := context.Background()
	for _, tc := range []struct {
		name, path, reason string
		data               []byte
	}{
		{"empty", "", "empty", nil},
		{"no magic byte", "", "not the magic byte 0", []byte(`{"id":1}`)},
		{"short header", "", "shorter than the 5", []byte{0, 0, 0}},
		{"unknown id", "", "knows no schema id 999", wire(999, []byte{2})},
		{"truncated", "$.at", "end inside the Avro value", wire(id, []byte{14})},
		{"left over", "", "left after the Avro value", append(func() []byte {
			e, _ := f.reg.Encode(ctx, "orders", false, c, []byte(orderJSON))
			return e
		}(), 1, 2, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.reg.Decode(ctx, "orders", false, c, tc.data)
			de := dataErr(t, "Decode", err, tc.path, tc.reason)
			if de.Topic != "orders" || de.Key {
				t.Errorf("DataError names topic %q key %v; want orders, false", de.Topic, de.Key)
			}
		})
	}
	for _, tc := range []struct {
		name, json, path string
	}{
		{"wrong type", strings.Replace(orderJSON, `"id":7`, `"id":"seven"`, 1), "$.id"},
		{"nested field", strings.Replace(orderJSON, `"zip":"00100"`, `"zip":5`, 1), "$.ship.zip"},
		{"enum symbol", strings.Replace(orderJSON, `"PAID"`, `"LOST"`, 1), "$.state"},
		// The library names no field for a missing one at the top; its message does.
		{"missing field", strings.Replace(orderJSON, `"id":7,`, ``, 1), ""},
	} {
		t.Run("encode "+tc.name, func(t *testing.T) {
			_, err := f.reg.Encode(ctx, "orders", false, c, []byte(tc.json))
			dataErr(t, "Encode", err, tc.path, "does not fit the Avro schema")
		})
	}
	_, err := f.reg.Decode(ctx, "orders", false, schema.Codec{Format: schema.Protobuf}, wire(id, []byte{2}))
	dataErr(t, "Decode as protobuf", err, "", "the schema is avro, the port declares protobuf")
	_, err = f.reg.Decode(ctx, "orders", true, c, wire(999, []byte{2}))
	if de := dataErr(t, "Decode of a key", err, "", "knows no schema id 999"); !de.Key || de.ID != 999 || !strings.Contains(de.Error(), `the key of a record of topic "orders" (schema id 999)`) {
		t.Errorf("Decode of a key with an unknown id: %#v (%v); want Key true, ID 999", de, de)
	}
}

// TestAvroEvolution: a record written with an older or newer schema reads as the pinned one;
// unpinned, it reads as its writer's. It runs against the real registry
// MILLRACE_SCHEMA_REGISTRY_TEST_URL names, if set.
func TestAvroEvolution(t *testing.T) {
	f := newTarget(t)
	users := f.name("users")
	const v1 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"nick","type":"string"}]}`
	const v2 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"email","type":"string","default":"none"}]}`
	id1 := f.register(t, "users-value", sr.Schema{Schema: v1})
	// After the first version: Apicurio Registry sets no level for a subject it lacks.
	for _, r := range f.cl.SetCompatibility(context.Background(), sr.SetCompatibility{Level: sr.CompatNone}, users+"-value") {
		if r.Err != nil {
			t.Fatalf("SetCompatibility(%s, NONE): %v", r.Subject, r.Err)
		}
	}
	id2 := f.register(t, "users-value", sr.Schema{Schema: v2})
	ctx := context.Background()
	old, err := f.reg.Encode(ctx, users, false, schema.Codec{Format: schema.Avro, Version: 1}, []byte(`{"name":"ann","nick":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := f.reg.Encode(ctx, users, false, schema.Codec{Format: schema.Avro}, []byte(`{"name":"bo","email":"b@x"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    schema.Codec
		data []byte
		want string
	}{
		{"v1 as the writer's", schema.Codec{Format: schema.Avro}, old, `{"name":"ann","nick":"a"}`},
		{"v1 read as v2: the added field's default, the removed one dropped", schema.Codec{Format: schema.Avro, Version: 2}, old, `{"name":"ann","email":"none"}`},
		{"v1 read as id2", schema.Codec{Format: schema.Avro, ID: id2}, old, `{"name":"ann","email":"none"}`},
		{"v2 read as v2", schema.Codec{Format: schema.Avro, Version: 2}, cur, `{"name":"bo","email":"b@x"}`},
	} {
		got, err := f.reg.Decode(ctx, users, false, tc.c, tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sameJSON(t, tc.name, got, tc.want)
	}
	// v2 read as v1: nick has no default, so v2's records cannot be read as v1.
	_, err = f.reg.Decode(ctx, users, false, schema.Codec{Format: schema.Avro, ID: id1}, cur)
	dataErr(t, "v2 read as v1", err, "$.nick", "not compatible")
	_, err = f.reg.Decode(ctx, users, false, schema.Codec{Format: schema.Avro, Version: 9}, cur)
	if !errors.Is(err, schema.ErrNoSubject) {
		t.Errorf("Decode pinned to a missing version: err = %v; want ErrNoSubject", err)
	}
}

// TestSubjects: the strategies and an explicit subject pick the schema to encode with.
func TestSubjects(t *testing.T) {
	f := newFake(t, schema.Settings{})
	mk := func(name string) string {
		return `{"type":"record","name":"` + name + `","namespace":"shop","fields":[{"name":"x","type":"int"}]}`
	}
	ids := map[string]int{}
	for _, s := range []string{"orders-value", "orders-key", "shop.A", "orders-shop.B", "custom"} {
		ids[s] = f.register(t, s, sr.Schema{Schema: mk(strings.NewReplacer("-", "", ".", "").Replace(s))})
	}
	ctx := context.Background()
	for _, tc := range []struct {
		c       schema.Codec
		key     bool
		subject string
	}{
		{schema.Codec{Format: schema.Avro}, false, "orders-value"},
		{schema.Codec{Format: schema.Avro, Strategy: schema.TopicName}, true, "orders-key"},
		{schema.Codec{Format: schema.Avro, Strategy: schema.RecordName, Record: "shop.A"}, false, "shop.A"},
		{schema.Codec{Format: schema.Avro, Strategy: schema.TopicRecordName, Record: "shop.B"}, false, "orders-shop.B"},
		{schema.Codec{Format: schema.Avro, Subject: "custom"}, false, "custom"},
	} {
		b, err := f.reg.Encode(ctx, "orders", tc.key, tc.c, []byte(`{"x":1}`))
		if err != nil {
			t.Fatalf("Encode(%+v): %v", tc.c, err)
		}
		var h sr.ConfluentHeader
		if id, _, _ := h.DecodeID(b); id != ids[tc.subject] {
			t.Errorf("Encode(%+v, key %v) used id %d; want %d, %s's", tc.c, tc.key, id, ids[tc.subject], tc.subject)
		}
	}
	_, err := f.reg.Encode(ctx, "nothing", false, schema.Codec{Format: schema.Avro}, []byte(`{"x":1}`))
	if !errors.Is(err, schema.ErrNoSubject) || !strings.Contains(err.Error(), `"nothing-value"`) {
		t.Errorf("Encode to a missing subject: err = %v; want ErrNoSubject naming nothing-value", err)
	}
	_, err = f.reg.Encode(ctx, "orders", false, schema.Codec{Format: schema.Avro, ID: 4242}, []byte(`{"x":1}`))
	var de *schema.DataError
	if !errors.Is(err, schema.ErrCodec) || errors.As(err, &de) {
		t.Errorf("Encode with a pinned id the registry lacks: err = %v; want ErrCodec, not the record's fault", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.reg.Decode(cancelled, "orders", false, schema.Codec{Format: schema.Avro}, wire(4343, []byte{2})); !errors.Is(err, schema.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Decode with a cancelled context: err = %v; want ErrUnavailable and context.Canceled", err)
	}
	for _, c := range []schema.Codec{{Format: "xml"}, {Format: schema.Avro, Strategy: schema.RecordName}, {Format: schema.Avro, Strategy: "name"}, {Format: schema.Avro, Version: 1, ID: 2}} {
		if _, err := f.reg.Encode(ctx, "orders", false, c, []byte(`{}`)); !errors.Is(err, schema.ErrCodec) {
			t.Errorf("Encode(%+v): err = %v; want ErrCodec", c, err)
		}
	}
}

// TestCache: concurrent decodes of one id fetch it once; the latest version is asked again
// only after the TTL.
func TestCache(t *testing.T) {
	f := newFake(t, schema.Settings{CacheTTL: time.Hour})
	id := f.register(t, "orders-value", sr.Schema{Schema: readTestdata(t, "order.avsc")})
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	data, err := f.reg.Encode(ctx, "orders", false, c, []byte(orderJSON))
	if err != nil {
		t.Fatal(err)
	}
	f2 := newFake(t, schema.Settings{})
	f2.SeedSchema("orders-value", 1, id, sr.Schema{Schema: readTestdata(t, "order.avsc")})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 16 {
		wg.Go(func() {
			if _, err := f2.reg.Decode(ctx, "orders", false, c, data); err != nil {
				failed.Add(1)
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := f2.fetched("/schemas/ids/1"); n != 1 || failed.Load() != 0 {
		t.Errorf("16 concurrent decodes fetched the schema %d times; want 1", n)
	}
	for range 3 {
		if _, err := f.reg.Encode(ctx, "orders", false, c, []byte(orderJSON)); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.fetched("/subjects/orders-value/versions/latest"); n != 1 {
		t.Errorf("4 encodes within the TTL asked for the latest version %d times; want 1", n)
	}
	// An unknown id is asked once within the TTL, however many records name it.
	for range 3 {
		_, err := f.reg.Decode(ctx, "orders", false, c, wire(77, []byte{2}))
		dataErr(t, "Decode of an unknown id", err, "", "knows no schema id 77")
	}
	if n := f.fetched("/schemas/ids/77"); n != 1 {
		t.Errorf("3 decodes of unknown id 77 asked the registry %d times; want 1", n)
	}
}

// TestCacheSize: past CacheSize schemas the oldest is dropped, and fetched again when asked.
func TestCacheSize(t *testing.T) {
	f := newFake(t, schema.Settings{CacheSize: 1})
	a := f.register(t, "a-value", sr.Schema{Schema: `"string"`})
	b := f.register(t, "b-value", sr.Schema{Schema: `"long"`})
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	payload := map[int][]byte{a: {2, 'x'}, b: {2}} // "x", 1
	for _, id := range []int{a, a, b, a} {
		if _, err := f.reg.Decode(ctx, "x", false, c, wire(id, payload[id])); err != nil {
			t.Fatalf("Decode of id %d: %v", id, err)
		}
	}
	if n := f.fetched(fmt.Sprintf("/schemas/ids/%d", a)); n != 2 {
		t.Errorf("with room for 1 schema, decodes of ids a, a, b, a fetched a %d times; want 2", n)
	}
}

// TestUnavailable: a registry that is down, answers 503 or does not answer in time is
// ErrUnavailable, not the record's fault; once it answers, the same record decodes.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	down := srfake.New()
	url := down.URL()
	down.Close()
	reg, err := schema.New(schema.Settings{URLs: []string{url}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Decode(ctx, "orders", false, c, wire(1, []byte{2})); !errors.Is(err, schema.ErrUnavailable) {
		t.Errorf("Decode with the registry down: err = %v; want ErrUnavailable", err)
	}

	f := newFake(t, schema.Settings{Timeout: 200 * time.Millisecond})
	id := f.register(t, "users-value", sr.Schema{Schema: `"string"`})
	var mode atomic.Value
	mode.Store("503")
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		switch mode.Load() {
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		case "hang":
			<-r.Context().Done()
			return true
		}
		return false
	})
	for _, m := range []string{"503", "hang"} {
		mode.Store(m)
		_, err := f.reg.Decode(ctx, "users", false, c, wire(id, []byte{2, 'a'}))
		if !errors.Is(err, schema.ErrUnavailable) {
			t.Errorf("Decode with the registry at %s: err = %v; want ErrUnavailable", m, err)
		}
		var de *schema.DataError
		if errors.As(err, &de) {
			t.Errorf("Decode with the registry at %s: a DataError %v", m, err)
		}
		_, err = f.reg.Encode(ctx, "users", false, c, []byte(`"a"`))
		if !errors.Is(err, schema.ErrUnavailable) {
			t.Errorf("Encode with the registry at %s: err = %v; want ErrUnavailable", m, err)
		}
	}
	mode.Store("")
	got, err := f.reg.Decode(ctx, "users", false, c, wire(id, []byte{2, 'a'}))
	if err != nil {
		t.Fatalf("Decode once the registry answers: %v", err)
	}
	sameJSON(t, "Decode", got, `"a"`)
}

// TestAuth: basic auth and a token file reach the registry; a refused credential is not the
// record's fault (retried as a registry that does not answer) and names the settings to fix.
func TestAuth(t *testing.T) {
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	f := srfake.New(srfake.WithAuth("Bearer tok-1"))
	t.Cleanup(f.Close)
	id, _, _ := f.RegisterSchema("users-value", sr.Schema{Schema: `"string"`})
	tok := t.TempDir() + "/token"
	writeFile(t, tok, "tok-1\n")
	reg, err := schema.New(schema.Settings{URLs: []string{f.URL()}, TokenFile: tok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Decode(ctx, "users", false, c, wire(id, []byte{2, 'a'})); err != nil {
		t.Fatalf("Decode with the token file: %v", err)
	}
	wrong, err := schema.New(schema.Settings{URLs: []string{f.URL()}, Username: "u", Password: "p"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Decode(ctx, "users", false, c, wire(id, []byte{2, 'a'}))
	if !errors.Is(err, schema.ErrUnavailable) || !strings.Contains(err.Error(), "MILLRACE_SCHEMA_REGISTRY_USERNAME") {
		t.Errorf("Decode with refused credentials: err = %v; want ErrUnavailable naming the credentials' settings", err)
	}
}

// TestAvroReferences: a schema naming a type another subject defines compiles with it; against
// the real registry MILLRACE_SCHEMA_REGISTRY_TEST_URL names, if set.
func TestAvroReferences(t *testing.T) {
	f := newTarget(t)
	pay := f.name("pay")
	f.register(t, "shop.Money", sr.Schema{Schema: `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":{"type":"long","logicalType":"timestamp-millis"}}]}`})
	id := f.register(t, "pay-value", sr.Schema{Schema: `{"type":"record","name":"Pay","namespace":"shop","fields":[{"name":"amount","type":"shop.Money"}]}`,
		References: []sr.SchemaReference{{Name: "shop.Money", Subject: "shop.Money", Version: 1}}})
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	got, err := f.reg.Decode(ctx, pay, false, c, wire(id, []byte{0x04}))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sameJSON(t, "Decode", got, `{"amount":{"cents":2}}`)
	enc, err := f.reg.Encode(ctx, pay, false, c, got)
	if err != nil || !bytes.Equal(enc, wire(id, []byte{0x04})) {
		t.Errorf("Encode(%s) = %x, %v; want %x", got, enc, err, wire(id, []byte{0x04}))
	}
}

// TestNew: a Registry needs an http(s) URL.
func TestNew(t *testing.T) {
	for _, s := range []schema.Settings{{}, {URLs: []string{"registry:8081"}}} {
		if _, err := schema.New(s, nil); err == nil || !strings.Contains(err.Error(), "URL") {
			t.Errorf("New(%+v) = %v; want an error about the URL", s, err)
		}
	}
}

// TestTokenRotation: a token file rewritten is sent from the next request on.
func TestTokenRotation(t *testing.T) {
	f := srfake.New()
	t.Cleanup(f.Close)
	var mu sync.Mutex
	var seen []string
	f.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		return false
	})
	a, _, _ := f.RegisterSchema("a-value", sr.Schema{Schema: `"string"`})
	b, _, _ := f.RegisterSchema("b-value", sr.Schema{Schema: `"long"`})
	tok := t.TempDir() + "/token"
	writeFile(t, tok, "tok-1\n")
	reg, err := schema.New(schema.Settings{URLs: []string{f.URL()}, TokenFile: tok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	if _, err := reg.Decode(ctx, "a", false, c, wire(a, []byte{2, 'x'})); err != nil {
		t.Fatal(err)
	}
	writeFile(t, tok, "tok-rotated\n")
	if _, err := reg.Decode(ctx, "b", false, c, wire(b, []byte{2})); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"Bearer tok-1", "Bearer tok-rotated"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("the registry saw Authorization %q; want %q", seen, want)
	}
}

// TestTLS: an https registry is reached with the CA of Settings.TLS, and refused without it.
func TestTLS(t *testing.T) {
	f := srfake.NewRegistry()
	srv := httptest.NewUnstartedServer(f.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	id, _, _ := f.RegisterSchema("a-value", sr.Schema{Schema: `"string"`})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	ctx := context.Background()
	c := schema.Codec{Format: schema.Avro}
	reg, err := schema.New(schema.Settings{URLs: []string{srv.URL}, TLS: &tls.Config{RootCAs: pool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Decode(ctx, "a", false, c, wire(id, []byte{2, 'x'})); err != nil {
		t.Errorf("Decode over TLS with the server's CA: %v", err)
	}
	untrusting, err := schema.New(schema.Settings{URLs: []string{srv.URL}, TLS: &tls.Config{RootCAs: x509.NewCertPool()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = untrusting.Decode(ctx, "a", false, c, wire(id, []byte{2, 'x'}))
	if !errors.Is(err, schema.ErrUnavailable) || !strings.Contains(err.Error(), "MILLRACE_SCHEMA_REGISTRY_CA_FILE") {
		t.Errorf("Decode over TLS without the server's CA: err = %v; want ErrUnavailable naming MILLRACE_SCHEMA_REGISTRY_CA_FILE", err)
	}
}
