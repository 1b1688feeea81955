package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
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
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

// waitJobsRecorder records the job_ids and batch of every WaitJobs call
// a client makes, as the server receives them.
type waitJobsRecorder struct {
	mu    sync.Mutex
	calls []*jobwatchv1.WaitJobsRequest
}

func (w *waitJobsRecorder) option() client.Option {
	return client.WithConnectOptions(connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				if r, ok := req.Any().(*jobwatchv1.WaitJobsRequest); ok {
					w.mu.Lock()
					w.calls = append(w.calls, r)
					w.mu.Unlock()
				}
				return next(ctx, req)
			}
		})))
}

func (w *waitJobsRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls)
}

func (w *waitJobsRecorder) last() *jobwatchv1.WaitJobsRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[len(w.calls)-1]
}

// submitJobs submits n jobs of kind in one SubmitJobs, with batch.
func submitJobs(t testing.TB, c *client.Client, kind, batch string, n int) []string {
	t.Helper()
	reqs := make([]*jobwatchv1.SubmitJobRequest, n)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: kind, Batch: batch}
	}
	jobs, err := c.SubmitJobs(context.Background(), reqs)
	if err != nil {
		t.Fatalf("SubmitJobs: %v", err)
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.GetId()
	}
	return ids
}

// finish claims the job of kind the engine hands out next and completes
// it with result, or fails it when result is "".
func finish(t testing.TB, s *testServer, kind, result string) string {
	t.Helper()
	id, lease := claim(t, s.Engine, kind)
	if result == "" {
		if _, err := s.Engine.Fail(context.Background(), id, lease, jobtype.JobError{Type: "Boom"}, false); err != nil {
			t.Errorf("fail %s: %v", id, err)
		}
		return id
	}
	complete(t, s.Engine, id, lease, result)
	return id
}

func ids(jobs []*jobwatchv1.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.GetId()
	}
	return out
}

// afterCalls runs f in a goroutine once the client has made n more
// WaitJobs calls than it had: the loop has asked again after the cap.
func afterCalls(t *testing.T, rec *waitJobsRecorder, n int, f func()) {
	before := rec.count()
	go func() {
		for deadline := time.Now().Add(20 * time.Second); rec.count()-before < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the client made %d WaitJobs calls within 20s, want %d", rec.count()-before, n)
				return
			}
		}
		f()
	}()
}

func TestSubmitJobsCreatesEveryJobInOrderOrNone(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()

	jobs, err := c.SubmitJobs(ctx, []*jobwatchv1.SubmitJobRequest{
		{Kind: "thumb", Batch: "album-1"},
		{Kind: "thumb", Batch: "album-1", Queue: "slow"},
		{Kind: "index", Batch: "album-1", Hold: true},
	})
	if err != nil {
		t.Fatalf("SubmitJobs: %v", err)
	}
	if len(jobs) != 3 || jobs[0].GetKind() != "thumb" || jobs[1].GetQueue() != "slow" ||
		jobs[2].GetState() != jobwatchv1.JobState_JOB_STATE_PENDING {
		t.Fatalf("SubmitJobs returned %v; want the three jobs in the order given", jobs)
	}
	for _, j := range jobs {
		got, err := c.Get(ctx, j.GetId())
		if err != nil || got.GetBatch() != "album-1" {
			t.Fatalf("Get %s = batch %q, %v; want the job stored with batch album-1", j.GetId(), got.GetBatch(), err)
		}
	}

	// One job the server refuses: none is created, and the error says
	// which one.
	_, err = c.SubmitJobs(ctx, []*jobwatchv1.SubmitJobRequest{
		{Kind: "thumb", Batch: "album-2"},
		{Kind: "", Batch: "album-2"},
	})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "jobs[1].kind") {
		t.Fatalf("SubmitJobs with an empty kind = %v; want invalid_argument naming jobs[1].kind", err)
	}
	list, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Batch: "album-2"})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("batch album-2 holds %d jobs (%v) after a refused SubmitJobs; want none", len(list.GetJobs()), err)
	}
}

