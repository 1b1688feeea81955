package server

import (
	"context"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/internal/tracing"
	"github.com/jobwatch/jobwatch/jobtype"
)

// interceptors are the job services' interceptors: with a
// Config.TracerProvider, otelconnect's first, so that a call's span holds
// everything the server does for it, admission included.
func (s *Server) interceptors(rest ...connect.Interceptor) []connect.Interceptor {
	if s.cfg.TracerProvider == nil {
		return rest
	}
	// The caller's trace context is trusted: continuing the submitter's
	// trace in its job's worker is the point. A caller can only name the
	// trace its own calls join.
	otel, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(s.cfg.TracerProvider),
		otelconnect.WithPropagator(tracing.Propagator), otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics())
	if err != nil {
		s.log.Error("tracing: the RPC interceptor; calls are not traced", "err", err)
		return rest
	}
	return append([]connect.Interceptor{otel}, rest...)
}

// traceOf is the trace context a submit keeps with its job: its call's
// span's, when tracing is on.
func (s *Server) traceOf(ctx context.Context) tracing.Context {
	if s.cfg.TracerProvider == nil {
		return tracing.Context{}
	}
	return tracing.FromSpan(ctx)
}

// linkToJob links the call's span to the trace of job j, which the call
// waited for or watched.
func linkToJob(ctx context.Context, j *jobtype.Job) {
	if j == nil || j.TraceParent == "" {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if sc := (tracing.Context{Parent: j.TraceParent, State: j.TraceState}).SpanContext(); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}
