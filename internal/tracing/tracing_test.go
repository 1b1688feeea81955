package tracing

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestSetupIsOffUnlessTheEnvironmentAsks(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		on   bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"the otlp exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"over grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{"exporter none beats an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, shutdown, err := Setup(t.Context(), env(tc.vars), "test")
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown(context.Background())
			if (tp != nil) != tc.on {
				t.Fatalf("provider %v, want on = %v", tp, tc.on)
			}
		})
	}
	_, _, err := Setup(t.Context(), env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}), "test")
	if err == nil || !strings.Contains(err.Error(), "http/protobuf or grpc") {
		t.Fatalf("an unknown protocol: %v", err)
	}
}

func TestAJobsTraceContextRoundTrips(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "submit")
	defer span.End()
	tc := FromSpan(ctx)
	if !strings.HasPrefix(tc.Parent, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()) {
		t.Fatalf("traceparent %q does not name the span %v", tc.Parent, span.SpanContext())
	}
	if got := tc.SpanContext(); got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("read back %v, want the span's context, remote", got)
	}
	if FromSpan(context.Background()) != (Context{}) || (Context{Parent: "garbage"}).Valid() {
		t.Fatal("no span, or an unreadable traceparent, must read as none")
	}
}
