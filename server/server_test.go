package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// brokenStore is the real store with one job whose read fails the way a
// damaged disk would.
type brokenStore struct {
	store.Store
}

const brokenID = "j_broken"

func (s brokenStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if id == brokenID {
		return jobtype.Job{}, errors.New("disk I/O error at page 7731 of /var/lib/secret.db")
	}
	return s.Store.GetJob(ctx, id)
}

func TestAnInternalErrorSaysInternalErrorAndLogsTheDetail(t *testing.T) {
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store { return brokenStore{s} }})

	_, err := ts.h2c().jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: brokenID})
	wantCode(t, err, connect.CodeInternal)
	if msg := err.(*connect.Error).Message(); msg != "internal error" {
		t.Errorf("message = %q, want exactly \"internal error\"", msg)
	}
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/WaitJob", "application/json", []byte(`{"job_id":"`+brokenID+`"}`))
	if status != http.StatusInternalServerError || body != `{"code":"internal","message":"internal error"}` {
		t.Errorf("curl sees %d %s, want 500 with only \"internal error\"", status, body)
	}
	if logs := ts.logs.String(); !strings.Contains(logs, "page 7731") || !strings.Contains(logs, "level=ERROR") {
		t.Errorf("the detail is not logged at error level:\n%s", logs)
	}
}

// panickingStore is the real store with one job whose read panics, the way
// a bug in a handler or the engine would.
type panickingStore struct {
	store.Store
}

const panicID = "j_panics"

func (s panickingStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if id == panicID {
		panic("nil map write in the secret module")
	}
	return s.Store.GetJob(ctx, id)
}

func TestAPanicIsAnInternalErrorLoggedAtErrorLevel(t *testing.T) {
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store { return panickingStore{s} }})

	// Over HTTP/1.1 (curl) and h2c (Go clients), unary and streaming: the
	// caller gets a Connect error, not a dropped connection that clients
	// retry as a transport error.
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/WaitJob", "application/json", []byte(`{"job_id":"`+panicID+`"}`))
	if status != http.StatusInternalServerError || body != `{"code":"internal","message":"internal error"}` {
		t.Errorf("curl sees %d %s, want 500 with only \"internal error\"", status, body)
	}
	c := ts.h2c()
	_, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: panicID})
	wantCode(t, err, connect.CodeInternal)
	if msg := err.(*connect.Error).Message(); msg != "internal error" {
		t.Errorf("message = %q, want exactly \"internal error\"", msg)
	}
	stream, err := c.jobs.WatchJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.WatchJobRequest{JobId: panicID})
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	wantCode(t, stream.Err(), connect.CodeInternal)

	if logs := ts.logs.String(); !strings.Contains(logs, "secret module") || !strings.Contains(logs, "level=ERROR") {
		t.Errorf("the panic is not logged at error level:\n%s", logs)
	}
	if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Errorf("the server stopped serving after a panic: %v", err)
	}
}

func TestClaimJobParksUntilAJobIsReadyOrTheCapPasses(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{ClaimCap: 200 * time.Millisecond}})
	c := ts.h2c()

	start := time.Now()
	resp, err := c.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w1"})
	if err != nil || resp.GetJob() != nil || resp.GetLeaseId() != "" {
		t.Fatalf("claim with nothing to run = %v, %v; want an empty OK answer", resp, err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("empty claim answered after %v, want it to park for the 200ms cap", took)
	}

	long := startServer(t, serverOptions{config: server.Config{ClaimCap: time.Minute}})
	c = long.h2c()
	claimed := make(chan *jobwatchv1.ClaimJobResponse, 1)
	go func() {
		resp, err := c.workers.ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w1", Kinds: []string{"email"}})
		if err != nil {
			t.Errorf("ClaimJob: %v", err)
		}
		claimed <- resp
	}()
	long.waitForGauge("jobwatch_parked_claims", 1)
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "email"})
	select {
	case resp := <-claimed:
		if resp.GetJob().GetId() != job.GetId() || resp.GetLeaseId() == "" || resp.GetLeaseExpiresAt() == nil {
			t.Fatalf("claim = %v, want job %s under a lease", resp, job.GetId())
		}
		if resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || resp.GetJob().GetWorkerId() != "w1" {
			t.Fatalf("claimed job = %v, want RUNNING by w1", resp.GetJob())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked claim did not wake when a job was submitted")
	}
}

