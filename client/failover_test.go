package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
)

// front is one address of a client's list: a reverse proxy to a real
// server that counts the calls it passes on, and that the test kills as
// kill -9 kills a server: the port refuses connections and every open
// one is cut, parked calls and streams included.
type front struct {
	srv  *httptest.Server
	back *testServer
	url  string // what the client is given: the front's address and path prefix

	mu    sync.Mutex
	calls map[string]int // procedure → calls received
	// dropAnswerOf is a procedure whose next call is passed on and carried
	// out, and whose answer is never sent: the front dies first.
	dropAnswerOf string
}

// startFront puts a front before back, serving under prefix ("" for the
// root).
func startFront(t *testing.T, back *testServer, prefix string) *front {
	t.Helper()
	target, _ := url.Parse(back.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1                    // pass stream messages on at once
	rp.ErrorLog = log.New(io.Discard, "", 0) // calls cut by a kill
	toBack := &http.Transport{}
	rp.Transport = toBack
	f := &front{back: back, calls: map[string]int{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[r.URL.Path]++
		drop := f.dropAnswerOf == r.URL.Path
		if drop {
			f.dropAnswerOf = ""
		}
		f.mu.Unlock()
		if drop {
			rp.ServeHTTP(httptest.NewRecorder(), r)
			f.kill()
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	})
	var handler http.Handler = h
	if prefix != "" {
		handler = http.StripPrefix(prefix, h)
	}
	f.srv = httptest.NewUnstartedServer(handler)
	f.srv.Config.Protocols = new(http.Protocols)
	f.srv.Config.Protocols.SetHTTP1(true)
	f.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	f.srv.Start()
	f.url = f.srv.URL + prefix
	t.Cleanup(func() { f.srv.Close(); toBack.CloseIdleConnections() })
	return f
}

// kill stops the front as kill -9 stops a server.
func (f *front) kill() {
	f.srv.Listener.Close()
	f.srv.CloseClientConnections()
}

func (f *front) count(procedure string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[procedure]
}

func (f *front) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func (f *front) dropAnswer(procedure string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropAnswerOf = procedure
}

// replicas starts n real servers on one database, as replicas on one
// PostgreSQL (or, in the SQLite pass, several servers of one process on
// one file, which hear each other's changes), each behind a front.
func replicas(t *testing.T, n int, ecfg jobs.Config) []*front {
	t.Helper()
	db := testdb.New(t)
	var fronts []*front
	for i := range n {
		back := startServer(t, serverOptions{db: db, engine: ecfg})
		prefix := ""
		if i%2 == 1 {
			prefix = "/jobwatch" // a server behind a path, as under a shared ingress
		}
		fronts = append(fronts, startFront(t, back, prefix))
	}
	return fronts
}

// list is the address list of fronts, comma-separated.
func list(fronts ...*front) string {
	var urls []string
	for _, f := range fronts {
		urls = append(urls, f.url)
	}
	return strings.Join(urls, ",")
}

func TestClientWithSeveralServersMovesToTheNextWhenOneIsGone(t *testing.T) {
	fs := replicas(t, 2, jobs.Config{})
	a, b := fs[0], fs[1]
	c := fastClient(t, list(a, b))
	ctx := context.Background()
	submit := jobwatchv1connect.JobServiceSubmitJobProcedure

	first := submit1(t, c, "before")
	if a.count(submit) != 1 || b.count(submit) != 0 {
		t.Fatalf("the first submit reached a %d and b %d times; want a once", a.count(submit), b.count(submit))
	}
	a.kill()
	// Cut on the connection the kill closed: the error is the caller's,
	// to retry or not, and b hears nothing of it. Refused (the client
	// dialled a again): it was never sent, so it goes on to b at once.
	sentToB := 0
	if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "during"}); err != nil {
		if b.count(submit) != 0 {
			t.Fatalf("the failed submit (%v) was sent to b too", err)
		}
	} else if sentToB = 1; b.count(submit) != 1 {
		t.Fatalf("the submit that a refused reached b %d times; want once", b.count(submit))
	}
	second := submit1(t, c, "after")
	if b.count(submit) != sentToB+1 {
		t.Errorf("the submit after the failure reached b %d times; want once more (b serves under %s)", b.count(submit)-sentToB, b.url)
	}
	for _, id := range []string{first.GetId(), second.GetId()} {
		if _, err := c.Get(ctx, id); err != nil {
			t.Errorf("get %s from b: %v", id, err)
		}
	}
}

