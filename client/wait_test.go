package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

func TestWaitForJob(t *testing.T) {
	// A 50ms cap makes every wait that outlives it span several WaitJob
	// calls, which is what WaitForJob must hide.
	s := startServer(t, serverOptions{server: server.Config{WaitCap: 50 * time.Millisecond}})
	c := fastClient(t, s.URL)
	ctx := context.Background()

	tests := []struct {
		name      string
		job       func(t *testing.T) string // returns the id to wait for
		ctx       func() (context.Context, context.CancelFunc)
		wantState jobwatchv1.JobState
		wantErr   error
	}{
		{
			name: "a job completed after several server caps returns SUCCEEDED with its result",
			job: func(t *testing.T) string {
				j := submit(t, c, "later")
				before := s.waitJobCalls()
				go func() {
					// Completed once the server has answered three
					// WaitJob calls at their cap: WaitForJob has called
					// again after each.
					for deadline := time.Now().Add(10 * time.Second); s.waitJobCalls()-before < 3; time.Sleep(5 * time.Millisecond) {
						if time.Now().After(deadline) {
							t.Errorf("WaitForJob made %v WaitJob calls within 10s, want 3 capped ones", s.waitJobCalls()-before)
							break
						}
					}
					id, lease := claim(t, s.Engine, "later")
					complete(t, s.Engine, id, lease, `{"rows":3}`)
				}()
				return j.GetId()
			},
			wantState: jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
		},
		{
			name: "a job that already ended returns at once",
			job: func(t *testing.T) string {
				j := submit(t, c, "done")
				if _, err := c.Cancel(ctx, j.GetId()); err != nil {
					t.Fatal(err)
				}
				return j.GetId()
			},
			wantState: jobwatchv1.JobState_JOB_STATE_CANCELLED,
		},
		{
			name: "a held job is ErrJobNotStarted",
			job: func(t *testing.T) string {
				j, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
				if err != nil {
					t.Fatal(err)
				}
				return j.GetId()
			},
			wantErr: client.ErrJobNotStarted,
		},
		{
			name:    "an unknown job is ErrJobNotFound",
			job:     func(t *testing.T) string { return "j_00000000000000000000000000" },
			wantErr: client.ErrJobNotFound,
		},
		{
			name: "a caller's context that ends returns its error at once",
			job:  func(t *testing.T) string { return submit(t, c, "never").GetId() },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 120*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.job(t)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if tt.ctx != nil {
				cancel()
				wctx, cancel = tt.ctx()
			}
			defer cancel()
			job, err := c.WaitForJob(wctx, id)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WaitForJob error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if job.GetState() != tt.wantState {
				t.Fatalf("state = %v, want %v", job.GetState(), tt.wantState)
			}
			if tt.wantState == jobwatchv1.JobState_JOB_STATE_SUCCEEDED && job.GetResult().GetStructValue().GetFields()["rows"].GetNumberValue() != 3 {
				t.Fatalf("result = %v, want the worker's {\"rows\":3}", job.GetResult())
			}
		})
	}
}

func TestWaitForJobOverEveryProtocol(t *testing.T) {
	s := startServer(t, serverOptions{})
	for name, p := range map[string]client.Protocol{
		"connect": client.ProtocolConnect, "grpc": client.ProtocolGRPC, "grpc-web": client.ProtocolGRPCWeb,
	} {
		t.Run(name, func(t *testing.T) {
			c := fastClient(t, s.URL, client.WithProtocol(p))
			j := submit(t, c, "proto-"+name)
			go func() {
				id, lease := claim(t, s.Engine, "proto-"+name)
				complete(t, s.Engine, id, lease, `"ok"`)
			}()
			got, err := c.WaitForJob(context.Background(), j.GetId())
			if err != nil || got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("WaitForJob = %v, %v; want SUCCEEDED", got.GetState(), err)
			}
		})
	}
}