func TestClaimJobWithMaxJobsAnswersEveryReadyJobUpToItInClaims(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, tr := range []struct {
		name string
		c    clients
	}{
		{"connect over h2c", ts.h2c()},
		{"gRPC", ts.clients(ts.h2cClient(), connect.WithGRPC())},
		{"connect JSON over HTTP/1.1", ts.clients(ts.http1Client(), connect.WithProtoJSON())},
	} {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.c
			kind := "batch-" + strings.ReplaceAll(tr.name, " ", "-")
			var want []string
			for range 5 {
				want = append(want, submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind}).GetId())
			}
			resp, err := c.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{kind}, MaxJobs: 3})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetJob() != nil || resp.GetLeaseId() != "" {
				t.Errorf("answer with max_jobs set job %v lease %q, want both only in claims", resp.GetJob(), resp.GetLeaseId())
			}
			var got []string
			leases := map[string]bool{}
			for _, cl := range resp.GetClaims() {
				got = append(got, cl.GetJob().GetId())
				leases[cl.GetLeaseId()] = true
				if cl.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || cl.GetLeaseExpiresAt() == nil {
					t.Errorf("claim %v, want a RUNNING job and its lease expiry", cl)
				}
			}
			if !slices.Equal(got, want[:3]) || len(leases) != 3 || leases[""] {
				t.Fatalf("claimed %v under %d leases, want the oldest three %v under three", got, len(leases), want[:3])
			}
			// Each lease holds its own job alone.
			first := resp.GetClaims()[0]
			_, err = c.workers.CompleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CompleteJobRequest{JobId: first.GetJob().GetId(), LeaseId: resp.GetClaims()[1].GetLeaseId()})
			wantCode(t, err, connect.CodeFailedPrecondition)
			for _, cl := range resp.GetClaims() {
				if _, err := c.workers.CompleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CompleteJobRequest{JobId: cl.GetJob().GetId(), LeaseId: cl.GetLeaseId()}); err != nil {
					t.Fatalf("complete %s: %v", cl.GetJob().GetId(), err)
				}
			}

			// Without max_jobs, one job, in job and lease_id, as before.
			one, err := c.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{kind}})
			if err != nil || one.GetJob().GetId() != want[3] || one.GetLeaseId() == "" || len(one.GetClaims()) != 0 {
				t.Fatalf("claim without max_jobs = %v, %v; want %s in job and lease_id alone", one, err, want[3])
			}
		})
	}
}

func TestSubmitJobWithWaitReturnsTheFinishedJobInline(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	go func() {
		resp, err := c.workers.ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"sync"}})
		if err != nil || resp.GetJob() == nil {
			t.Errorf("claim: %v %v", resp, err)
			return
		}
		c.workers.CompleteJob(context.Background(), &jobwatchv1.CompleteJobRequest{
			JobId: resp.GetJob().GetId(), LeaseId: resp.GetLeaseId(), Result: mustValue(t, map[string]any{"report": "inline"}),
		})
	}()
	ts.waitForGauge("jobwatch_parked_claims", 1)
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "sync", Wait: true})
	if job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED ||
		job.GetResult().GetStructValue().GetFields()["report"].GetStringValue() != "inline" {
		t.Fatalf("submit with wait = %v, want SUCCEEDED with the result inline", job)
	}
}