// A one-shot call whose address refuses connections was never sent: it
// goes on to the next address of the list at once, as jobwatch get or
// submit with JOBWATCH_SERVER=a,b needs when a is down.
func TestACallThatCannotConnectGoesToTheNextServer(t *testing.T) {
	fs := replicas(t, 1, jobs.Config{})
	b := fs[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() // nothing listens there once closed
	ln.Close()
	c := fastClient(t, down+","+b.url)
	j, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "refused.first"})
	if err != nil {
		t.Fatalf("submit with the first server down: %v; want it made on the second", err)
	}
	if n := b.count(jobwatchv1connect.JobServiceSubmitJobProcedure); n != 1 {
		t.Fatalf("the second server received %d submits; want 1", n)
	}
	if _, err := c.Get(context.Background(), j.GetId()); err != nil {
		t.Fatalf("get: %v", err)
	}
}

func submit1(t *testing.T, c *client.Client, kind string) *jobwatchv1.Job {
	t.Helper()
	j, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: kind, MaxAttempts: 2})
	if err != nil {
		t.Fatalf("submit %s: %v", kind, err)
	}
	return j
}

func TestSubmitWhoseAnswerIsLostIsNotSentAgain(t *testing.T) {
	fs := replicas(t, 2, jobs.Config{})
	a, b := fs[0], fs[1]
	c := fastClient(t, list(a, b))
	ctx := context.Background()
	submit := jobwatchv1connect.JobServiceSubmitJobProcedure

	// a commits the submit and dies before it answers.
	a.dropAnswer(submit)
	req := &jobwatchv1.SubmitJobRequest{Kind: "once", UniqueKey: "invoice-42"}
	if j, err := c.Submit(ctx, req); err == nil {
		t.Fatalf("the submit whose answer was lost returned %v, no error", j)
	}
	if a.count(submit) != 1 || b.count(submit) != 0 {
		t.Fatalf("the submit reached a %d and b %d times; want a once and b never", a.count(submit), b.count(submit))
	}
	list, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Kind: "once"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 1 {
		t.Fatalf("%d jobs of kind once after the submit; want the 1 a committed", n)
	}
	made := list.GetJobs()[0].GetId()

	// The caller's retry goes to b, and the unique key makes it safe: b
	// names the job a made.
	_, err = c.Submit(ctx, req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists {
		t.Fatalf("the retried submit returned %v; want already_exists", err)
	}
	var named string
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if active, ok := v.(*jobwatchv1.JobAlreadyActive); ok {
				named = active.GetJobId()
			}
		}
	}
	if named != made || b.count(submit) != 1 {
		t.Errorf("the retry on b (%d calls) named job %q; want %s", b.count(submit), named, made)
	}
}

func TestLongCallsOnAServerThatDiesGoOnOnTheNext(t *testing.T) {
	fs := replicas(t, 2, jobs.Config{})
	a, b := fs[0], fs[1]
	c := fastClient(t, list(a, b))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	job := submit1(t, c, "long")
	waited := waitSucceeded(ctx, c, job.GetId())
	var versions []int64
	watched := make(chan error, 1)
	go func() {
		for j, err := range c.Watch(ctx, job.GetId()) {
			if err != nil {
				watched <- err
				return
			}
			versions = append(versions, j.GetVersion())
		}
		watched <- nil
	}()
	eventually(t, "the wait and the watch parked on a", func() bool {
		return a.back.gauge("jobwatch_parked_waits") == 1 && a.back.gauge("jobwatch_open_watches") == 1
	})

	a.kill()
	eventually(t, "the wait and the watch parked on b", func() bool {
		return b.back.gauge("jobwatch_parked_waits") == 1 && b.back.gauge("jobwatch_open_watches") == 1
	})
	id, lease := claim(t, b.back.Engine, "long")
	complete(t, b.back.Engine, id, lease, `{"ok":true}`)

	if err := <-waited; err != nil {
		t.Errorf("wait: %v", err)
	}
	if err := <-watched; err != nil {
		t.Errorf("watch: %v", err)
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] <= versions[i-1] {
			t.Errorf("watch yielded versions %v, not increasing", versions)
		}
	}
}