func TestWaitForJobSurvivesAServerRestartMidWait(t *testing.T) {
	first := startServer(t, serverOptions{})
	var retries atomic.Int32
	c := fastClient(t, first.URL, client.WithRetryNotify(func(error, time.Duration) { retries.Add(1) }))
	job := submit(t, c, "report")

	got := make(chan *jobwatchv1.Job, 1)
	errs := make(chan error, 1)
	go func() {
		j, err := c.WaitForJob(context.Background(), job.GetId())
		got <- j
		errs <- err
	}()
	eventually(t, "the wait is parked", func() bool { return first.gauge("jobwatch_parked_waits") == 1 })

	// The first server answers the parked wait at shutdown (OK, still
	// QUEUED); the client re-asks and finds nobody listening.
	first.Stop()
	eventually(t, "the client has retried against the stopped server", func() bool { return retries.Load() > 0 })

	second := startServer(t, serverOptions{db: first.DB, addr: first.Addr})
	eventually(t, "the wait is parked on the new server", func() bool { return second.gauge("jobwatch_parked_waits") == 1 })
	id, lease := claim(t, second.Engine, "report")
	complete(t, second.Engine, id, lease, `{"pages":12}`)

	select {
	case j := <-got:
		if err := <-errs; err != nil {
			t.Fatalf("WaitForJob: %v", err)
		}
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetId() != job.GetId() {
			t.Fatalf("WaitForJob = %s %v, want %s SUCCEEDED", j.GetId(), j.GetState(), job.GetId())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitForJob did not return after the job ended on the restarted server")
	}
}

// TestWaitForJobSurvivesALostConnection cuts the connection a wait is
// parked on. Once the job ends, the answer can only come over a new
// connection: the old one is closed, or delivers nothing, ever.
func TestWaitForJobSurvivesALostConnection(t *testing.T) {
	tests := []struct {
		name string
		opts []client.Option
		cut  func(*proxy)
	}{
		{"a proxy that drops the connection", nil, (*proxy).Drop},
		// Nothing is closed: only the client's unanswered PING can tell
		// that the server is gone. Pings far shorter than the default
		// 10s + 5s keep the test quick; the mechanism is the same.
		{"a silently dead server, noticed by pings",
			[]client.Option{client.WithPings(100*time.Millisecond, 200*time.Millisecond)}, (*proxy).Freeze},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, serverOptions{})
			p := startProxy(t, s.Addr)
			var retries atomic.Int32
			opts := append(tt.opts, client.WithRetryNotify(func(error, time.Duration) { retries.Add(1) }))
			c := fastClient(t, p.URL(), opts...)
			job := submit(t, c, "export")

			done := make(chan error, 1)
			var got *jobwatchv1.Job
			go func() {
				var err error
				got, err = c.WaitForJob(context.Background(), job.GetId())
				done <- err
			}()
			eventually(t, "the wait is parked", func() bool { return s.gauge("jobwatch_parked_waits") == 1 })
			tt.cut(p)
			eventually(t, "the client gave up on the lost connection", func() bool { return retries.Load() > 0 })
			id, lease := claim(t, s.Engine, "export")
			complete(t, s.Engine, id, lease, `null`)

			select {
			case err := <-done:
				if err != nil || got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
					t.Fatalf("WaitForJob = %v, %v; want SUCCEEDED", got.GetState(), err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WaitForJob did not return after the job ended")
			}
		})
	}
}

func TestShortCallsKeepAnsweringWhileAThousandWaitsAreParked(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	job := submit(t, c, "big")

	parked := 1000
	if raceEnabled {
		parked = 200 // the same code paths; -race makes 1,000 take ~20s
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var succeeded atomic.Int32
	for range parked {
		wg.Go(func() {
			j, err := c.WaitForJob(ctx, job.GetId())
			if err == nil && j.GetState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				succeeded.Add(1)
			}
		})
	}
	eventually(t, "all waits are parked", func() bool { return s.gauge("jobwatch_parked_waits") == float64(parked) })

	// Every short call must answer while the waits stay parked; the bound
	// is generous (a loaded CI machine), the point is that none hangs.
	for i := range 20 {
		callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
		other := submit(t, c, "small")
		if _, err := c.Get(callCtx, other.GetId()); err != nil {
			t.Fatalf("short call %d: Get while %d waits are parked: %v", i, parked, err)
		}
		if _, err := c.Cancel(callCtx, other.GetId()); err != nil {
			t.Fatalf("short call %d: Cancel while %d waits are parked: %v", i, parked, err)
		}
		callCancel()
	}
	if n := s.gauge("jobwatch_parked_waits"); n != float64(parked) {
		t.Fatalf("parked waits after the short calls = %v, want all %d still parked", n, parked)
	}

	id, lease := claim(t, s.Engine, "big")
	complete(t, s.Engine, id, lease, `{}`)
	wg.Wait()
	if n := succeeded.Load(); int(n) != parked {
		t.Fatalf("%d of %d waits returned SUCCEEDED", n, parked)
	}
}

