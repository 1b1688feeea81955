package client_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// One job's trace, end to end: a caller submits it inside a span of its
// own, over RPC; a remote Worker runs it; a caller waits for it. Every
// span the caller, the server, the engine and the worker made is in the
// caller's trace, with the parents a reader would expect: the server's
// SubmitJob span under the caller's client span, the engine's queued,
// claim, attempt and end spans and the worker's handler span under the
// SubmitJob span the job was submitted in, and the handler's own span
// under the handler span; the WaitJob span links to the submit.
func TestOneJobIsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv := startServer(t, serverOptions{
		engine: jobs.Config{Tracer: tp.Tracer("jobs")},
		server: server.Config{TracerProvider: tp},
	})
	c := client.New(srv.URL, client.WithTracing(tp))
	defer c.Close()

	ctx, root := tp.Tracer("caller").Start(context.Background(), "caller.request")
	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "traced"})
	if err != nil {
		t.Fatal(err)
	}
	root.End()
	if job.GetTraceparent() == "" {
		t.Fatal("the submitted job carries no traceparent")
	}

	workerCtx, stop := context.WithCancel(context.Background())
	defer stop()
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{TracerProvider: tp, Concurrency: 1})
	w.Handle("traced", func(ctx context.Context, _ *jobwatchv1.Job, _ client.Progress) (any, error) {
		_, inner := tp.Tracer("handler").Start(ctx, "handler.work")
		inner.End()
		return "ok", nil
	})
	go func() { _ = w.Run(workerCtx) }()
	waited, err := client.New(srv.URL, client.WithTracing(tp)).WaitForJob(context.Background(), job.GetId())
	if err != nil || waited.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("wait: %v, %v", waited.GetState(), err)
	}
	stop()

	// The attempt span is made once the completion committed, which the
	// wait may see first.
	var spans tracetest.SpanStubs
	byName := map[string]tracetest.SpanStub{}
	eventually(t, "the end span", func() bool {
		spans = exp.GetSpans()
		for _, s := range spans {
			byName[s.Name] = s
		}
		_, ok := byName["jobwatch.job.end"]
		return ok
	})
	traceID := root.SpanContext().TraceID()
	submitServer := findSpan(t, spans, "jobwatch.v1.JobService/SubmitJob", traceID, trace.SpanKindServer)
	submitClient := findSpan(t, spans, "jobwatch.v1.JobService/SubmitJob", traceID, trace.SpanKindClient)
	parentOf := func(s tracetest.SpanStub) string { return s.Parent.SpanID().String() }
	if parentOf(submitClient) != root.SpanContext().SpanID().String() {
		t.Errorf("the client's SubmitJob span is not under the caller's span")
	}
	if parentOf(submitServer) != submitClient.SpanContext.SpanID().String() {
		t.Errorf("the server's SubmitJob span is not under the client's")
	}
	for _, name := range []string{"jobwatch.job.queued", "jobwatch.job.claim", "jobwatch.job.attempt", "jobwatch.job.end", "jobwatch.job.handle"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		if s.SpanContext.TraceID() != traceID || parentOf(s) != submitServer.SpanContext.SpanID().String() {
			t.Errorf("%s is in trace %s under %s, want trace %s under the server's SubmitJob span",
				name, s.SpanContext.TraceID(), parentOf(s), traceID)
		}
	}
	if h := byName["handler.work"]; parentOf(h) != byName["jobwatch.job.handle"].SpanContext.SpanID().String() {
		t.Errorf("the handler's own span is not under jobwatch.job.handle")
	}
	waitServer := findSpan(t, spans, "jobwatch.v1.JobService/WaitJob", trace.TraceID{}, trace.SpanKindServer)
	linked := false
	for _, l := range waitServer.Links {
		linked = linked || l.SpanContext.SpanID() == submitServer.SpanContext.SpanID()
	}
	if !linked {
		t.Errorf("the WaitJob span does not link to the job's submit span")
	}
}

// findSpan returns the first span named name of kind in trace (any trace
// for the zero TraceID).
func findSpan(t *testing.T, spans tracetest.SpanStubs, name string, in trace.TraceID, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name && s.SpanKind == kind && (!in.IsValid() || s.SpanContext.TraceID() == in) {
			return s
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name + "/" + s.SpanKind.String()
	}
	t.Fatalf("no %s span of kind %s in trace %s among %v", name, kind, in, names)
	return tracetest.SpanStub{}
}
