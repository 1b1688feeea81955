package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/internal/tracing"
)

// startTracing turns OpenTelemetry tracing on when the OTEL_* environment
// asks for it (internal/tracing), for the whole process: the global
// tracer provider and propagator. It returns the provider, nil when
// tracing is off, and the function that flushes it at exit.
func startTracing(ctx context.Context, log *slog.Logger) (*sdktrace.TracerProvider, func(), error) {
	tp, shutdown, err := tracing.Setup(ctx, os.Getenv, version())
	if err != nil {
		return nil, func() {}, fmt.Errorf("tracing: %w", err)
	}
	if tp == nil {
		return nil, func() {}, nil
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tracing.Propagator)
	log.Info("tracing on: spans go to the OTLP exporter the OTEL_* environment names")
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("tracing: flushing the last spans", "err", err)
		}
	}, nil
}

// providerOf is tp as the optional interface the server and the worker
// take: nil (no tracing) when tp is nil.
func providerOf(tp *sdktrace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return nil
	}
	return tp
}

// tracerOf is the engine's tracer from tp, nil when tp is nil.
func tracerOf(tp *sdktrace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/jobwatch/jobwatch/jobs")
}
