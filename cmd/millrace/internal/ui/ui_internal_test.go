package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestCheckLoopback: the page listens on loopback only; anything else is refused naming the
// way out.
func TestCheckLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "127.0.0.2:8080", "[::1]:0", "localhost:9999"} {
		if err := checkLoopback(addr); err != nil {
			t.Errorf("checkLoopback(%q) = %v; want nil", addr, err)
		}
	}
	for _, addr := range []string{":8080", "0.0.0.0:8080", "[::]:80", "192.168.1.10:8080", "example.com:80"} {
		err := checkLoopback(addr)
		if !errors.Is(err, ErrNotLoopback) || !strings.Contains(err.Error(), "127.0.0.1:PORT") {
			t.Errorf("checkLoopback(%q) = %v; want ErrNotLoopback naming 127.0.0.1:PORT", addr, err)
		}
	}
	if err := checkLoopback("8080"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("checkLoopback(8080) = %v; want an error asking for HOST:PORT", err)
	}
	if _, err := New("0.0.0.0:0", nil); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("New(0.0.0.0:0) = %v; want ErrNotLoopback", err)
	}
}

// TestRing: a ring keeps the last n values, oldest first, and counts every one added.
func TestRing(t *testing.T) {
	r := newRing[int](3)
	if got := r.all(); len(got) != 0 {
		t.Errorf("empty ring = %v", got)
	}
	for i := 1; i <= 7; i++ {
		r.add(i)
	}
	if got := r.all(); !slices.Equal(got, []int{5, 6, 7}) || r.total != 7 {
		t.Errorf("ring = %v (total %d); want [5 6 7] (total 7)", got, r.total)
	}
}

// TestModelBounds: the state of a changelog keeps at most keysPerChangelog keys (the others
// counted), follows tombstones, and a streamlet keeps its last linesPerStreamlet stderr lines.
func TestModelBounds(t *testing.T) {
	m := newModel(time.Now)
	m.setRun("p", []local.StreamletInfo{{Name: "s", Inlets: []local.Port{{Name: "in", Topic: "t", Changelog: "s.in.state"}}}}, []string{"t"})
	for i := range keysPerChangelog + 5 {
		k := fmt.Sprintf("k%05d", i)
		m.record(&kgo.Record{Topic: "s.in.state", Key: []byte(k), Value: []byte(`1`)}, "")
	}
	v := m.stateOf("", "")
	if in := v.Inlets[0]; in.Held > keysPerChangelog || in.Held+in.Dropped != keysPerChangelog+5 || len(in.Keys) != maxKeysShown {
		t.Errorf("held %d, dropped %d, shown %d; want at most %d held, the rest dropped, %d shown", in.Held, in.Dropped, len(in.Keys), keysPerChangelog, maxKeysShown)
	}
	k := v.Inlets[0].Keys[0]
	m.record(&kgo.Record{Topic: "s.in.state", Key: []byte(k)}, "") // a tombstone
	if v := m.stateOf(k, k); v.Inlets[0].State != nil {
		t.Errorf("key %s after its tombstone = %+v; want no state", k, v.Inlets[0].State)
	}
	for i := range linesPerStreamlet + 10 {
		m.event(bridge.Event{Kind: bridge.EventStderr, Streamlet: "s", Line: strings.Repeat("y", i)})
	}
	if l := m.logsOf()[0].Lines; len(l) != linesPerStreamlet || len(l[len(l)-1].Text) != linesPerStreamlet+9 {
		t.Errorf("lines kept = %d; want the last %d", len(l), linesPerStreamlet)
	}
}

// TestGuard: a request naming another host (DNS rebinding) is refused, and so is a POST from
// another origin or not of JSON; the page's own requests pass.
func TestGuard(t *testing.T) {
	s, err := New(DefaultAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.lis.Close()
	h := s.handler(context.Background())
	host := s.lis.Addr().String()
	try := func(method, target, hostHeader, origin, ctype string) int {
		req := httptest.NewRequest(method, target, strings.NewReader(`{"topic":"x","value":"1"}`))
		req.Host = hostHeader
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	if c := try("GET", "/api/graph", host, "", ""); c != http.StatusOK {
		t.Errorf("GET /api/graph = %d; want 200", c)
	}
	if c := try("GET", "/", host, "", ""); c != http.StatusOK {
		t.Errorf("GET / = %d; want 200 (the embedded page)", c)
	}
	if c := try("GET", "/api/graph", "evil.example:"+strings.Split(host, ":")[1], "", ""); c != http.StatusForbidden {
		t.Errorf("GET with a rebound Host = %d; want 403", c)
	}
	if c := try("POST", "/api/send", host, "http://evil.example", "application/json"); c != http.StatusForbidden {
		t.Errorf("POST from another origin = %d; want 403", c)
	}
	if c := try("POST", "/api/send", host, "", "text/plain"); c != http.StatusForbidden {
		t.Errorf("POST of text/plain = %d; want 403", c)
	}
	// the page's own POST passes the guard; with no run started it says so
	if c := try("POST", "/api/send", host, "http://"+host, "application/json"); c != http.StatusBadRequest {
		t.Errorf("POST before the run = %d; want 400 (no run yet)", c)
	}
}

// TestEncodedRecordsShownDecoded: the records of an Avro inlet and a Protobuf outlet (the
// price-band example) are shown as JSON, decoded with the run's embedded registry.
func TestEncodedRecordsShownDecoded(t *testing.T) {
	testkit.NeedTools(t, "bash", "jq")
	a, err := actiondir.Load("../../../../actions/price-band")
	if err != nil {
		t.Fatal(err)
	}
	p := actiondir.Single(a)
	p.Name = a.Name
	in, err := os.Open("../../../../actions/price-band/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	s, err := New(DefaultAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.lis.Close()
	if _, err := local.Run(context.Background(), p, local.Options{Input: in, Version: "test", Observer: s}); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"price-band.listings", "price-band.bands"} {
		v, _ := s.m.records(topic, "")
		if len(v.Records) == 0 {
			t.Errorf("topic %s: no records shown", topic)
			continue
		}
		for _, r := range v.Records {
			if r.Value == nil || r.Base64 != "" || !json.Valid(r.Value) {
				t.Errorf("topic %s record %d: value %s (text %q, base64 %q); want it decoded to JSON", topic, r.Offset, r.Value, r.Text, r.Base64)
			}
		}
	}
	if v, _ := s.m.records("price-band.listings", ""); len(v.Records) > 0 && !strings.Contains(string(v.Records[0].Value), `"l-1"`) {
		t.Errorf("first listing = %s; want l-1's fields", v.Records[0].Value)
	}
}
