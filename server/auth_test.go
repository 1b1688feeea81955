package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// The tokens of the auth tests: two client tokens of two tenants, a
// worker token without limits, worker tokens limited to one kind and to
// one tenant, and an admin token.
const (
	acmeToken    = "acme-client-token"
	globexToken  = "globex-client-token"
	workerToken  = "worker-token"
	enrichToken  = "enrich-worker-token"
	acmeWorker   = "acme-worker-token"
	adminToken   = "admin-token"
	unknownToken = "a-token-nobody-issued"
	missingJobID = "01JZZZZZZZZZZZZZZZZZZZZZZZ" // well formed, never issued
)

func testTokens(t testing.TB, tokens ...string) *auth.Tokens {
	t.Helper()
	if len(tokens) == 0 {
		tokens = []string{acmeToken, globexToken, workerToken, enrichToken, acmeWorker, adminToken}
	}
	var b strings.Builder
	b.WriteString("tokens:\n")
	roles := map[string]string{
		acmeToken:   "{role: client, tenant: acme}",
		globexToken: "{role: client, tenant: globex}",
		workerToken: "{role: worker}",
		enrichToken: "{role: worker, kinds: [enrich]}",
		acmeWorker:  "{role: worker, tenants: [acme]}",
		adminToken:  "{role: admin}",
	}
	for _, tok := range tokens {
		fmt.Fprintf(&b, "  - %s\n", strings.Replace(roles[tok], "{", "{sha256: "+auth.Digest(tok)+", ", 1))
	}
	set, err := auth.ParseTokens("tokens.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// bearerTransport sends every request with token, as the Go client's
// WithToken does; "" sends none.
type bearerTransport struct {
	base  http.RoundTripper
	token string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// protocol is one of the three the table runs over.
type protocol struct {
	name string
	hc   func(ts *testServer) *http.Client
	opts []connect.ClientOption
}

var authProtocols = []protocol{
	{"connect JSON over HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithProtoJSON()}},
	{"connect protobuf over h2c", (*testServer).h2cClient, nil},
	{"grpc over h2c", (*testServer).h2cClient, []connect.ClientOption{connect.WithGRPC()}},
}

func (ts *testServer) clientsWithToken(p protocol, token string) clients {
	hc := p.hc(ts)
	hc.Transport = bearerTransport{base: hc.Transport, token: token}
	return ts.clients(hc, p.opts...)
}

// authFixture makes, as the admin, what one call of the table acts on.
type authFixture struct {
	t     *testing.T
	admin clients
	n     *atomic.Int64
}

// queue returns a queue of its own, known to the server by a held job
// in it, for the pause rows.
func (f authFixture) queue() string {
	f.t.Helper()
	queue := fmt.Sprintf("auth-pause-%d", f.n.Add(1))
	submit(f.t, f.admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "auth-pause", Queue: queue, Hold: true})
	return queue
}

// job submits a job of tenant acme with a kind of its own, so a claim
// for that kind takes exactly it.
func (f authFixture) job(hold bool) *jobwatchv1.Job {
	f.t.Helper()
	kind := fmt.Sprintf("auth-%d", f.n.Add(1))
	return submit(f.t, f.admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: kind, Hold: hold})
}

// ended is a cancelled job of acme: waits and watches answer at once.
func (f authFixture) ended() *jobwatchv1.Job {
	f.t.Helper()
	j := f.job(false)
	resp, err := f.admin.jobs.CancelJob(ctxTimeout(f.t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: j.GetId()})
	if err != nil {
		f.t.Fatalf("cancel: %v", err)
	}
	return resp.GetJob()
}

// claimed is a job of acme claimed by the admin: its lease.
func (f authFixture) claimed() *jobwatchv1.ClaimJobResponse {
	f.t.Helper()
	return claim(f.t, f.admin, f.job(false).GetKind())
}

// firstMessage is a stream's outcome as a caller sees it: nil once the
// first message arrives, else the error the stream ended with.
func firstMessage[T any](s *connect.ServerStreamForClient[T], err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Receive() {
		return nil
	}
	if s.Err() == nil {
		return errors.New("the stream ended OK without a message")
	}
	return s.Err()
}

// authRPC is one RPC of the table: prepare makes what it acts on (as the
// admin) and returns the call to make as the caller under test.
type authRPC struct {
	name    string
	prepare func(f authFixture) func(ctx context.Context, c clients) error
	// The code each caller gets. other is a client of tenant globex,
	// same one of acme, whose jobs every call acts on.
	none, unknown, same, other, worker, admin connect.Code
}

const allowed connect.Code = 0 // OK

var (
	unauth = connect.CodeUnauthenticated
	denied = connect.CodePermissionDenied
	absent = connect.CodeNotFound
)

// authTable is every RPC of the three services against every caller.
var authTable = []authRPC{
	{"SubmitJob", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "submitted"})
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"SubmitJobs", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.SubmitJobs(ctx, &jobwatchv1.SubmitJobsRequest{Jobs: []*jobwatchv1.SubmitJobRequest{
				{Tenant: "acme", Kind: "submitted", Batch: "b"}, {Tenant: "acme", Kind: "submitted", Batch: "b"}}})
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"StartJob", func(f authFixture) func(context.Context, clients) error {
		id := f.job(true).GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.StartJob(ctx, &jobwatchv1.StartJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"GetJob", func(f authFixture) func(context.Context, clients) error {
		id := f.job(false).GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"ListJobs", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "acme"})
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"ListJobs of every tenant", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "*"})
			return err
		}
	}, unauth, unauth, denied, denied, denied, allowed},
	{"CancelJob", func(f authFixture) func(context.Context, clients) error {
		id := f.job(false).GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"RetryJob", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.RetryJob(ctx, &jobwatchv1.RetryJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"DeleteJob", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.DeleteJob(ctx, &jobwatchv1.DeleteJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"WaitJob", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"WaitJobs", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.WaitJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: []string{id}})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"WatchJob", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			return firstMessage(c.jobs.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id}))
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"GetJobLogs", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			_, err := c.jobs.GetJobLogs(ctx, &jobwatchv1.GetJobLogsRequest{JobId: id})
			return err
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"WatchJobLogs", func(f authFixture) func(context.Context, clients) error {
		id := f.ended().GetId()
		return func(ctx context.Context, c clients) error {
			stream, err := c.jobs.WatchJobLogs(ctx, &jobwatchv1.WatchJobLogsRequest{JobId: id})
			if err != nil {
				return err
			}
			for stream.Receive() {
			}
			return stream.Err() // an ended job without lines: the stream ends OK at once
		}
	}, unauth, unauth, allowed, absent, denied, allowed},
	{"WatchJobs", func(f authFixture) func(context.Context, clients) error {
		f.job(false) // the feed's first message is a page with it
		return func(ctx context.Context, c clients) error {
			return firstMessage(c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Tenant: "acme"}))
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"CancelJobs", func(f authFixture) func(context.Context, clients) error {
		kind := f.job(false).GetKind()
		return func(ctx context.Context, c clients) error {
			resp, err := c.jobs.CancelJobs(ctx, &jobwatchv1.CancelJobsRequest{Filter: &jobwatchv1.JobFilter{Tenant: "acme", Kinds: []string{kind}}})
			if err == nil && resp.GetChanged() != 1 {
				return fmt.Errorf("cancelled %d jobs, want 1", resp.GetChanged())
			}
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"RetryJobs", func(f authFixture) func(context.Context, clients) error {
		kind := f.ended().GetKind()
		return func(ctx context.Context, c clients) error {
			resp, err := c.jobs.RetryJobs(ctx, &jobwatchv1.RetryJobsRequest{Filter: &jobwatchv1.JobFilter{Tenant: "acme", Kinds: []string{kind}}})
			if err == nil && resp.GetChanged() != 1 {
				return fmt.Errorf("retried %d jobs, want 1", resp.GetChanged())
			}
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"DeleteJobs", func(f authFixture) func(context.Context, clients) error {
		kind := f.ended().GetKind()
		return func(ctx context.Context, c clients) error {
			resp, err := c.jobs.DeleteJobs(ctx, &jobwatchv1.DeleteJobsRequest{Filter: &jobwatchv1.JobFilter{Tenant: "acme", Kinds: []string{kind}}})
			if err == nil && resp.GetChanged() != 1 {
				return fmt.Errorf("deleted %d jobs, want 1", resp.GetChanged())
			}
			return err
		}
	}, unauth, unauth, allowed, denied, denied, allowed},
	{"GetServerInfo", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			resp, err := c.jobs.GetServerInfo(ctx, &jobwatchv1.GetServerInfoRequest{})
			if err == nil && !resp.GetAuthRequired() {
				return errors.New("GetServerInfo says no token is required")
			}
			return err
		}
	}, allowed, allowed, allowed, allowed, allowed, allowed},
	{"ClaimJob", func(f authFixture) func(context.Context, clients) error {
		kind := f.job(false).GetKind()
		return func(ctx context.Context, c clients) error {
			resp, err := c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{kind}})
			if err == nil && resp.GetJob() == nil {
				return errors.New("the claim got no job")
			}
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"Heartbeat", func(f authFixture) func(context.Context, clients) error {
		lease := f.claimed()
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(), Percent: 10})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"AppendJobLogs", func(f authFixture) func(context.Context, clients) error {
		lease := f.claimed()
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.AppendJobLogs(ctx, &jobwatchv1.AppendJobLogsRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(),
				Lines: []*jobwatchv1.AppendLogLine{{Text: "a line"}}})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"CompleteJob", func(f authFixture) func(context.Context, clients) error {
		lease := f.claimed()
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId()})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"FailJob", func(f authFixture) func(context.Context, clients) error {
		lease := f.claimed()
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(),
				Error: &jobwatchv1.JobError{Type: "Boom", Message: "no"}})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"ReleaseJob", func(f authFixture) func(context.Context, clients) error {
		lease := f.claimed()
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.ReleaseJob(ctx, &jobwatchv1.ReleaseJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId()})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"StopClaiming", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.workers.StopClaiming(ctx, &jobwatchv1.StopClaimingRequest{WorkerId: "w-stopping"})
			return err
		}
	}, unauth, unauth, denied, denied, allowed, allowed},
	{"ListQueues", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.queues.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
			return err
		}
	}, unauth, unauth, denied, denied, denied, allowed},
	{"ListSchedules", func(f authFixture) func(context.Context, clients) error {
		return func(ctx context.Context, c clients) error {
			_, err := c.queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
			return err
		}
	}, unauth, unauth, denied, denied, denied, allowed},
	{"PauseQueue", func(f authFixture) func(context.Context, clients) error {
		queue := f.queue()
		return func(ctx context.Context, c clients) error {
			_, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: queue})
			return err
		}
	}, unauth, unauth, denied, denied, denied, allowed},
	{"ResumeQueue", func(f authFixture) func(context.Context, clients) error {
		queue := f.queue()
		if _, err := f.admin.queues.PauseQueue(ctxTimeout(f.t, 5*time.Second), &jobwatchv1.PauseQueueRequest{Queue: queue}); err != nil {
			f.t.Fatalf("pause %s: %v", queue, err)
		}
		return func(ctx context.Context, c clients) error {
			_, err := c.queues.ResumeQueue(ctx, &jobwatchv1.ResumeQueueRequest{Queue: queue})
			return err
		}
	}, unauth, unauth, denied, denied, denied, allowed},
}

