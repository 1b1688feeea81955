package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// asHost sends every request with the Host header (HTTP/2 :authority)
// host, as a browser does for a page whose name was rebound to loopback.
type asHost struct {
	host string
	next http.RoundTripper
}

func (h asHost) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return h.next.RoundTrip(r)
}

// withHost returns hc's transport sending host as the Host.
func withHost(hc *http.Client, host string) *http.Client {
	return &http.Client{Transport: asHost{host: host, next: hc.Transport}}
}

// get fetches path with Host host over HTTP/1.1, like a browser.
func (ts *testServer) get(t *testing.T, host, path string) (int, string) {
	t.Helper()
	return ts.do(t, host, http.MethodGet, path, "")
}

// post sends a JSON body to path with Host host over HTTP/1.1, like curl.
func (ts *testServer) post(t *testing.T, host, path, body string) (int, string) {
	t.Helper()
	return ts.do(t, host, http.MethodPost, path, body)
}

func (ts *testServer) do(t *testing.T, host, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Host = host
	resp, err := ts.http1Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A server on loopback without tokens answers only requests for a
// loopback host: a page on evil.example whose name was rebound to
// 127.0.0.1 is refused on every protocol and path, and changes nothing.
func TestRequestsForAHostThatIsNotLoopbackAreRefusedOnEveryProtocolAndPath(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{}}) // the Host check is the default
	const evil = "evil.example:8080"
	protocols := []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"connect with JSON over HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect with protobuf over h2c", ts.h2cClient(), nil},
		{"grpc over h2c (the :authority)", ts.h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web over HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := ts.clients(withHost(p.hc, evil), p.opts...)
			_, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "rebound"})
			wantCode(t, err, connect.CodePermissionDenied)
			if msg := err.Error(); !strings.Contains(msg, "evil.example") || !strings.Contains(msg, "--allowed-hosts") || !strings.Contains(msg, "DNS rebinding") {
				t.Errorf("the refusal %q does not say which host, why, and how to allow it", msg)
			}
			_, err = c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{})
			wantCode(t, err, connect.CodePermissionDenied)
			s, err := c.jobs.WatchJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.WatchJobsRequest{})
			if err == nil {
				for s.Receive() {
					t.Fatalf("a refused WatchJobs sent %v", s.Msg())
				}
				err = s.Err()
			}
			wantCode(t, err, connect.CodePermissionDenied)
		})
	}

	t.Run("plain JSON over HTTP/1.1, as curl sends it", func(t *testing.T) {
		status, body := ts.post(t, evil, "/jobwatch.v1.JobService/SubmitJob", `{"kind":"rebound"}`)
		if status != http.StatusForbidden || !strings.Contains(body, `"permission_denied"`) {
			t.Errorf("POST with Host %s: %d %s, want 403 permission_denied", evil, status, body)
		}
	})
	for _, path := range []string{"/", "/metrics", "/grpc.health.v1.Health/Check"} {
		t.Run("GET "+path, func(t *testing.T) {
			status, body := ts.get(t, evil, path)
			if status != http.StatusForbidden || !strings.Contains(body, "--allowed-hosts") {
				t.Errorf("GET %s with Host %s: %d %q, want 403 naming --allowed-hosts", path, evil, status, body)
			}
		})
	}

	c := ts.h2c()
	list, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Kind: "rebound"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 0 {
		t.Errorf("refused submits created %d jobs, want none", n)
	}
	if got := ts.metric("jobwatch_requests_refused_host_total"); got < 10 {
		t.Errorf("jobwatch_requests_refused_host_total = %v, want every refusal counted", got)
	}
	if logs := ts.logs.String(); !strings.Contains(logs, "DNS rebinding") || !strings.Contains(logs, "evil.example") {
		t.Errorf("the log does not say a host was refused:\n%s", logs)
	}
}

