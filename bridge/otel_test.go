package bridge_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/bridge"
)

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1: it decodes every
// ExportTraceServiceRequest and keeps its spans and resources.
type otlpReceiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []map[string]string
	bad       []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rcv := &otlpReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(rcv.serve))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func (rcv *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		rcv.bad = append(rcv.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		http.Error(w, "not an OTLP/HTTP trace export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		rcv.resources = append(rcv.resources, attrs(rs.GetResource().GetAttributes()))
		for _, ss := range rs.GetScopeSpans() {
			rcv.spans = append(rcv.spans, ss.GetSpans()...)
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = "int:" + strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}

// TestSpanExport exports the attempts' spans to an OTLP/HTTP receiver: one span per attempt,
// with the ids the item line carried, the record's span as parent (none for a root), the
// outcome, attempt, action and topic/partition/offset; the bridge's shutdown flushes them.
func TestSpanExport(t *testing.T) {
	rcv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000") // only the shutdown's flush sends them
	t.Setenv("OTEL_SERVICE_NAME", "")
	tr, err := bridge.NewTracer(context.Background(), "t", "test", slog.New(slog.DiscardHandler))
	if err != nil || tr == nil {
		t.Fatalf("NewTracer with an endpoint = %v, %v; want a Tracer", tr, err)
	}
	r := startBridge(t, oneOutlet+" --retries 1", func(o *bridge.Options) { o.Tracer = tr })
	s := dial(t, r.addr)
	s.start(r, "conv-1", 0)
	s.batch(1, 3,
		rec(10, nil, `{"op":"trace","n":1,"outlets":["out"]}`, header("traceparent", inParent)),
		rec(11, nil, `{"op":"trace","outlets":["out"]}`),
	)
	a := s.wait(1)
	if !a.ack || len(a.emits) != 2 {
		t.Fatalf("answer = %v; want Ack after 2 emits", a)
	}
	childTP := seenItem(t, a.emits[0])["traceparent"].(string)
	rootTP := seenItem(t, a.emits[1])["traceparent"].(string)
	expectEOF(t, s.stop())
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Fatalf("requests the receiver refused: %v", rcv.bad)
	}
	if len(rcv.spans) != 3 {
		t.Fatalf("received %d spans; want 3 (2 attempts of the first record, 1 of the second)", len(rcv.spans))
	}
	if res := rcv.resources[0]; res["service.name"] != "t" || res["service.version"] != "test" {
		t.Errorf("resource = %v; want service.name t, service.version test", res)
	}
	byAttempt := map[string]*tracepb.Span{}
	for _, sp := range rcv.spans {
		at := attrs(sp.GetAttributes())
		byAttempt[at["messaging.kafka.offset"]+"/"+at["millrace.attempt"]] = sp
	}
	failed, done, root := byAttempt["int:10/int:1"], byAttempt["int:10/int:2"], byAttempt["int:11/int:1"]
	if failed == nil || done == nil || root == nil {
		t.Fatalf("spans by offset/attempt = %v; want 10/1, 10/2 and 11/1", byAttempt)
	}
	_, childSpan, _ := parseTP(t, "item", childTP)
	rootTrace, rootSpan, _ := parseTP(t, "item", rootTP)
	for _, c := range []struct {
		name          string
		sp            *tracepb.Span
		trace, parent string
		outcome       string
	}{
		{"the failed attempt", failed, inTrace, inSpan, "failed"},
		{"the retry", done, inTrace, inSpan, "done"},
		{"the root", root, rootTrace, "", "done"},
	} {
		at := attrs(c.sp.GetAttributes())
		if got := hex.EncodeToString(c.sp.GetTraceId()); got != c.trace {
			t.Errorf("%s: trace id %s; want %s", c.name, got, c.trace)
		}
		if got := hex.EncodeToString(c.sp.GetParentSpanId()); got != c.parent {
			t.Errorf("%s: parent span %q; want %q", c.name, got, c.parent)
		}
		if at["millrace.outcome"] != c.outcome || at["millrace.action"] != "t" || at["messaging.destination.name"] != "in-topic" ||
			at["messaging.destination.partition.id"] != "3" || c.sp.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || c.sp.GetName() != "process in-topic" {
			t.Errorf("%s: %s kind %v attributes %v; want outcome %s, action t, topic in-topic, partition 3, a consumer span", c.name, c.sp.GetName(), c.sp.GetKind(), at, c.outcome)
		}
		if c.sp.GetEndTimeUnixNano() < c.sp.GetStartTimeUnixNano() || c.sp.GetStartTimeUnixNano() == 0 {
			t.Errorf("%s: from %d to %d; want a start and an end after it", c.name, c.sp.GetStartTimeUnixNano(), c.sp.GetEndTimeUnixNano())
		}
	}
	if got := hex.EncodeToString(done.GetSpanId()); got != childSpan {
		t.Errorf("the retry's span %s; want %s, the one its item line and its output named", got, childSpan)
	}
	if got := hex.EncodeToString(root.GetSpanId()); got != rootSpan {
		t.Errorf("the root's span %s; want %s, the one its item line named", got, rootSpan)
	}
	if failed.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(failed.GetStatus().GetMessage(), "not yet") ||
		done.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR || attrs(failed.GetAttributes())["millrace.retry"] != "true" {
		t.Errorf("statuses: failed %v, done %v; want an error with the action's message, then none", failed.GetStatus(), done.GetStatus())
	}
}