// TestEveryRPCAnswersEachCallerAsItsTokenAllows runs the table: every
// RPC of JobService, WorkerService and QueueService × {no token, an
// unknown token, a client of the job's tenant, a client of another
// tenant, a worker token, an admin token} × three protocols. A worker
// token on a client RPC and a client token on a worker RPC are the
// worker and same/other columns of the other service's rows.
func TestEveryRPCAnswersEachCallerAsItsTokenAllows(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), ClaimCap: time.Second}})
	cases := 0
	for _, p := range authProtocols {
		admin := ts.clientsWithToken(p, adminToken)
		callers := []struct {
			name  string
			c     clients
			code  func(authRPC) connect.Code
			token string
		}{
			{"no token", ts.clientsWithToken(p, ""), func(r authRPC) connect.Code { return r.none }, ""},
			{"an unknown token", ts.clientsWithToken(p, unknownToken), func(r authRPC) connect.Code { return r.unknown }, unknownToken},
			{"a client of the job's tenant", ts.clientsWithToken(p, acmeToken), func(r authRPC) connect.Code { return r.same }, acmeToken},
			{"a client of another tenant", ts.clientsWithToken(p, globexToken), func(r authRPC) connect.Code { return r.other }, globexToken},
			{"a worker", ts.clientsWithToken(p, workerToken), func(r authRPC) connect.Code { return r.worker }, workerToken},
			{"an admin", admin, func(r authRPC) connect.Code { return r.admin }, adminToken},
		}
		for _, rpc := range authTable {
			for _, caller := range callers {
				cases++
				name := fmt.Sprintf("%s/%s by %s", p.name, rpc.name, caller.name)
				t.Run(name, func(t *testing.T) {
					call := rpc.prepare(authFixture{t: t, admin: admin, n: &fixtureCounter})
					err := call(ctxTimeout(t, 10*time.Second), caller.c)
					want := caller.code(rpc)
					if want == allowed {
						if err != nil {
							t.Fatalf("got %v, want OK", err)
						}
						return
					}
					wantCode(t, err, want)
					if caller.token != "" && strings.Contains(err.Error(), caller.token) {
						t.Errorf("the error %q repeats the token", err)
					}
				})
			}
		}
	}
	t.Logf("%d cases: %d RPCs × 6 callers × %d protocols", cases, len(authTable), len(authProtocols))
	inTable := map[string]bool{}
	for _, rpc := range authTable {
		inTable[rpc.name] = true
	}
	services := jobwatchv1.File_jobwatch_v1_jobwatch_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			if name := string(methods.Get(j).Name()); !inTable[name] {
				t.Errorf("%s.%s is not in the table", services.Get(i).Name(), name)
			}
		}
	}
	if logs := ts.logs.String(); strings.Contains(logs, acmeToken) || strings.Contains(logs, adminToken) || strings.Contains(logs, unknownToken) {
		t.Errorf("a token reached the log")
	}
}

