package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/server"
)

// Submit a job and wait for its outcome: no poll loop, no deadline to
// guess, and it keeps waiting across server restarts.
func Example() {
	serverURL, stop := exampleServer() // a real server with an "enrich" worker, as jobwatch demo has
	defer stop()

	ctx := context.Background()
	c := client.New(serverURL)
	payload, err := structpb.NewStruct(map[string]any{"catalogue": "spring", "batches": 3})
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{
		Kind: "enrich", Payload: structpb.NewStructValue(payload),
	})
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitForJob(ctx, job.GetId())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.GetState(), done.GetResult().GetStructValue().AsMap()["batches"])
	// Output: JOB_STATE_SUCCEEDED 3
}

// Run handlers for a kind of job; progress reaches watchers at once.
func ExampleWorker() {
	serverURL, stop := exampleServer()
	defer stop()

	ctx, cancel := context.WithCancel(context.Background())
	c := client.New(serverURL)
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{Concurrency: 4})
	w.Handle("greet", func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		progress(50, "looking up the name")
		return "hello, " + job.GetPayload().GetStringValue(), nil
	})
	go w.Run(ctx) // until cancel(); then it drains running jobs
	defer cancel()

	job, _ := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "greet", Payload: structpb.NewStringValue("Ada")})
	done, _ := c.WaitForJob(ctx, job.GetId())
	fmt.Println(done.GetResult().GetStringValue())
	// Output: hello, Ada
}

// Follow a job's snapshots until it ends; Watch resumes by itself.
func ExampleClient_Watch() {
	serverURL, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c := client.New(serverURL)
	job, _ := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "resize", Payload: structpb.NewStringValue("dog.png")})
	for snap, err := range c.Watch(ctx, job.GetId()) {
		if err != nil {
			log.Fatal(err)
		}
		if client.Terminal(snap.GetState()) {
			fmt.Println(snap.GetState(), snap.GetPercent())
		}
	}
	// Output: JOB_STATE_SUCCEEDED 100
}

// exampleServer starts a real server on a temporary SQLite file, with an
// in-process worker that "resizes" images and "enriches" catalogues (the
// demo's kind, with a result of the same shape).
func exampleServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "jobwatch-example")
	if err != nil {
		log.Fatal(err)
	}
	// The examples leave their clients' connections open, as short
	// programs do; the server need not wait for them when it stops.
	s, err := launch(serverOptions{db: filepath.Join(dir, "jobwatch.db"),
		server: server.Config{ShutdownGrace: 10 * time.Millisecond}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := client.NewWorker(inproc.WorkerBackend(s.Engine, 0), client.WorkerConfig{})
	w.Handle("resize", func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		name := job.GetPayload().GetStringValue()
		return strings.TrimSuffix(name, ".png") + "-small.png", nil
	})
	w.Handle("enrich", func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		batches := job.GetPayload().GetStructValue().GetFields()["batches"].GetNumberValue()
		return map[string]any{"batches": batches, "rows_enriched": 250 * batches}, nil
	})
	ran := make(chan struct{})
	go func() { _ = w.Run(ctx); close(ran) }()
	return s.URL, func() {
		cancel()
		<-ran
		s.Stop()
		os.RemoveAll(dir)
	}
}