// waitJobCalls is how many WaitJob calls the server has answered, with
// any code (jobwatch_requests_total).
func (s *testServer) waitJobCalls() float64 {
	mfs, _ := s.registry.Gather()
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "jobwatch_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "procedure" && l.GetValue() == "/jobwatch.v1.JobService/WaitJob" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// A wait held by a server that then died (a crash, a restart) had reached
// a live server: its retry starts the backoff again rather than waiting
// longer after each such restart. The server here holds each WaitJob a
// little over a second and then drops every connection, five times, and
// answers the sixth: every retry's delay is within the first step. (Were
// each restart counted as one more failure, the fifth's delay would be
// drawn from up to 16 steps; all five within the first happens by chance
// once in a thousand.)
func TestAWaitCutAfterItWasHeldRetriesFromTheFirstStep(t *testing.T) {
	const initial = 50 * time.Millisecond
	var srv *httptest.Server
	var calls atomic.Int32
	svc := &heldThenCut{calls: &calls, cut: func() { srv.CloseClientConnections() }}
	path, handler := jobwatchv1connect.NewJobServiceHandler(svc)
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv = httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	var delays []time.Duration
	c := client.New(srv.URL, client.WithBackoff(initial, time.Hour), client.WithRetryNotify(func(_ error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		delays = append(delays, d)
	}))
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job, err := c.WaitForJob(ctx, "j_held")
	if err != nil || job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("WaitForJob = %v, %v; want the job SUCCEEDED", job, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delays) != 5 {
		t.Fatalf("%d retries (%v), want one after each of the 5 cuts", len(delays), delays)
	}
	for i, d := range delays {
		if d > initial {
			t.Errorf("retry %d after a held call was cut waited %v; want at most the first step, %v (all: %v)", i+1, d, initial, delays)
		}
	}
}

// heldThenCut answers WaitJob: the first five calls are held a little
// over a second and then cut (every connection dropped, as a server that
// died), the sixth with the job SUCCEEDED.
type heldThenCut struct {
	jobwatchv1connect.UnimplementedJobServiceHandler
	calls *atomic.Int32
	cut   func()
}

func (h *heldThenCut) WaitJob(ctx context.Context, req *jobwatchv1.WaitJobRequest) (*jobwatchv1.WaitJobResponse, error) {
	if h.calls.Add(1) <= 5 {
		time.Sleep(time.Second + 50*time.Millisecond)
		h.cut()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &jobwatchv1.WaitJobResponse{Job: &jobwatchv1.Job{Id: req.GetJobId(), State: jobwatchv1.JobState_JOB_STATE_SUCCEEDED}}, nil
}

// The long-call pool spreads its calls over its connections, so that
// each connection parks up to the server's limit for one connection
// (--max-parked-calls-per-conn) while the server's streams per
// connection allow more: every wait parks, none is answered as full.
func TestLongCallsSpreadOverThePoolsConnections(t *testing.T) {
	s := startServer(t, serverOptions{server: server.Config{
		MaxStreamsPerConn: 40, MaxParkedCallsPerConn: 30, WaitCap: time.Minute,
	}})
	c := fastClient(t, s.URL, client.WithLongCallConns(4))
	j := submit(t, c, "spread")
	const waits = 100 // 4 connections of 40 streams, 30 parked each: 120
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, waits)
	for range waits {
		go func() {
			_, err := c.WaitForJob(ctx, j.GetId())
			done <- err
		}()
	}
	eventually(t, "every wait parked", func() bool { return s.gauge("jobwatch_parked_calls") == waits })
	if got := s.counter("jobwatch_parked_calls_conn_refused_total"); got != 0 {
		t.Errorf("%v waits answered as their connection's parked calls were full, want 0", got)
	}
	if _, err := c.Cancel(ctx, j.GetId()); err != nil {
		t.Fatal(err)
	}
	for range waits {
		if err := <-done; err != nil {
			t.Fatalf("WaitForJob: %v", err)
		}
	}
}

// A wait the server answers at once because its parked calls are full
// (the header Jobwatch-Parked-Calls: full) backs off before it asks
// again, also when the answer took longer to arrive than a quick one
// would (a distant server): every ask after the first follows a retry.
func TestAWaitAnsweredAsFullBacksOff(t *testing.T) {
	s := startServer(t, serverOptions{server: server.Config{MaxParkedCalls: 1, WaitCap: time.Minute}})
	plain := fastClient(t, s.URL)
	j := submit(t, plain, "full")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := plain.WaitForJob(ctx, j.GetId())
		first <- err
	}()
	eventually(t, "the first wait parked", func() bool { return s.gauge("jobwatch_parked_calls") == 1 })

	var asks, retries atomic.Int64
	var other atomic.Value
	far := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		asks.Add(1)
		time.Sleep(30 * time.Millisecond) // a server 30 ms away
		return http.DefaultTransport.RoundTrip(r)
	})}
	c := fastClient(t, s.URL, client.WithLongCallHTTPClient(far), client.WithRetryNotify(func(err error, _ time.Duration) {
		retries.Add(1)
		if !strings.Contains(err.Error(), "parked calls are full") {
			other.Store(err)
		}
	}))
	for _, wait := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.WaitForJob(ctx, j.GetId()); return err },
		func(ctx context.Context) error {
			_, err := c.WaitForJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: []string{j.GetId()}})
			return err
		},
	} {
		asks.Store(0)
		retries.Store(0)
		waitCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- wait(waitCtx) }()
		eventually(t, "three retries", func() bool { return retries.Load() >= 3 })
		stop()
		<-done
		// Each ask after the first follows a retry's notice, made
		// before its delay.
		if a, r := asks.Load(), retries.Load(); a > r+1 {
			t.Errorf("%d asks after %d retries: a full answer was asked again without backing off", a, r)
		}
	}
	if err := other.Load(); err != nil {
		t.Errorf("a retry after %v, want only full answers", err)
	}
	cancel()
	<-first
}