var fixtureCounter atomic.Int64

func TestRefusalsSayWhyWithoutTheToken(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	p := authProtocols[0]
	get := func(c clients) *connect.Error {
		_, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: missingJobID})
		var cerr *connect.Error
		if !errors.As(err, &cerr) {
			t.Fatalf("error %v is no connect error", err)
		}
		return cerr
	}
	if got := get(ts.clientsWithToken(p, "")); got.Code() != connect.CodeUnauthenticated || got.Message() != "a bearer token is required" {
		t.Errorf("no token: %v", got)
	}
	if got := get(ts.clientsWithToken(p, unknownToken)); got.Code() != connect.CodeUnauthenticated || got.Message() != "the token is not known" {
		t.Errorf("unknown token: %v", got)
	}
	for _, header := range [][]string{{"Authorization", "Basic " + acmeToken}, {"Authorization", acmeToken}, {"Authorization", "Bearer "}} {
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"jobId":"`+missingJobID+`"}`), header...)
		if status != http.StatusUnauthorized || !strings.Contains(body, "a bearer token is required") || strings.Contains(body, acmeToken) {
			t.Errorf("%q: %d %s, want 401 asking for a bearer token", header[1], status, body)
		}
	}
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"jobId":"`+missingJobID+`"}`), "Authorization", "bearer "+acmeToken)
	if status != http.StatusNotFound {
		t.Errorf("a lower-case bearer scheme: %d %s, want 404 (the token is accepted)", status, body)
	}
	status, body = rawPost(t, ts.url+"/jobwatch.v1.WorkerService/ClaimJob", "application/json", []byte(`{}`), "Authorization", "Bearer "+acmeToken)
	if status != http.StatusForbidden || !strings.Contains(body, "permission_denied") {
		t.Errorf("a client token on ClaimJob: %d %s, want 403 permission_denied", status, body)
	}
}

