package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/tracing"
)

// A command run by worker --exec gets TRACEPARENT and TRACESTATE: those of
// the worker's handler span when the worker traces, else the ones the
// job was submitted with, and none for a job submitted untraced.
func TestExecCommandsContinueTheJobsTrace(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	submitted := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	job := &jobwatchv1.Job{Id: "j_1", Kind: "k", Traceparent: submitted, Tracestate: "congo=t61rcWkgMzE"}
	run := func(ctx context.Context, job *jobwatchv1.Job) string {
		t.Helper()
		var log strings.Builder
		h := execHandler(`printf '"%s|%s"\n' "$TRACEPARENT" "$TRACESTATE"`, nil, textOutput(&log), 0, nil)
		res, err := h(ctx, job, client.Progress(func(int, string) {}))
		if err != nil {
			t.Fatalf("exec: %v (%s)", err, log.String())
		}
		var s string
		if err := json.Unmarshal(res.(json.RawMessage), &s); err != nil {
			t.Fatalf("result %s: %v", res, err)
		}
		return s
	}
	if got := run(context.Background(), job); got != submitted+"|congo=t61rcWkgMzE" {
		t.Errorf("without tracing here the command got %q, want the job's own trace context", got)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(tracing.Context{Parent: job.Traceparent}.Into(context.Background()), "handle")
	defer span.End()
	want := "00-0af7651916cd43dd8448eb211c80319c-" + span.SpanContext().SpanID().String() + "-01"
	if got := run(ctx, job); !strings.HasPrefix(got, want) {
		t.Errorf("in a handler span the command got %q, want %s…", got, want)
	}
	if got := run(context.Background(), &jobwatchv1.Job{Id: "j_2", Kind: "k"}); got != "|" {
		t.Errorf("an untraced job's command got %q, want no trace context", got)
	}
}