func TestWaitForJobs(t *testing.T) {
	// A 50ms cap makes every wait that outlives it span several WaitJobs
	// calls, which is what WaitForJobs must hide.
	s := startServer(t, serverOptions{server: server.Config{WaitCap: 50 * time.Millisecond}})
	rec := &waitJobsRecorder{}
	c := fastClient(t, s.URL, rec.option())
	ctx := context.Background()
	wctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("ALL returns every job in the order asked after several caps, asking only for the unfinished", func(t *testing.T) {
		submitted := submitJobs(t, c, "all", "", 3)
		asked := []string{submitted[2], submitted[0], submitted[1], submitted[0]} // a repeat counts once
		done := make(chan struct{})
		// The jobs end one at a time (claims go oldest first), each after
		// the client has asked again at the cap.
		afterCalls(t, rec, 2, func() {
			finish(t, s, "all", `{"n":1}`)
			afterCalls(t, rec, 2, func() {
				finish(t, s, "all", `{"n":2}`)
				afterCalls(t, rec, 2, func() {
					finish(t, s, "all", "")
					close(done)
				})
			})
		})
		resp, err := c.WaitForJobs(wctx(t), &jobwatchv1.WaitJobsRequest{JobIds: asked, View: jobwatchv1.JobView_JOB_VIEW_FULL})
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the jobs were not all finished")
		}
		if err != nil {
			t.Fatalf("WaitForJobs: %v", err)
		}
		if want := asked[:3]; !slices.Equal(ids(resp.GetJobs()), want) || len(resp.GetUnfinishedJobIds()) != 0 {
			t.Fatalf("WaitForJobs = %v, unfinished %v; want every job in the order asked %v", ids(resp.GetJobs()), resp.GetUnfinishedJobIds(), want)
		}
		states := []jobwatchv1.JobState{resp.GetJobs()[0].GetState(), resp.GetJobs()[1].GetState(), resp.GetJobs()[2].GetState()}
		if !slices.Equal(states, []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_FAILED, jobwatchv1.JobState_JOB_STATE_SUCCEEDED, jobwatchv1.JobState_JOB_STATE_SUCCEEDED}) {
			t.Fatalf("states %v; want FAILED, SUCCEEDED, SUCCEEDED", states)
		}
		if n := resp.GetJobs()[1].GetResult().GetStructValue().GetFields()["n"].GetNumberValue(); n != 1 {
			t.Fatalf("the first job's result = %v, want {\"n\":1} (view FULL)", resp.GetJobs()[1].GetResult())
		}
		if got := rec.last().GetJobIds(); !slices.Equal(got, []string{submitted[2]}) {
			t.Fatalf("the last WaitJobs asked for %v; want only the job still unfinished, %s", got, submitted[2])
		}
	})

	t.Run("ANY returns once the first job ends, with the others unfinished", func(t *testing.T) {
		submitted := submitJobs(t, c, "any", "", 3)
		finished := make(chan string, 1)
		afterCalls(t, rec, 2, func() { finished <- finish(t, s, "any", `"ok"`) })
		resp, err := c.WaitForJobs(wctx(t), &jobwatchv1.WaitJobsRequest{JobIds: submitted, Mode: jobwatchv1.WaitMode_WAIT_MODE_ANY})
		if err != nil {
			t.Fatalf("WaitForJobs: %v", err)
		}
		first := <-finished
		if !slices.Equal(ids(resp.GetJobs()), []string{first}) || !slices.Equal(resp.GetUnfinishedJobIds(), submitted[1:]) ||
			resp.GetJobs()[0].GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("WaitForJobs ANY = %v, unfinished %v; want %s SUCCEEDED and %v unfinished", ids(resp.GetJobs()), resp.GetUnfinishedJobIds(), first, submitted[1:])
		}
	})

	t.Run("a batch is the jobs its first answer names, returned in submission order", func(t *testing.T) {
		submitted := submitJobs(t, c, "batch", "nightly", 4)
		// The second ends before the wait starts: the first answer lists
		// it apart from the unfinished ones, and the client must put it
		// back in its place.
		if _, err := c.Cancel(ctx, submitted[1]); err != nil {
			t.Fatal(err)
		}
		late := make(chan string, 1)
		afterCalls(t, rec, 2, func() {
			// A job added to the batch after the first answer is not
			// waited for: it never ends.
			late <- submitJobs(t, c, "never", "nightly", 1)[0]
			afterCalls(t, rec, 2, func() {
				for range 3 {
					finish(t, s, "batch", `"ok"`)
				}
			})
		})
		resp, err := c.WaitForJobs(wctx(t), &jobwatchv1.WaitJobsRequest{Batch: "nightly"})
		if err != nil {
			t.Fatalf("WaitForJobs: %v", err)
		}
		if !slices.Equal(ids(resp.GetJobs()), submitted) || len(resp.GetUnfinishedJobIds()) != 0 {
			t.Fatalf("WaitForJobs batch = %v, unfinished %v; want the batch's four jobs in submission order %v (not %s, added later)",
				ids(resp.GetJobs()), resp.GetUnfinishedJobIds(), submitted, <-late)
		}
	})

	for _, tt := range []struct {
		name    string
		req     func(t *testing.T) *jobwatchv1.WaitJobsRequest
		wantErr error
		wantMsg string
	}{
		{"an unknown job is ErrJobNotFound naming it", func(t *testing.T) *jobwatchv1.WaitJobsRequest {
			return &jobwatchv1.WaitJobsRequest{JobIds: []string{submit(t, c, "known").GetId(), "j_00000000000000000000000000"}}
		}, client.ErrJobNotFound, "wait for jobs: j_00000000000000000000000000: job not found"},
		{"a held job is ErrJobNotStarted naming it", func(t *testing.T) *jobwatchv1.WaitJobsRequest {
			j, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
			if err != nil {
				t.Fatal(err)
			}
			return &jobwatchv1.WaitJobsRequest{JobIds: []string{j.GetId()}, Mode: jobwatchv1.WaitMode_WAIT_MODE_ANY}
		}, client.ErrJobNotStarted, ": job is pending: start it first"},
		{"a batch that holds no job is ErrJobNotFound", func(t *testing.T) *jobwatchv1.WaitJobsRequest {
			return &jobwatchv1.WaitJobsRequest{Batch: "no-such-batch"}
		}, client.ErrJobNotFound, `batch "no-such-batch" holds no job`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := rec.count()
			_, err := c.WaitForJobs(wctx(t), tt.req(t))
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("WaitForJobs error = %v; want %v saying %q", err, tt.wantErr, tt.wantMsg)
			}
			// The server's answer stays reachable behind the sentinel.
			if ce := new(connect.Error); !errors.As(err, &ce) || connect.CodeOf(err) == connect.CodeUnknown {
				t.Fatalf("WaitForJobs error = %v: errors.As finds no *connect.Error (code %v)", err, connect.CodeOf(err))
			}
			if n := rec.count() - before; n != 1 {
				t.Fatalf("WaitForJobs made %d calls; want 1: a refusal is not retried", n)
			}
		})
	}

	t.Run("a request the server refuses is returned with its code", func(t *testing.T) {
		_, err := c.WaitForJobs(wctx(t), &jobwatchv1.WaitJobsRequest{JobIds: []string{"j_1"}, Batch: "nightly"})
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("WaitForJobs with ids and a batch = %v; want invalid_argument", err)
		}
	})

	t.Run("a caller's context that ends returns its cause", func(t *testing.T) {
		ids := submitJobs(t, c, "never", "", 2)
		cctx, cancel := context.WithTimeoutCause(ctx, 150*time.Millisecond, errGaveUp)
		defer cancel()
		if _, err := c.WaitForJobs(cctx, &jobwatchv1.WaitJobsRequest{JobIds: ids}); !errors.Is(err, errGaveUp) {
			t.Fatalf("WaitForJobs = %v; want the context's cause", err)
		}
	})
}