// TestAnotherTenantsJobIsNotFoundExactlyAsAMissingOne: a client asking
// for another tenant's job by id learns nothing a missing job would not
// tell it (same code, same message, over each protocol), and the job is
// left as it was.
func TestAnotherTenantsJobIsNotFoundExactlyAsAMissingOne(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	calls := []struct {
		name string
		call func(ctx context.Context, c clients, id string) error
	}{
		{"GetJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
			return err
		}},
		{"WaitJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: id})
			return err
		}},
		{"WatchJob", func(ctx context.Context, c clients, id string) error {
			return firstMessage(c.jobs.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id}))
		}},
		{"CancelJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: id})
			return err
		}},
		{"StartJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.StartJob(ctx, &jobwatchv1.StartJobRequest{JobId: id})
			return err
		}},
	}
	for _, p := range authProtocols {
		admin, globex := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, globexToken)
		for _, c := range calls {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				held := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "secret", Hold: true})
				theirs := c.call(ctxTimeout(t, 5*time.Second), globex, held.GetId())
				missing := c.call(ctxTimeout(t, 5*time.Second), globex, missingJobID)
				sameNotFound(t, theirs, held.GetId(), missing)
				resp, err := admin.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: held.GetId()})
				if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_PENDING || resp.GetJob().GetVersion() != held.GetVersion() {
					t.Errorf("the job changed: %v, %v", resp.GetJob(), err)
				}
			})
		}
	}
}