func TestWorkerCallsWithAStaleLeaseAreFailedPrecondition(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "cancelled-under-worker"})
	lease := claim(t, c, "cancelled-under-worker")
	if _, err := c.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	hb, err := c.workers.Heartbeat(ctxTimeout(t, 5*time.Second), &jobwatchv1.HeartbeatRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId()})
	if err != nil || !hb.GetCancelled() {
		t.Fatalf("heartbeat after cancel = %v, %v; want cancelled", hb, err)
	}
	_, err = c.workers.CompleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId()})
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = c.jobs.StartJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.StartJobRequest{JobId: job.GetId()})
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func TestListingJobsQueuesAndServerInfo(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{DemoKinds: []string{"demo.sleep"}, Version: "v1.2.3"}})
	c := ts.h2c()
	first := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "a", Tenant: "acme"})
	second := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "b", Tenant: "acme"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "c", Tenant: "other", Hold: true})

	list, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{
		Tenant: "acme", States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_QUEUED},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetJobs()) != 2 || list.GetJobs()[0].GetId() != second.GetId() || list.GetJobs()[1].GetId() != first.GetId() {
		t.Fatalf("ListJobs = %v, want acme's two jobs newest first", list.GetJobs())
	}

	queues, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(queues.GetQueues()) != 1 || queues.GetQueues()[0].GetName() != "default" || queues.GetQueues()[0].GetQueued() != 2 {
		t.Fatalf("ListQueues = %v, want the default queue with 2 queued", queues.GetQueues())
	}

	info, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetDemo() || info.GetDemoKinds()[0] != "demo.sleep" || info.GetVersion() != "v1.2.3" || info.GetAuthRequired() {
		t.Fatalf("GetServerInfo = %v", info)
	}
}

func TestMetricsExposeJobsParkedCallsWakeLatencyAndRequests(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "other"})
	woke := make(chan error, 1)
	go func() {
		_, err := c.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
		woke <- err
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)
	page := get(t, ts.url+"/metrics")
	if !strings.Contains(page, "jobwatch_parked_waits 1") {
		t.Errorf("/metrics does not show the parked wait:\n%s", page)
	}
	complete(t, c, claim(t, c, "metered"), nil)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}

	page = get(t, ts.url+"/metrics")
	for _, want := range []string{
		`jobwatch_jobs{state="succeeded"} 1`,
		`jobwatch_jobs{state="queued"} 1`,
		`jobwatch_jobs{state="lost"} 0`,
		"jobwatch_parked_waits 0",
		"jobwatch_open_watches 0",
		"jobwatch_parked_claims 0",
		`jobwatch_requests_total{code="ok",procedure="/jobwatch.v1.JobService/SubmitJob"} 2`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The wait woke when the job started running and when it ended, if it
	// had parked in the engine by then: the gauge counts it from the
	// server's side, and on a loaded machine the engine's first read may
	// come after the end, which then needs no wake. So a few more rounds
	// while none was measured.
	woken := regexp.MustCompile(`jobwatch_wake_latency_seconds_count\{kind="wait"\} [1-9]`)
	for round := 0; !woken.MatchString(page) && round < 5; round++ {
		job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered-again"})
		go func() {
			_, err := c.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			woke <- err
		}()
		ts.waitForGauge("jobwatch_parked_waits", 1)
		complete(t, c, claim(t, c, "metered-again"), nil)
		if err := <-woke; err != nil {
			t.Fatal(err)
		}
		page = get(t, ts.url+"/metrics")
	}
	if !woken.MatchString(page) {
		t.Errorf("/metrics has no wake-up latency of the wait")
	}
}

