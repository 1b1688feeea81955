package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// The token goes on every kind of call, without the newline a token
// read from a file ends with (net/http refuses such a header, and a wait
// took that for a server out of reach until its deadline).
func TestTokenIsSentOnShortLongAndStreamingCalls(t *testing.T) {
	s := startServer(t, serverOptions{})
	target, _ := url.Parse(s.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // pass stream messages on at once
	var mu sync.Mutex
	auth := map[string]string{} // procedure → Authorization header seen
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	front.Config.Protocols = new(http.Protocols)
	front.Config.Protocols.SetHTTP1(true)
	front.Config.Protocols.SetUnencryptedHTTP2(true)
	front.Start()
	defer front.Close()

	c := fastClient(t, front.URL, client.WithToken("s3cret\n"))
	ctx := context.Background()
	job := submit(t, c, "authed")
	if _, err := c.Cancel(ctx, job.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForJob(ctx, job.GetId()); err != nil {
		t.Fatal(err)
	}
	for _, err := range c.Watch(ctx, job.GetId()) {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, proc := range []string{
		jobwatchv1connect.JobServiceSubmitJobProcedure,
		jobwatchv1connect.JobServiceCancelJobProcedure,
		jobwatchv1connect.JobServiceWaitJobProcedure,
		jobwatchv1connect.JobServiceWatchJobProcedure,
	} {
		if got := auth[proc]; got != "Bearer s3cret" {
			t.Errorf("%s sent Authorization %q, want \"Bearer s3cret\"", proc, got)
		}
	}
}

func TestJobServiceRoutesLongCallsToTheirOwnTransport(t *testing.T) {
	s := startServer(t, serverOptions{})
	short := &countingTransport{base: http.DefaultTransport}
	long := &countingTransport{base: http.DefaultTransport}
	c := fastClient(t, s.URL,
		client.WithHTTPClient(&http.Client{Transport: short}),
		client.WithLongCallHTTPClient(&http.Client{Transport: long}))
	ctx := context.Background()
	job := submit(t, c, "routed")
	if _, err := c.JobService().CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JobService().WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForJob(ctx, job.GetId()); err != nil {
		t.Fatal(err)
	}
	if short.n() != 2 || long.n() != 2 {
		t.Fatalf("short transport carried %d calls, long %d; want Submit+Cancel on short, both waits on long",
			short.n(), long.n())
	}
}

type countingTransport struct {
	base  http.RoundTripper
	mu    sync.Mutex
	calls int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *countingTransport) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// A not_found answer is the package's sentinel for it and, as every other
// answer, the server's *connect.Error, with the server's words once.
// A unique_key an active job holds is ErrJobAlreadyActive, from Submit,
// SubmitJobs and Retry alike, and the *connect.Error it was; ActiveJob
// names the job holding the key. It reads as the server's words.
func TestAUniqueKeyHeldIsTheSentinelAndNamesTheActiveJob(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()
	held, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "invoice", UniqueKey: "invoice-42"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "invoice", UniqueKey: "invoice-43"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, cancelled.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "invoice", UniqueKey: "invoice-43"}); err != nil {
		t.Fatal(err)
	}
	_, submitErr := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "invoice", UniqueKey: "invoice-42"})
	_, batchErr := c.SubmitJobs(ctx, []*jobwatchv1.SubmitJobRequest{{Kind: "invoice"}, {Kind: "invoice", UniqueKey: "invoice-42"}})
	_, retryErr := c.Retry(ctx, cancelled.GetId())
	for name, err := range map[string]error{"Submit": submitErr, "SubmitJobs": batchErr, "Retry": retryErr} {
		var ce *connect.Error
		if !errors.Is(err, client.ErrJobAlreadyActive) || !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists {
			t.Errorf("%s: %v; want errors.Is ErrJobAlreadyActive and an already_exists *connect.Error", name, err)
			continue
		}
		want := held.GetId()
		key := "invoice-42"
		if name == "Retry" {
			want, key = "", "invoice-43" // the job submitted again with its key
		}
		active, ok := client.ActiveJob(err)
		if !ok || (want != "" && active.GetJobId() != want) || active.GetUniqueKey() != key {
			t.Errorf("%s: ActiveJob = %v, %v; want the job holding %q (%s)", name, active, ok, key, want)
		}
		if msg := err.Error(); msg != ce.Message() {
			t.Errorf("%s: reads %q; want the server's words alone, %q", name, msg, ce.Message())
		}
	}
	if _, ok := client.ActiveJob(errors.New("unrelated")); ok {
		t.Error("ActiveJob of another error said ok")
	}
}