var errGaveUp = errors.New("gave up")

func TestWaitForJobsSurvivesAServerRestartMidWait(t *testing.T) {
	first := startServer(t, serverOptions{})
	var retries atomic.Int32
	c := fastClient(t, first.URL, client.WithRetryNotify(func(error, time.Duration) { retries.Add(1) }))
	submitted := submitJobs(t, c, "report", "", 2)

	type result struct {
		resp *jobwatchv1.WaitJobsResponse
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := c.WaitForJobs(context.Background(), &jobwatchv1.WaitJobsRequest{JobIds: submitted})
		got <- result{resp, err}
	}()
	eventually(t, "the wait is parked", func() bool { return first.gauge("jobwatch_parked_waits") == 1 })
	finish(t, first, "report", `"one"`)

	// The first server answers the parked wait at shutdown (OK, one job
	// unfinished); the client asks again and finds nobody listening
	// (unavailable), and keeps asking until the new server answers.
	first.Stop()
	eventually(t, "the client has retried against the stopped server", func() bool { return retries.Load() > 0 })
	second := startServer(t, serverOptions{db: first.DB, addr: first.Addr})
	eventually(t, "the wait is parked on the new server", func() bool { return second.gauge("jobwatch_parked_waits") == 1 })
	finish(t, second, "report", `"two"`)

	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("WaitForJobs: %v", r.err)
		}
		if !slices.Equal(ids(r.resp.GetJobs()), submitted) {
			t.Fatalf("WaitForJobs = %v; want both jobs, %v", ids(r.resp.GetJobs()), submitted)
		}
		for _, j := range r.resp.GetJobs() {
			if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("job %s is %v, want SUCCEEDED", j.GetId(), j.GetState())
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForJobs did not return after the jobs ended on the restarted server")
	}
}