func TestRequestsTotalCountsACallerOutOfTimeAsDeadlineExceeded(t *testing.T) {
	ts := startServer(t, serverOptions{})
	// A deadline already passed: Connect refuses the call before the handler
	// runs, with a bare context error.
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"job_id":"j_1"}`), "Connect-Timeout-Ms", "0")
	if status != http.StatusGatewayTimeout {
		t.Fatalf("GetJob with no time left = %d %s, want 504", status, body)
	}
	page := get(t, ts.url+"/metrics")
	if want := `jobwatch_requests_total{code="deadline_exceeded",procedure="/jobwatch.v1.JobService/GetJob"} 1`; !strings.Contains(page, want) {
		t.Errorf("/metrics lacks %q:\n%s", want, regexp.MustCompile(`(?m)^jobwatch_requests_total.*$`).FindAllString(page, -1))
	}
}

func get(t *testing.T, url string, header ...string) string {
	t.Helper()
	resp := do(t, http.MethodGet, url, header...)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func do(t *testing.T, method, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

func TestHealthAndReflectionAnswer(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, tt := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"connect", nil},
	} {
		t.Run("health over "+tt.name, func(t *testing.T) {
			health := grpchealth.NewClient(ts.h2cClient(), ts.url, tt.opts...)
			for _, service := range []string{"", jobwatchv1connect.JobServiceName, jobwatchv1connect.WorkerServiceName} {
				resp, err := health.Check(ctxTimeout(t, 5*time.Second), &grpchealth.CheckRequest{Service: service})
				if err != nil || resp.Status != grpchealth.StatusServing {
					t.Errorf("health of %q = %v, %v; want SERVING", service, resp, err)
				}
			}
		})
	}
	t.Run("reflection lists the services", func(t *testing.T) {
		stream := grpcreflect.NewClient(ts.h2cClient(), ts.url, connect.WithGRPC()).NewStream(ctxTimeout(t, 5*time.Second))
		defer stream.Close()
		names, err := stream.ListServices()
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, n := range names {
			listed[string(n)] = true
		}
		for _, want := range []string{jobwatchv1connect.JobServiceName, jobwatchv1connect.WorkerServiceName, jobwatchv1connect.QueueServiceName,
			grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName} {
			if !listed[want] {
				t.Errorf("reflection lists %v, missing %s", names, want)
			}
		}
		files, err := stream.FileContainingSymbol("jobwatch.v1.Job")
		if err != nil || len(files) == 0 {
			t.Errorf("reflection has no file for jobwatch.v1.Job: %v", err)
		}
	})
}

// Health speaks the health protocol's own messages: in JSON a status
// reads as the protocol names it, List answers for every service, and a
// Watch of a service the server does not know says SERVICE_UNKNOWN
// rather than ending.
func TestHealthSpeaksTheHealthProtocol(t *testing.T) {
	ts := startServer(t, serverOptions{})
	resp, err := http.Post(ts.url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"status":"SERVING"}` {
		t.Errorf("health Check in JSON = %d %s, want {\"status\":\"SERVING\"}", resp.StatusCode, body)
	}
	for _, opts := range [][]connect.ClientOption{{connect.WithGRPC()}, nil} {
		list := connect.NewClient[healthv1.HealthListRequest, healthv1.HealthListResponse](ts.h2cClient(), ts.url+"/grpc.health.v1.Health/List", opts...)
		got, err := list.CallUnary(ctxTimeout(t, 5*time.Second), connect.NewRequest(&healthv1.HealthListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, service := range []string{"", jobwatchv1connect.JobServiceName, jobwatchv1connect.WorkerServiceName, jobwatchv1connect.QueueServiceName} {
			if st := got.Msg.GetStatuses()[service].GetStatus(); st != healthv1.HealthCheckResponse_SERVING {
				t.Errorf("health List says %q is %v, want SERVING", service, st)
			}
		}
	}
	// A Check of a service it does not know is not_found over gRPC too,
	// with a name of any length: the message quotes only its start (the
	// whole of a 900 KB name did not fit in gRPC's trailers, and the
	// answer had no grpc-status at all).
	check := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](ts.h2cClient(), ts.url+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	for _, name := range []string{"no.such.Service", strings.Repeat("x", 900_000)} {
		_, err := check.CallUnary(ctxTimeout(t, 10*time.Second), connect.NewRequest(&healthv1.HealthCheckRequest{Service: name}))
		if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), name[:10]) || len(err.Error()) > 400 {
			t.Errorf("health Check of an unknown service of %d bytes: %.300v; want not_found quoting the name's start", len(name), err)
		}
	}
	watch := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](ts.h2cClient(), ts.url+"/grpc.health.v1.Health/Watch", connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := watch.CallServerStream(ctx, connect.NewRequest(&healthv1.HealthCheckRequest{Service: "no.such.Service"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStatus() != healthv1.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("health Watch of an unknown service: %v, %v; want SERVICE_UNKNOWN", stream.Msg(), stream.Err())
	}
}

// A call to a procedure that is not here is unimplemented in the caller's
// own protocol, not a plain 404 that a gRPC client reads as a broken
// transport; a browser's GET of a path that is not there still gets the
// page's 404.
func TestAnUnknownProcedureIsUnimplemented(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, path := range []string{"/no.such.Service/Method", "/jobwatch.v1.JobService/NoSuchMethod", "/grpc.health.v1.Health"} {
		for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}, "grpc-web": {connect.WithGRPCWeb()}} {
			c := connect.NewClient[jobwatchv1.GetJobRequest, jobwatchv1.GetJobResponse](ts.h2cClient(), ts.url+path, opts...)
			_, err := c.CallUnary(ctxTimeout(t, 5*time.Second), connect.NewRequest(&jobwatchv1.GetJobRequest{JobId: "j_1"}))
			if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), "no procedure") {
				t.Errorf("%s call to %s: %v, want unimplemented saying there is no such procedure", name, path, err)
			}
		}
	}
	if resp := do(t, http.MethodGet, ts.url+"/no.such.Service/Method"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of a procedure's path = %s, want the page's 404", resp.Status)
	}
}