// A submission past the tenant's max_queued is ErrQuotaExceeded, from
// Submit, SubmitJobs, Retry and RetryJobs alike, and the *connect.Error
// it was; Quota gives the numbers. It reads as the server's words. The
// other resource_exhausted answers (a request too large) are not it.
func TestAQuotaRefusalIsTheSentinelAndGivesTheNumbers(t *testing.T) {
	s := startServer(t, serverOptions{engine: jobs.Config{Rules: jobtype.Rules{
		Tenants: map[string]jobtype.TenantRules{"default": {MaxQueued: 1}}}}})
	c := fastClient(t, s.URL)
	ctx := context.Background()
	failed, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "quota"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, failed.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "quota"}); err != nil {
		t.Fatal(err)
	}
	_, submitErr := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "quota"})
	_, batchErr := c.SubmitJobs(ctx, []*jobwatchv1.SubmitJobRequest{{Kind: "quota"}, {Kind: "quota"}})
	_, retryErr := c.Retry(ctx, failed.GetId())
	_, bulkErr := c.RetryJobs(ctx, &jobwatchv1.JobFilter{Kinds: []string{"quota"}}, nil)
	for name, tc := range map[string]struct {
		err    error
		adding int64
	}{"Submit": {submitErr, 1}, "SubmitJobs": {batchErr, 2}, "Retry": {retryErr, 1}, "RetryJobs": {bulkErr, 1}} {
		var ce *connect.Error
		if !errors.Is(tc.err, client.ErrQuotaExceeded) || !errors.As(tc.err, &ce) || ce.Code() != connect.CodeResourceExhausted {
			t.Errorf("%s: %v; want errors.Is ErrQuotaExceeded and a resource_exhausted *connect.Error", name, tc.err)
			continue
		}
		q, ok := client.Quota(tc.err)
		if want := (&jobwatchv1.QuotaExceeded{Tenant: "default", MaxQueued: 1, Queued: 1, Adding: tc.adding}); !ok || !proto.Equal(q, want) {
			t.Errorf("%s: Quota = %v, %v; want %v", name, q, ok, want)
		}
		if msg := tc.err.Error(); msg != ce.Message() {
			t.Errorf("%s: reads %q; want the server's words alone, %q", name, msg, ce.Message())
		}
	}
	_, tooLarge := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "quota", Payload: structpb.NewStringValue(strings.Repeat("x", 300<<10))})
	if connect.CodeOf(tooLarge) != connect.CodeResourceExhausted || errors.Is(tooLarge, client.ErrQuotaExceeded) {
		t.Errorf("a payload too large: %v; want resource_exhausted and not ErrQuotaExceeded", tooLarge)
	}
	if _, ok := client.Quota(errors.New("unrelated")); ok {
		t.Error("Quota of another error said ok")
	}
}

func TestNotFoundIsTheSentinelAndTheConnectError(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()
	_, jobErr := c.Get(ctx, "j_00000000000000000000000000")
	_, queueErr := c.PauseQueue(ctx, "no-such-queue")
	_, afterErr := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", After: []string{"j_00000000000000000000000001"}})
	for _, tc := range []struct {
		err      error
		sentinel error
		words    string
	}{
		{jobErr, client.ErrJobNotFound, "j_00000000000000000000000000: job not found"},
		{queueErr, client.ErrQueueNotFound, `queue not found: queue "no-such-queue"`},
		// The server's words alone, not "job not found: after: job … not found".
		{afterErr, client.ErrJobNotFound, "after: job j_00000000000000000000000001 not found"},
	} {
		var ce *connect.Error
		if !errors.Is(tc.err, tc.sentinel) || !errors.As(tc.err, &ce) || ce.Code() != connect.CodeNotFound {
			t.Errorf("error %v: want errors.Is %v and errors.As a not_found *connect.Error", tc.err, tc.sentinel)
			continue
		}
		if msg := tc.err.Error(); !strings.HasPrefix(msg, tc.words) || strings.Count(msg, tc.sentinel.Error()) > 1 {
			t.Errorf("error reads %q, want it to start %q and name %q at most once", msg, tc.words, tc.sentinel)
		}
	}
}