// Loopback names and addresses pass, with or without a port, on the page
// and the API alike; --allowed-hosts adds exact names, with their port
// when the entry gives one.
func TestLoopbackAndAllowedHostsAreAnswered(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{
		AllowedHosts: []string{"jobs.example.org", "Proxy.Example:8443", "10.1.2.3", "fd00::7"},
	}})
	for _, tt := range []struct {
		host string
		ok   bool
	}{
		{"localhost:8080", true},
		{"localhost", true},
		{"LOCALHOST:8080", true},
		{"localhost.:8080", true},
		{"app.localhost:3000", true},
		{"127.0.0.1", true},
		{"127.0.0.1:8080", true},
		{"127.1.2.3:80", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"jobs.example.org", true},
		{"jobs.example.org:1234", true},
		{"proxy.example:8443", true},
		{"10.1.2.3:8080", true},
		{"[fd00::7]:8080", true},

		{"evil.example", false},
		{"localhost.evil.example", false},
		{"evillocalhost", false},
		{"api.jobs.example.org", false},
		{"proxy.example", false},
		{"proxy.example:9999", false},
		{"10.1.2.4", false},
		{"127.0.0.1.evil.example", false},
		{"[::2]:8080", false},
		{"0.0.0.0:8080", false},
	} {
		t.Run(tt.host, func(t *testing.T) {
			c := ts.clients(withHost(ts.h2cClient(), tt.host))
			_, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{})
			status, _ := ts.get(t, tt.host, "/")
			if tt.ok && (err != nil || status != http.StatusOK) {
				t.Errorf("Host %s: GetServerInfo %v, page %d; want both answered", tt.host, err, status)
			}
			if !tt.ok && (connect.CodeOf(err) != connect.CodePermissionDenied || status != http.StatusForbidden) {
				t.Errorf("Host %s: GetServerInfo %v, page %d; want permission_denied and 403", tt.host, err, status)
			}
		})
	}
}

// With AnyHost (a server with tokens, and no --allowed-hosts) any Host
// is answered: the tokens decide.
func TestWithoutTheHostCheckAnyHostIsAnswered(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{AnyHost: true}})
	c := ts.clients(withHost(ts.h2cClient(), "jobs.example.org"))
	if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Fatalf("GetServerInfo: %v", err)
	}
}

func TestAllowedHostEntriesAreHostsAndNothingMore(t *testing.T) {
	for _, tt := range []struct {
		entry string
		ok    bool
	}{
		{"jobs.example.org", true},
		{"jobs.example.org:8080", true},
		{"10.0.0.1", true},
		{"10.0.0.1:8080", true},
		{"[fd00::1]:8080", true},
		{"fd00::1", true},
		{"https://jobs.example.org", false},
		{"jobs.example.org/", false},
		{"*.example.org", false},
		{"jobs.example.org:http", false},
		{"[fd00::1", false},
		{":8080", false},
		{"user@jobs.example.org", false},
	} {
		err := server.CheckAllowedHost(tt.entry)
		if (err == nil) != tt.ok {
			t.Errorf("CheckAllowedHost(%q) = %v, want ok %v", tt.entry, err, tt.ok)
		}
	}
}

// A server exposed without authentication says so as it starts and keeps
// saying so while it serves, naming the fix; it stops when the server
// does.
func TestAnInsecureServerWarnsAtStartAndAgainWhileServing(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Insecure: true, InsecureWarnEvery: 20 * time.Millisecond}})
	const warning = "WITHOUT authentication"
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(ts.logs.String(), warning) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the warning appeared %d times, want it repeated:\n%s", strings.Count(ts.logs.String(), warning), ts.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	logs := ts.logs.String()
	for _, want := range []string{"level=WARN", "--tokens", "127.0.0.1", "every tenant's jobs"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the warning does not say %q:\n%s", want, logs)
		}
	}
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	stopped := strings.Count(ts.logs.String(), warning)
	time.Sleep(100 * time.Millisecond) // five intervals: none may come
	if got := strings.Count(ts.logs.String(), warning); got != stopped {
		t.Errorf("%d warnings after the server stopped", got-stopped)
	}
}

// A server that is not insecure does not warn.
func TestALoopbackServerDoesNotWarnOfExposure(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{InsecureWarnEvery: 10 * time.Millisecond}})
	c := ts.h2c()
	if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ts.logs.String(), "WITHOUT authentication") {
		t.Errorf("a server that is not insecure warned:\n%s", ts.logs.String())
	}
}