// The v1alpha reflection service is what older grpcurl builds ask for.
// Its messages are internal to grpcreflect, so this only checks that a
// gRPC call there reaches a handler (HTTP 200 with a grpc-status).
func TestReflectionV1AlphaIsRouted(t *testing.T) {
	ts := startServer(t, serverOptions{})
	hc := ts.h2cClient()
	for path, wantStatus := range map[string]int{
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": http.StatusOK,
		"/no.such.Service/Method": http.StatusOK, // unimplemented
	} {
		req, err := http.NewRequest(http.MethodPost, ts.url+path, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantStatus {
			t.Errorf("POST %s = %d, want %d", path, resp.StatusCode, wantStatus)
		}
		if resp.Trailer.Get("Grpc-Status") == "" && resp.Header.Get("Grpc-Status") == "" {
			t.Errorf("POST %s has no grpc-status", path)
		}
	}
}

func TestThePlaceholderPageIsServedAtTheRoot(t *testing.T) {
	ts := startServer(t, serverOptions{})
	resp := do(t, http.MethodGet, ts.url+"/")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(body), "jobwatch") || !strings.Contains(string(body), "README") {
		t.Errorf("the page does not say what jobwatch is or point at the README:\n%s", body)
	}
	if resp := do(t, http.MethodGet, ts.url+"/no/such/page"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /no/such/page = %s, want 404", resp.Status)
	}
}

func TestCORSIsOffByDefaultAndAllowsOnlyTheConfiguredOrigins(t *testing.T) {
	preflight := []string{
		"Origin", "https://app.example",
		"Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "connect-protocol-version,content-type",
	}
	off := startServer(t, serverOptions{})
	if got := do(t, http.MethodOptions, off.url+"/jobwatch.v1.JobService/GetJob", preflight...).Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("without --cors-origins the preflight allowed %q", got)
	}

	on := startServer(t, serverOptions{config: server.Config{CORSOrigins: []string{"https://app.example"}}})
	if got := do(t, http.MethodOptions, on.url+"/jobwatch.v1.JobService/GetJob", preflight...).Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("preflight from an allowed origin got Allow-Origin %q", got)
	}
	// A page with tracing sends the trace context, and a token.
	traced := slices.Clone(preflight)
	traced[5] = "authorization,connect-protocol-version,content-type,traceparent,tracestate"
	if got := do(t, http.MethodOptions, on.url+"/jobwatch.v1.JobService/GetJob", traced...).Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("preflight with a token and a trace context got Allow-Origin %q", got)
	}
	// A page can read the header that says the server is full of
	// parked calls.
	call := do(t, http.MethodPost, on.url+"/jobwatch.v1.JobService/GetJob", "Origin", "https://app.example", "Content-Type", "application/json")
	if got := call.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(got, server.ParkedCallsHeader) {
		t.Errorf("a call from an allowed origin exposes %q, want %s among them", got, server.ParkedCallsHeader)
	}
	preflight[1] = "https://evil.example"
	if got := do(t, http.MethodOptions, on.url+"/jobwatch.v1.JobService/GetJob", preflight...).Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("preflight from another origin got Allow-Origin %q", got)
	}
}