func TestAWaitOnAServerThatVanishesSilentlyGoesOnOnTheNextAfterItsPings(t *testing.T) {
	fs := replicas(t, 2, jobs.Config{})
	// Nothing is closed: only an unanswered PING tells the client that
	// the first server is gone. Pings far shorter than the default
	// 10s + 5s keep the test quick.
	p := startProxy(t, fs[0].back.Addr)
	c := fastClient(t, p.URL()+","+fs[1].url, client.WithPings(100*time.Millisecond, 200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	job := submit1(t, c, "silent")
	waited := waitSucceeded(ctx, c, job.GetId())
	eventually(t, "the wait parked on the first server", func() bool { return fs[0].back.gauge("jobwatch_parked_waits") == 1 })
	p.Freeze()
	eventually(t, "the wait parked on the second server", func() bool { return fs[1].back.gauge("jobwatch_parked_waits") == 1 })
	id, lease := claim(t, fs[1].back.Engine, "silent")
	complete(t, fs[1].back.Engine, id, lease, `null`)
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}
}

// heldWorker is a Worker of kind "task" whose handler, for a job whose
// payload is "hold", says it started, waits for proceed, reports 50%
// with a step, and returns once finish closes (or its context ends);
// other jobs end at once.
type heldWorker struct {
	started         chan string
	proceed, finish chan struct{}
	stop            func() // stops the worker and waits for its Run
}

func startHeldWorker(ctx context.Context, c *client.Client, step string) *heldWorker {
	h := &heldWorker{started: make(chan string, 2), proceed: make(chan struct{}), finish: make(chan struct{})}
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{
		Backoff: client.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	w.Handle("task", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
		h.started <- j.GetId()
		if j.GetPayload().GetStringValue() != "hold" {
			return nil, nil
		}
		<-h.proceed
		p(50, step)
		select {
		case <-h.finish:
			return "done", nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	h.stop = func() { stop(); <-ran }
	return h
}

func TestWorkerOnSeveralServersKeepsItsLeaseAndClaimsWhenOneDies(t *testing.T) {
	// A 1 s lease: a worker whose heartbeats did not move within a
	// second would lose the job and see it run again.
	fs := replicas(t, 2, jobs.Config{LeaseTimeout: time.Second})
	a, b := fs[0], fs[1]
	c := fastClient(t, list(a, b))
	observer := fastClient(t, b.back.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	w := startHeldWorker(ctx, c, "after the kill")
	defer w.stop()

	held, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "task", MaxAttempts: 2, Payload: structpb.NewStringValue("hold")})
	if err != nil {
		t.Fatal(err)
	}
	<-w.started
	if a.count(jobwatchv1connect.WorkerServiceClaimJobProcedure) == 0 {
		t.Fatal("the job was not claimed through a")
	}
	a.kill()
	close(w.proceed)
	eventually(t, "the progress after the kill reaching the database through b", func() bool {
		j, err := observer.Get(ctx, held.GetId())
		return err == nil && j.GetPercent() == 50
	})
	close(w.finish)
	j, err := observer.WaitForJob(ctx, held.GetId())
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempt() != 1 {
		t.Fatalf("the held job ended %v at attempt %d (%v); want SUCCEEDED at attempt 1: the lease kept through b", j.GetState(), j.GetAttempt(), err)
	}

	// The worker's next claim parks on b and gets the next job.
	next, err := observer.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "task"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := observer.WaitForJob(ctx, next.GetId()); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the next job ended %v (%v); want SUCCEEDED", j.GetState(), err)
	}
	for _, p := range []string{jobwatchv1connect.WorkerServiceHeartbeatProcedure, jobwatchv1connect.WorkerServiceCompleteJobProcedure, jobwatchv1connect.WorkerServiceClaimJobProcedure} {
		if b.count(p) == 0 {
			t.Errorf("b never received %s", p)
		}
	}
}

// A server that freezes (a stopped process, its connection open and
// silent) is noticed by the connection's pings only after 15 s by
// default; a worker's heartbeat unanswered for a third of the lease
// moves on to the next server before the lease ends.
func TestWorkerOnSeveralServersKeepsItsLeaseWhenOneFreezes(t *testing.T) {
	fs := replicas(t, 2, jobs.Config{LeaseTimeout: 3 * time.Second})
	p := startProxy(t, fs[0].back.Addr)
	c := fastClient(t, p.URL()+","+fs[1].url) // the default pings: 10 s + 5 s
	observer := fastClient(t, fs[1].back.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	w := startHeldWorker(ctx, c, "after the freeze")
	defer func() { p.Drop(); w.stop() }() // its claim parked on the frozen server ends

	held, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "task", MaxAttempts: 2, Payload: structpb.NewStringValue("hold")})
	if err != nil {
		t.Fatal(err)
	}
	<-w.started
	p.Freeze()
	frozenAt := time.Now()
	close(w.proceed)
	eventually(t, "the progress after the freeze reaching the database through the second server", func() bool {
		j, err := observer.Get(ctx, held.GetId())
		return err == nil && j.GetPercent() == 50
	})
	// Renewed through the second server, a heartbeat a second, past the
	// end of the lease the frozen server last renewed.
	eventually(t, "heartbeats through the second server for longer than the lease", func() bool {
		return fs[1].count(jobwatchv1connect.WorkerServiceHeartbeatProcedure) >= 5 && time.Since(frozenAt) > 3*time.Second
	})
	close(w.finish)
	j, err := observer.WaitForJob(ctx, held.GetId())
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempt() != 1 {
		t.Fatalf("the job ended %v at attempt %d (%v); want SUCCEEDED at attempt 1: the lease kept through the second server", j.GetState(), j.GetAttempt(), err)
	}
}

func TestCallsFailingTogetherMoveTheClientOneServerOn(t *testing.T) {
	fs := replicas(t, 3, jobs.Config{})
	a, b, c3 := fs[0], fs[1], fs[2]
	var mu sync.Mutex
	var moves []string
	c := fastClient(t, list(a, b, c3), client.WithServerMoveNotify(func(from, to string, cause error) {
		mu.Lock()
		defer mu.Unlock()
		moves = append(moves, from+" -> "+to)
		if cause == nil {
			t.Errorf("a move from %s without its cause", from)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Eight parked waits fail at once when a dies. Were each failure a
	// step, eight steps round a list of three would pass b and land on c.
	const waiters = 8
	var ids []string
	for range waiters {
		ids = append(ids, submit1(t, c, "together").GetId())
	}
	errs := make(chan error, waiters)
	for _, id := range ids {
		go func() {
			_, err := c.WaitForJob(ctx, id)
			errs <- err
		}()
	}
	eventually(t, "every wait parked on a", func() bool { return a.back.gauge("jobwatch_parked_waits") == waiters })
	a.kill()
	eventually(t, "every wait parked on b", func() bool { return b.back.gauge("jobwatch_parked_waits") == waiters })
	if n := c3.total(); n != 0 {
		t.Errorf("c, third in the list, received %d calls; want none while b answers", n)
	}
	mu.Lock()
	if want := []string{a.url + " -> " + b.url}; !slices.Equal(moves, want) {
		t.Errorf("WithServerMoveNotify heard %q; want %q", moves, want)
	}
	mu.Unlock()
	for range ids {
		id, lease := claim(t, b.back.Engine, "together")
		complete(t, b.back.Engine, id, lease, `{}`)
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Errorf("wait: %v", err)
		}
	}
}

func TestServerListsThatCannotWorkAreRefused(t *testing.T) {
	for _, tc := range []struct {
		list, wantErr string // "" for none
	}{
		{"http://a:8080,http://b:8080", ""},
		{" http://a:8080 , http://b:8080/jobwatch/ ,", ""},
		{"https://a:8443,https://b:8443", ""},
		{"http://a:8080,https://b:8443", "same scheme"},
		{"http://a:8080,b:8080", "must start with http:// or https://"},
		{",", "no server address"},
	} {
		err := client.ValidBaseURL(tc.list)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ValidBaseURL(%q) = %v; want nil", tc.list, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ValidBaseURL(%q) = %v; want an error saying %q", tc.list, err, tc.wantErr)
		}
	}

	// New takes no error: every call fails with it, and the retry loops
	// do not retry it.
	c := fastClient(t, "http://127.0.0.1:1,https://127.0.0.1:2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "same scheme") {
		t.Errorf("submit through mixed schemes: %v; want invalid_argument saying they must share a scheme", err)
	}
	if _, err := c.WaitForJob(ctx, "j_00000000000000000000000000"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("WaitForJob through mixed schemes: %v; want the invalid_argument at once, not retries", err)
	}

	// One address without its scheme, as grpc-go takes it, or of another
	// scheme: the same, where connect-go would say unavailable, which the
	// retry loops and a Worker would retry for ever.
	for _, addr := range []string{"127.0.0.1:1", "ftp://127.0.0.1:1"} {
		c := fastClient(t, addr)
		if _, err := c.WaitForJob(ctx, "j_00000000000000000000000000"); connect.CodeOf(err) != connect.CodeInvalidArgument ||
			!strings.Contains(err.Error(), "must start with http:// or https://") {
			t.Errorf("WaitForJob through %q: %v; want invalid_argument at once, saying what an address looks like", addr, err)
		}
		w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{})
		w.Handle("k", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return nil, nil })
		if err := w.Run(ctx); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("a Worker through %q: Run = %v; want invalid_argument at once", addr, err)
		}
	}
}