func TestAClientSeesOnlyItsTenant(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	p := authProtocols[1]
	acme, globex := ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, globexToken)
	mine := submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	if mine.GetTenant() != "acme" {
		t.Fatalf("a job submitted without a tenant is %q's, want the token's, acme", mine.GetTenant())
	}
	submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	resp, err := acme.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetId() != mine.GetId() {
		t.Errorf("ListJobs without a tenant = %v, want acme's one job", resp.GetJobs())
	}
	_, err = acme.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Tenant: "default"})
	wantCode(t, err, connect.CodePermissionDenied)
	// A SubmitJobs refused for one job's tenant names that job.
	_, err = acme.jobs.SubmitJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobsRequest{Jobs: []*jobwatchv1.SubmitJobRequest{
		{Kind: "k", Tenant: "acme"}, {Kind: "k", Tenant: "globex"}}})
	wantCode(t, err, connect.CodePermissionDenied)
	if want := `jobs[1].tenant: this token may only use tenant "acme"`; connect.CodeOf(err) != connect.CodePermissionDenied || err.(*connect.Error).Message() != want {
		t.Errorf("a SubmitJobs with globex's job = %v, want %q", err, want)
	}

	s, err := acme.jobs.WatchJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.WatchJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for s.Receive() {
		if js := s.Msg().GetJobs(); len(js) > 0 {
			if len(js) != 1 || js[0].GetId() != mine.GetId() {
				t.Errorf("WatchJobs without a tenant sent %v, want acme's one job", js)
			}
			break
		}
	}
}

func TestAWorkerTokenClaimsOnlyItsKinds(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), ClaimCap: 200 * time.Millisecond}})
	p := authProtocols[1]
	admin, enrich := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, enrichToken)
	submit(t, admin, &jobwatchv1.SubmitJobRequest{Kind: "resize"})
	want := submit(t, admin, &jobwatchv1.SubmitJobRequest{Kind: "enrich"})

	_, err := enrich.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"enrich", "resize"}})
	wantCode(t, err, connect.CodePermissionDenied)
	if !strings.Contains(err.Error(), `"resize"`) {
		t.Errorf("the refusal %q does not name the kind", err)
	}
	resp, err := enrich.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w"})
	if err != nil || resp.GetJob().GetId() != want.GetId() {
		t.Fatalf("a claim of no kinds got %v, %v; want the enrich job %s", resp.GetJob(), err, want.GetId())
	}
	resp, err = enrich.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w"})
	if err != nil || resp.GetJob() != nil {
		t.Fatalf("a second claim got %v, %v; want none (the resize job is not its kind)", resp.GetJob(), err)
	}
}

func TestAWorkerTokenClaimsOnlyItsTenants(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), ClaimCap: 200 * time.Millisecond}})
	p := authProtocols[2]
	admin, worker := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, acmeWorker)
	submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "index"})
	want := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "index"})

	resp, err := worker.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"index"}})
	if err != nil || resp.GetJob().GetId() != want.GetId() {
		t.Fatalf("claim got %v, %v; want acme's job %s", resp.GetJob(), err, want.GetId())
	}
	resp, err = worker.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"index"}})
	if err != nil || resp.GetJob() != nil {
		t.Fatalf("a second claim got %v, %v; want none (the other job is globex's)", resp.GetJob(), err)
	}
	resp, err = ts.clientsWithToken(p, workerToken).workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w"})
	if err != nil || resp.GetJob().GetTenant() != "globex" {
		t.Fatalf("a worker token for every tenant got %v, %v; want globex's job", resp.GetJob(), err)
	}
}