// A watch whose first try could not reach the server, and which then
// followed its job on a live stream until its context ended, ends with
// no last try: the server was answering when time ran out, and LastTry
// says so by being nil, where it named the old failure.
func TestAWatchThatEndsWhileTheServerAnswersHasNoLastTry(t *testing.T) {
	s := startServer(t, serverOptions{})
	plain := fastClient(t, s.URL)
	job := submit(t, plain, "followed")
	id, lease := claim(t, s.Engine, "followed")
	if _, _, err := s.Engine.AppendLogs(context.Background(), id, lease, []jobtype.LogLine{{Text: "started"}}); err != nil {
		t.Fatal(err)
	}
	for name, watch := range map[string]func(context.Context, *client.Client) (int, error){
		"Watch": func(ctx context.Context, c *client.Client) (int, error) {
			n := 0
			for _, err := range c.Watch(ctx, job.GetId()) {
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
		"WatchLogs": func(ctx context.Context, c *client.Client) (int, error) {
			n := 0
			for _, err := range c.WatchLogs(ctx, job.GetId(), 0) {
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			var refused atomic.Bool
			flaky := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if refused.CompareAndSwap(false, true) {
					return nil, errors.New("dial tcp: connection refused")
				}
				return http.DefaultTransport.RoundTrip(r)
			})}
			c := fastClient(t, s.URL, client.WithLongCallHTTPClient(flaky))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := watch(ctx, c)
			if n == 0 || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s yielded %d and ended with %v; want something, then the deadline", name, n, err)
			}
			if last := client.LastTry(err); last != nil {
				t.Fatalf("%s ended while its stream was live with LastTry %v; want nil", name, last)
			}
		})
	}
}