func TestWorkerCutOffFromEveryServerStopsItsHandlerBeforeTheJobRunsAgain(t *testing.T) {
	// A 1 s lease and retries at once: the job is claimed again as soon
	// as any server finds the lease expired.
	fs := replicas(t, 2, jobs.Config{LeaseTimeout: time.Second, RetryInitialBackoff: time.Millisecond, RetryMaxBackoff: time.Millisecond})
	a, b := fs[0], fs[1]
	observer := fastClient(t, b.back.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type run struct {
		start, end time.Time
		cause      error
	}
	first, second := make(chan run, 1), make(chan run, 1)
	worker := func(url string, runs chan<- run, beat func(client.Progress)) {
		w := client.NewWorker(fastClient(t, url).WorkerBackend(), client.WorkerConfig{
			Backoff: client.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			Logger:  slog.New(slog.DiscardHandler),
		})
		w.Handle("cut", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			r := run{start: time.Now()}
			if beat != nil {
				beat(p)
				<-ctx.Done()
			}
			r.end, r.cause = time.Now(), context.Cause(ctx)
			runs <- r
			return nil, nil
		})
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { w.Run(runCtx); close(ran) }()
		t.Cleanup(func() { stop(); <-ran })
	}
	worker(list(a, b), first, func(p client.Progress) { p(10, "running") })
	job, err := observer.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "cut", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a heartbeat of the first worker reaching the database", func() bool {
		j, err := observer.Get(ctx, job.GetId())
		return err == nil && j.GetPercent() == 10
	})
	a.kill()
	b.kill()
	// The second worker reaches b directly, past its dead front.
	worker(b.back.URL, second, nil)

	j, err := observer.WaitForJob(ctx, job.GetId())
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempt() != 2 {
		t.Fatalf("the job ended %v at attempt %d (%v); want SUCCEEDED at attempt 2, by the second worker", j.GetState(), j.GetAttempt(), err)
	}
	r1, r2 := <-first, <-second
	if !errors.Is(r1.cause, client.ErrLeaseLost) {
		t.Errorf("the cut-off worker's handler ended with %v; want ErrLeaseLost", r1.cause)
	}
	if r1.end.After(r2.start) {
		t.Errorf("the cut-off worker's handler ran until %v after the second worker's began: the two runs overlapped", r1.end.Sub(r2.start))
	}
}