// pathCounter counts the requests an HTTP client sends, by URL path.
type pathCounter struct {
	hc    *http.Client
	mu    sync.Mutex
	paths map[string]int
}

func (p *pathCounter) Do(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.paths[r.URL.Path]++
	p.mu.Unlock()
	return p.hc.Do(r)
}

func (p *pathCounter) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paths[path]
}

func TestWaitForJobsAndWatchJobsUseTheLongCallTransport(t *testing.T) {
	s := startServer(t, serverOptions{})
	short := &pathCounter{hc: &http.Client{Transport: &http.Transport{}}, paths: map[string]int{}}
	long := &pathCounter{hc: &http.Client{Transport: &http.Transport{}}, paths: map[string]int{}}
	t.Cleanup(short.hc.CloseIdleConnections)
	t.Cleanup(long.hc.CloseIdleConnections)
	c := fastClient(t, s.URL, client.WithHTTPClient(short), client.WithLongCallHTTPClient(long))
	submitted := submitJobs(t, c, "routed", "routes", 1)
	finish(t, s, "routed", `"ok"`)
	if _, err := c.WaitForJobs(context.Background(), &jobwatchv1.WaitJobsRequest{Batch: "routes"}); err != nil {
		t.Fatal(err)
	}
	for msg, err := range c.WatchJobs(context.Background(), &jobwatchv1.WatchJobsRequest{Batch: "routes"}) {
		if err != nil || !slices.Equal(ids(msg.GetJobs()), submitted) {
			t.Fatalf("WatchJobs first response = %v, %v; want the batch's job", ids(msg.GetJobs()), err)
		}
		break
	}
	for _, path := range []string{"/jobwatch.v1.JobService/WaitJobs", "/jobwatch.v1.JobService/WatchJobs"} {
		if long.count(path) != 1 || short.count(path) != 0 {
			t.Errorf("%s went %d times over the long-call transport and %d over the short one; want 1 and 0",
				path, long.count(path), short.count(path))
		}
	}
	// A submit that waits parks as a wait does.
	wctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Submit(wctx, &jobwatchv1.SubmitJobRequest{Kind: "routed", Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "routed"}); err != nil {
		t.Fatal(err)
	}
	if path := "/jobwatch.v1.JobService/SubmitJob"; long.count(path) != 1 || short.count(path) != 1 {
		t.Errorf("SubmitJob went %d times over the long-call transport and %d over the short one; want the one that waits over the long, the other over the short",
			long.count(path), short.count(path))
	}
	if short.count("/jobwatch.v1.JobService/SubmitJobs") != 1 {
		t.Errorf("SubmitJobs did not go over the short-call transport")
	}
}

func TestWatchJobsFollowsABatchAcrossAServerRestart(t *testing.T) {
	first := startServer(t, serverOptions{})
	c := fastClient(t, first.URL)
	submitted := submitJobs(t, c, "follow", "followed", 2)
	submitJobs(t, c, "follow", "other", 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	latest := map[string]jobwatchv1.JobState{}
	restarted := false
	var second *testServer
	for msg, err := range c.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Batch: "followed"}) {
		if err != nil {
			t.Fatalf("WatchJobs: %v", err)
		}
		for _, j := range msg.GetJobs() {
			if j.GetBatch() != "followed" {
				t.Fatalf("WatchJobs sent %s of batch %q; want only batch followed", j.GetId(), j.GetBatch())
			}
			latest[j.GetId()] = j.GetState()
		}
		switch {
		case len(latest) == 2 && !restarted:
			// Both jobs seen: restart the server, and end a job on the
			// new one; the stream must resume and bring its end.
			restarted = true
			first.Stop()
			second = startServer(t, serverOptions{db: first.DB, addr: first.Addr})
			finish(t, second, "follow", `"ok"`)
		case latest[submitted[0]] == jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
			return
		}
	}
	t.Fatalf("WatchJobs ended without the job's end: %v", latest)
}