// TestARemovedTokenStopsAtOnceAndItsStreamsEnd: SetTokens (serve's
// SIGHUP) without a token refuses its next call and ends its open
// WatchJob, WatchJobs and parked WaitJob with unauthenticated; the
// calls of the tokens kept go on.
func TestARemovedTokenStopsAtOnceAndItsStreamsEnd(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	for _, p := range authProtocols {
		t.Run(p.name, func(t *testing.T) {
			ts.srv.SetTokens(testTokens(t))
			acme, globex := ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, globexToken)
			job := submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "long"})
			theirs := submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "long"})

			watching, err := acme.jobs.WatchJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WatchJobRequest{JobId: job.GetId()})
			if err != nil || !watching.Receive() {
				t.Fatalf("watch: %v %v", err, watching.Err())
			}
			kept, err := globex.jobs.WatchJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WatchJobRequest{JobId: theirs.GetId()})
			if err != nil || !kept.Receive() {
				t.Fatalf("watch: %v %v", err, kept.Err())
			}
			waited := make(chan error, 1)
			go func() {
				_, err := acme.jobs.WaitJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				waited <- err
			}()
			ts.waitForGauge("jobwatch_parked_waits", 1)

			ts.srv.SetTokens(testTokens(t, globexToken, workerToken, adminToken))
			for watching.Receive() {
				if watching.Msg().GetJob() != nil {
					t.Errorf("the revoked stream sent %v", watching.Msg().GetJob())
				}
			}
			wantCode(t, watching.Err(), connect.CodeUnauthenticated)
			select {
			case err := <-waited:
				wantCode(t, err, connect.CodeUnauthenticated)
			case <-time.After(5 * time.Second):
				t.Fatal("the parked WaitJob of the removed token did not end")
			}
			_, err = acme.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
			wantCode(t, err, connect.CodeUnauthenticated)

			if _, err := globex.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: theirs.GetId()}); err != nil {
				t.Fatalf("a kept token's call: %v", err)
			}
			var last *jobwatchv1.Job
			for kept.Receive() {
				if j := kept.Msg().GetJob(); j != nil {
					last = j
				}
			}
			if kept.Err() != nil || last.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
				t.Errorf("the kept token's stream ended with %v after %v, want OK after CANCELLED", kept.Err(), last)
			}
		})
	}
}

func TestATokenWhoseTenantChangedIsRevokedToo(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	job := submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	s, err := acme.jobs.WatchJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WatchJobRequest{JobId: job.GetId()})
	if err != nil || !s.Receive() {
		t.Fatalf("watch: %v", err)
	}
	moved, err := auth.ParseTokens("t.yaml", []byte("tokens:\n  - {sha256: "+auth.Digest(acmeToken)+", role: client, tenant: globex}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.SetTokens(moved)
	for s.Receive() {
	}
	wantCode(t, s.Err(), connect.CodeUnauthenticated)
	_, err = acme.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
	wantCode(t, err, connect.CodeNotFound) // now globex's token
}

func TestLogsAndMetricsNameTheTenantNeverTheToken(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	_, err := ts.clientsWithToken(authProtocols[1], unknownToken).jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: missingJobID})
	wantCode(t, err, connect.CodeUnauthenticated)

	id := auth.Digest(acmeToken)[:auth.TokenIDLength]
	logs := ts.logs.String()
	if !strings.Contains(logs, "tenant=acme") || !strings.Contains(logs, "token_id="+id) || !strings.Contains(logs, "role=client") {
		t.Errorf("the call's log line does not name its tenant, role and token id:\n%s", logs)
	}
	if strings.Contains(logs, acmeToken) || strings.Contains(logs, unknownToken) || strings.Contains(logs, auth.Digest(acmeToken)) {
		t.Errorf("a token or its whole digest reached the log")
	}
	families, err := ts.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range families {
		if f.GetName() != "jobwatch_token_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series = append(series, fmt.Sprintf("%s %v", strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	want := "code=ok,role=client,tenant=acme,token_id=" + id + " 1"
	if len(series) != 1 || series[0] != want {
		t.Errorf("jobwatch_token_requests_total = %q, want [%q]", series, want)
	}
}

func TestWithoutTokensNothingChanges(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.clientsWithToken(authProtocols[1], "any-bogus-token")
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "k"})
	if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	info, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{})
	if err != nil || info.GetAuthRequired() || info.GetCaller() != nil {
		t.Errorf("GetServerInfo = %v, %v; want auth_required false and no caller", info, err)
	}
}

