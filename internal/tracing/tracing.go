// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, and carries a job's trace context (W3C
// traceparent and tracestate) from the call that submitted it to the
// worker that runs it.
//
// Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER
// set to "otlp", or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set without OTEL_TRACES_EXPORTER
// saying "none". Off, Setup returns a nil provider and jobwatch adds no
// interceptor and makes no span: it costs nothing. On, spans go to an
// OTLP exporter over HTTP (OTEL_EXPORTER_OTLP_PROTOCOL or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "http/protobuf", the default) or
// gRPC ("grpc"), which read their endpoint, headers, timeout and TLS from
// the same variables, in batches; the SDK reads the sampler from
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default: parent-based,
// always on), and the resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "jobwatch").
// OTEL_SDK_DISABLED=true turns it off whatever else is set.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is how jobwatch writes and reads trace context: W3C Trace
// Context (traceparent, tracestate) and Baggage, on calls and on jobs.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Setup returns a tracer provider configured from the environment, and
// the function that flushes and stops it, or a nil provider (and a
// shutdown that does nothing) when the environment does not turn tracing
// on. getenv is os.Getenv but in tests.
func Setup(ctx context.Context, getenv func(string) string, version string) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	off := func(context.Context) error { return nil }
	if !enabled(getenv) {
		return nil, off, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	protocol := first(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf")
	switch protocol {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, off, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: jobwatch exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, off, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("jobwatch"), semconv.ServiceVersion(version)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, off, fmt.Errorf("tracing: the resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// enabled reports whether the environment turns tracing on.
func enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default: // "none", or one jobwatch does not ship
		return false
	}
}

func first(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// Context is a job's trace context as it is stored: the W3C traceparent
// and tracestate of the span that submitted it, or empty.
type Context struct {
	Parent string // traceparent, e.g. 00-<trace id>-<span id>-01
	State  string // tracestate
}

// FromSpan is the trace context of ctx's span, empty when it has none
// that is valid.
func FromSpan(ctx context.Context) Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Context{}
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return Context{Parent: carrier.Get("traceparent"), State: carrier.Get("tracestate")}
}

// Into returns ctx with c as its remote parent span context (ctx as it is
// when c is empty or not a valid traceparent).
func (c Context) Into(ctx context.Context) context.Context {
	if c.Parent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": c.Parent}
	if c.State != "" {
		carrier["tracestate"] = c.State
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// SpanContext is c as a span context, for a link; not valid when c is
// empty or unreadable.
func (c Context) SpanContext() trace.SpanContext {
	return trace.SpanContextFromContext(c.Into(context.Background()))
}

// Valid reports whether c names a span.
func (c Context) Valid() bool { return c.SpanContext().IsValid() }