// A nil request is the empty one, the default tenant's jobs, as for the
// server (the client used to panic on it).
func TestWatchJobsOfANilRequestFollowsTheDefaultTenant(t *testing.T) {
	srv := startServer(t, serverOptions{})
	c := fastClient(t, srv.URL)
	j := submit(t, c, "plain")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for msg, err := range c.WatchJobs(ctx, nil) {
		if err != nil {
			t.Fatalf("WatchJobs(nil): %v", err)
		}
		for _, got := range msg.GetJobs() {
			if got.GetId() == j.GetId() {
				return
			}
		}
	}
	t.Fatalf("WatchJobs(nil) ended without the default tenant's job %s", j.GetId())
}

// Submit many jobs in one commit, then wait for all of them: one call
// each, however many jobs (up to 1,000).
func ExampleClient_WaitForJobs() {
	serverURL, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c := client.New(serverURL)
	var reqs []*jobwatchv1.SubmitJobRequest
	for _, name := range []string{"cat.png", "dog.png", "owl.png"} {
		reqs = append(reqs, &jobwatchv1.SubmitJobRequest{Kind: "resize", Batch: "album-7", Payload: structpb.NewStringValue(name)})
	}
	if _, err := c.SubmitJobs(ctx, reqs); err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitForJobs(ctx, &jobwatchv1.WaitJobsRequest{Batch: "album-7", View: jobwatchv1.JobView_JOB_VIEW_FULL})
	if err != nil {
		log.Fatal(err)
	}
	for _, job := range done.GetJobs() {
		fmt.Println(job.GetState(), job.GetResult().GetStringValue())
	}
	// Output:
	// JOB_STATE_SUCCEEDED cat-small.png
	// JOB_STATE_SUCCEEDED dog-small.png
	// JOB_STATE_SUCCEEDED owl-small.png
}

// A job that ends and is deleted between two of WaitForJobs' asks (a cap
// answer, then the next ask) counts as ended, as the server counts it
// within one ask: the next ask's not_found for it is no error, and the
// wait goes on for the others.
func TestWaitForJobsCountsAJobDeletedBetweenTwoAsksAsEnded(t *testing.T) {
	s := startServer(t, serverOptions{server: server.Config{WaitCap: 50 * time.Millisecond}})
	c := fastClient(t, s.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, mode := range []jobwatchv1.WaitMode{jobwatchv1.WaitMode_WAIT_MODE_ALL, jobwatchv1.WaitMode_WAIT_MODE_ANY} {
		a, b := submit(t, c, "gone"), submit(t, c, "stays")
		var asks atomic.Int64
		hooked := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if asks.Add(1) == 2 {
				// After the first ask's cap answer, before the next.
				if _, err := c.Cancel(ctx, a.GetId()); err != nil {
					t.Error(err)
				}
				if err := c.Delete(ctx, a.GetId()); err != nil {
					t.Error(err)
				}
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
		w := fastClient(t, s.URL, client.WithLongCallHTTPClient(hooked))
		done := make(chan error, 1)
		var got *jobwatchv1.WaitJobsResponse
		go func() {
			var err error
			got, err = w.WaitForJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: []string{a.GetId(), b.GetId()}, Mode: mode})
			done <- err
		}()
		if mode == jobwatchv1.WaitMode_WAIT_MODE_ALL {
			eventually(t, "a third ask", func() bool { return asks.Load() >= 3 })
			if _, err := c.Cancel(ctx, b.GetId()); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("%v: WaitForJobs: %v", mode, err)
		}
		switch mode {
		case jobwatchv1.WaitMode_WAIT_MODE_ALL:
			if len(got.GetJobs()) != 1 || got.GetJobs()[0].GetId() != b.GetId() || len(got.GetUnfinishedJobIds()) != 0 {
				t.Errorf("ALL: %v, want the other job ended, the deleted one in neither list", got)
			}
		default:
			if len(got.GetJobs()) != 0 || !slices.Equal(got.GetUnfinishedJobIds(), []string{b.GetId()}) {
				t.Errorf("ANY: %v, want no job and the other unfinished", got)
			}
		}
	}
}