// waitSucceeded runs WaitForJob of id in a goroutine: the channel gets
// its error, or one saying the job ended other than SUCCEEDED.
func waitSucceeded(ctx context.Context, c *client.Client, id string) <-chan error {
	waited := make(chan error, 1)
	go func() {
		j, err := c.WaitForJob(ctx, id)
		if err == nil && j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			err = fmt.Errorf("WaitForJob returned %v", j.GetState())
		}
		waited <- err
	}()
	return waited
}

// An address that reaches something other than a jobwatch server (a
// wrong path answered 405, a page, https:// to plain HTTP, a certificate
// this machine does not trust) can never answer: the retry loops return
// it at once instead of retrying for ever.
func TestAnAddressThatCanNeverAnswerIsNotRetried(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/page/") {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>hello</html>")
			return
		}
		http.Error(w, "no", http.StatusMethodNotAllowed)
	})
	page := httptest.NewUnstartedServer(handler) // speaks h2c, as jobwatch does
	page.Config.Protocols = new(http.Protocols)
	page.Config.Protocols.SetHTTP1(true)
	page.Config.Protocols.SetUnencryptedHTTP2(true)
	page.Start()
	t.Cleanup(page.Close)
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	for _, addr := range []string{
		page.URL + "/nope",
		page.URL + "/page",
		strings.Replace(page.URL, "http://", "https://", 1),
		untrusted.URL,
	} {
		var retried atomic.Int32
		c := fastClient(t, addr, client.WithRetryNotify(func(error, time.Duration) { retried.Add(1) }))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.WaitForJob(ctx, "j_00000000000000000000000000")
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || retried.Load() != 0 {
			t.Errorf("WaitForJob through %s = %v after %d retries; want its error at once", addr, err, retried.Load())
		}
	}
}

// The two ways Go's HTTP/2 client reads an HTTP/1 answer to its preface
// are a server that speaks no h2c; a refused or cut connection is not.
func TestSpeaksHTTP1TellsAnHTTP1AnswerFromACutConnection(t *testing.T) {
	for msg, want := range map[string]bool{
		"unavailable: http2: frame too large": true,
		`unavailable: http2: failed reading the frame payload: http2: frame header looked like an HTTP/1.1 header`: true,
		"unavailable: dial tcp 127.0.0.1:1: connect: connection refused":                                           false,
		"unavailable: http2: client connection lost":                                                               false,
	} {
		if got := client.SpeaksHTTP1(errors.New(msg)); got != want {
			t.Errorf("SpeaksHTTP1(%q) = %v, want %v", msg, got, want)
		}
	}
}
