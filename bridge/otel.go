package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// The standard OpenTelemetry variables the bridge reads to decide whether it exports spans
// (readSpanExport, config.go); the exporter reads the rest of OTEL_EXPORTER_OTLP_* (headers,
// timeout, TLS, compression), and the SDK OTEL_TRACES_SAMPLER*, OTEL_BSP_*, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// from the process's environment.
const (
	envOTelDisabled       = "OTEL_SDK_DISABLED"
	envOTelExporter       = "OTEL_TRACES_EXPORTER"
	envOTelEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTelTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envOTelProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTelTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// tracerShutdownTimeout bounds the flush of the spans still buffered when the bridge stops.
const tracerShutdownTimeout = 5 * time.Second

// Tracer exports one span per item attempt over OTLP/HTTP with the OpenTelemetry SDK. The
// span's ids are those the item line and the outputs carry (the engine draws them; the SDK
// only takes them), so the action's spans and the downstream ones join it. A nil *Tracer
// exports nothing, and then nothing of the SDK runs per record. Its methods are safe for
// concurrent use.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	action string
}

// NewTracer returns a Tracer exporting over OTLP/HTTP as the standard OTEL_* variables of the
// process's environment say (the endpoint, headers, timeout, TLS, compression, sampler and
// batching); build one only when [Config].ExportSpans (or [SpanExportFromEnv]) says they ask
// for export. Export errors are logged on log. The service name is the action's unless
// OTEL_SERVICE_NAME says otherwise. Shutdown flushes what is buffered.
func NewTracer(ctx context.Context, action, version string, log *slog.Logger) (*Tracer, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("bridge: the OTLP/HTTP span exporter (%s): %w", envOTelEndpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", action), attribute.String("service.version", version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("bridge: the span resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	// The SDK reports export failures to its one global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("exporting spans", "error", err) }))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(attemptIDs{}),
	)
	return &Tracer{tp: tp, tracer: tp.Tracer("github.com/ankka-flow/millrace/bridge", trace.WithInstrumentationVersion(version)), action: action}, nil
}

// Shutdown exports the spans still buffered and stops the exporter, within ctx. It may be
// called more than once; a nil Tracer has nothing to do.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("bridge: flushing spans: %w", err)
	}
	return nil
}

// shutdownTracer is Shutdown bounded by tracerShutdownTimeout, logging what went wrong.
func (t *Tracer) shutdownTracer(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("spans not exported at shutdown", "error", err)
	}
}

// attempt records the span of one finished attempt, ended at end.
func (t *Tracer) attempt(ai engine.AttemptInfo, end time.Time) {
	it := ai.Item
	tc := it.Trace
	if !tc.IsValid() {
		return
	}
	ctx := context.WithValue(context.Background(), attemptIDsKey{}, &tc)
	if tc.Parent != [8]byte{} {
		state, _ := trace.ParseTraceState(it.Tracestate) // an invalid one is left out
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tc.TraceID, SpanID: tc.Parent, TraceFlags: trace.TraceFlags(tc.Flags), TraceState: state, Remote: true,
		}))
	}
	_, span := t.tracer.Start(ctx, "process "+it.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(end.Add(-ai.Latency)),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", it.Topic),
			attribute.String("messaging.destination.partition.id", strconv.FormatInt(int64(it.Partition), 10)),
			attribute.Int64("messaging.kafka.offset", it.Offset),
			attribute.String("millrace.action", t.action),
			attribute.String("millrace.inlet", it.Inlet),
			attribute.String("millrace.item", strings.Clone(it.ID)), // not the batch's string of names it is part of
			attribute.String("millrace.delivery", it.Delivery),
			attribute.String("millrace.conversation", it.Run),
			attribute.Int("millrace.attempt", it.Attempt),
			attribute.String("millrace.outcome", ai.Outcome.String()),
			attribute.Bool("millrace.retry", ai.Retry),
		))
	if ai.Err != nil {
		msg := ai.Err.Error()
		if len(msg) > maxHeaderError {
			msg = msg[:maxHeaderError]
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(end))
}

// attemptIDs gives the SDK the ids the engine drew for an attempt, passed in the context, so
// that the exported span is the one the item line and the outputs name.
type attemptIDs struct{}

type attemptIDsKey struct{}

var _ sdktrace.IDGenerator = attemptIDs{}

func (attemptIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tc, ok := ctx.Value(attemptIDsKey{}).(*stdio.TraceContext); ok {
		return tc.TraceID, tc.SpanID
	}
	return stdio.NewTraceID(), stdio.NewSpanID()
}

func (attemptIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if tc, ok := ctx.Value(attemptIDsKey{}).(*stdio.TraceContext); ok {
		return tc.SpanID
	}
	return stdio.NewSpanID()
}