// GetServerInfo says who a known token is, so that a page can offer only
// what it may do, in every protocol; it refuses no one.
func TestGetServerInfoSaysWhoTheTokenIs(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	for _, p := range authProtocols {
		for _, tc := range []struct {
			token string
			want  *jobwatchv1.Caller // nil: none
		}{
			{acmeToken, &jobwatchv1.Caller{Role: "client", Tenant: "acme"}},
			{workerToken, &jobwatchv1.Caller{Role: "worker"}},
			{adminToken, &jobwatchv1.Caller{Role: "admin"}},
			{unknownToken, nil},
			{"", nil},
		} {
			c := ts.clients(p.hc(ts), p.opts...)
			if tc.token != "" {
				c = ts.clientsWithToken(p, tc.token)
			}
			info, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{})
			if err != nil || !info.GetAuthRequired() {
				t.Errorf("%s, token %q: GetServerInfo = %v, %v; want auth_required", p.name, tc.token, info, err)
				continue
			}
			got := info.GetCaller()
			if (got == nil) != (tc.want == nil) || got.GetRole() != tc.want.GetRole() || got.GetTenant() != tc.want.GetTenant() {
				t.Errorf("%s, token %q: caller %v, want %v", p.name, tc.token, got, tc.want)
			}
		}
	}
}

// TestABodyIsNotReadForACallerTheTokenRefuses: connect reads a unary
// call's body before any interceptor runs, so a caller without a token
// was told how its body failed to decode (invalid_argument), and the
// server inflated a gzip body for it. The token is now judged first: no
// token, an unknown one, or a role that may not call the procedure gets
// the gate's refusal whatever the body, over Connect, gRPC and gRPC-Web.
func TestABodyIsNotReadForACallerTheTokenRefuses(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	getJob := ts.url + "/jobwatch.v1.JobService/GetJob"
	notProto := []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff} // one enveloped message, not protobuf
	// call posts body and returns what the answer says: a Connect
	// error's code and message, or a gRPC status from the headers, the
	// trailers or (gRPC-Web) the body's trailer frame.
	call := func(hc *http.Client, contentType string, body []byte, header ...string) (status int, answer string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, getJob, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Te", "trailers")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, fmt.Sprintf("%s grpc-status=%s%s grpc-message=%s%s", b,
			resp.Header.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"), resp.Trailer.Get("Grpc-Message"))
	}
	bomb := gzipBomb()
	for _, c := range []struct {
		name        string
		hc          *http.Client
		contentType string
		body        []byte
		header      []string
	}{
		{"Connect JSON not JSON", ts.http1Client(), "application/json", []byte(`{bad`), nil},
		{"Connect JSON gzip bomb", ts.http1Client(), "application/json", bomb, []string{"Content-Encoding", "gzip"}},
		{"gRPC-Web not protobuf", ts.http1Client(), "application/grpc-web+proto", notProto, nil},
		{"gRPC not protobuf", ts.h2cClient(), "application/grpc", notProto, nil},
	} {
		for _, who := range []struct {
			token, code, grpcCode, message string
		}{
			{"", "unauthenticated", "16", "a bearer token is required"},
			{unknownToken, "unauthenticated", "16", "the token is not known"},
			{workerToken, "permission_denied", "7", "a worker token may not call /jobwatch.v1.JobService/GetJob"},
		} {
			header := c.header
			if who.token != "" {
				header = append(slices.Clip(header), "Authorization", "Bearer "+who.token)
			}
			status, answer := call(c.hc, c.contentType, c.body, header...)
			want := `"code":"` + who.code + `"`
			if strings.HasPrefix(c.contentType, "application/grpc") {
				want = "grpc-status=" + who.grpcCode
			}
			if !strings.Contains(answer, want) || !strings.Contains(answer, strings.ReplaceAll(who.message, " ", "%20")) && !strings.Contains(answer, who.message) {
				t.Errorf("%s, token %q: %d %s; want %s, %s", c.name, who.token, status, answer, want, who.message)
			}
		}
	}
	// HTTP/1.1 with a body that never comes: the refusal comes at once
	// and ends the connection, not after the body's timeout (a minute
	// here), which net/http would wait out to read the body and keep the
	// connection.
	t.Run("HTTP/1.1 body that never comes", func(t *testing.T) {
		slow := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), BodyTimeout: time.Minute}})
		conn, err := net.Dial("tcp", addrOf(slow.url))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "POST /jobwatch.v1.JobService/GetJob HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", addrOf(slow.url)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no refusal while the body has not come: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("refusal %d, connection closed %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
		}
	})
	// With a token the body is read, and judged, as before.
	status, body := rawPost(t, getJob, "application/json", []byte(`{bad`), "Authorization", "Bearer "+acmeToken)
	if status != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") {
		t.Errorf("a client token, a body that is not JSON: %d %s; want 400 invalid_argument", status, body)
	}
}
