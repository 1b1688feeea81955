package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// Calls refused before their handler (no token or one not known, another
// method than POST, a Content-Type not spoken, a body over the limit, a
// path that names no procedure) each get a debug line that says which
// procedure or path, the code and why, never the token or the body, and
// are counted in jobwatch_requests_total, the paths that name no
// procedure under one label.
func TestCallsRefusedBeforeTheirHandlerAreLoggedAndCounted(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), MaxRequestBytes: 1 << 10}})
	const (
		getJob   = "/jobwatch.v1.JobService/GetJob"
		watchJob = "/jobwatch.v1.JobService/WatchJob"
	)
	big := `{"job_id":"` + strings.Repeat("x", 2<<10) + `"}`
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		token       string
		body        string
		status      int
		procedure   string // the label
		code        string
		reason      string
	}{
		{"no token", http.MethodPost, getJob, "application/json", "", `{}`,
			http.StatusUnauthorized, getJob, "unauthenticated", "a bearer token is required"},
		{"a token nobody issued", http.MethodPost, getJob, "application/json", unknownToken, `{}`,
			http.StatusUnauthorized, getJob, "unauthenticated", "the token is not known"},
		{"a GET of a procedure", http.MethodGet, getJob, "", acmeToken, "",
			http.StatusMethodNotAllowed, getJob, "invalid_argument", "GetJob is called with POST, not GET"},
		{"a GET of a stream", http.MethodGet, watchJob, "", acmeToken, "",
			http.StatusMethodNotAllowed, watchJob, "invalid_argument", "WatchJob is called with POST, not GET"},
		{"text/plain", http.MethodPost, getJob, "text/plain", acmeToken, `{}`,
			http.StatusUnsupportedMediaType, getJob, "invalid_argument", "is not one GetJob reads"},
		{"a body over the limit", http.MethodPost, getJob, "application/json", acmeToken, big,
			http.StatusTooManyRequests, getJob, "resource_exhausted", "--max-request-bytes"},
		{"a path that names no procedure", http.MethodPost, "/jobwatch.v1.JobService/NoSuchCall", "application/json", acmeToken, `{}`,
			http.StatusNotImplemented, "(unknown)", "unimplemented", "names no procedure"},
		{"another path that names no procedure", http.MethodPost, "/not.a.Service/Call", "application/json", acmeToken, `{}`,
			http.StatusNotImplemented, "(unknown)", "unimplemented", "names no procedure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.requests(tt.procedure, tt.code)
			logsBefore := len(ts.logs.String())
			req, err := http.NewRequest(tt.method, ts.url+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := ts.http1Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := ts.requests(tt.procedure, tt.code); got != before+1 {
				t.Errorf("jobwatch_requests_total{procedure=%q,code=%q} went from %v to %v, want one more", tt.procedure, tt.code, before, got)
			}
			var line string
			for l := range strings.Lines(ts.logs.String()[logsBefore:]) {
				if strings.Contains(l, `msg="call refused before its handler"`) {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("no debug line for the refusal; the log has:\n%s", ts.logs.String()[logsBefore:])
			}
			for _, want := range []string{"procedure=" + tt.path, "code=" + tt.code, tt.reason} {
				if !strings.Contains(line, want) {
					t.Errorf("the refusal's line %q does not say %q", line, want)
				}
			}
			if tt.token != "" && strings.Contains(ts.logs.String(), tt.token) {
				t.Errorf("the token reached the log")
			}
		})
	}
	if strings.Contains(ts.logs.String(), strings.Repeat("x", 64)) {
		t.Errorf("the body reached the log")
	}
	// The paths that name no procedure add one series between them.
	if got := ts.requests("(unknown)", "unimplemented"); got != 2 {
		t.Errorf(`jobwatch_requests_total{procedure="(unknown)",code="unimplemented"} = %v, want 2`, got)
	}
	families, err := ts.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "NoSuchCall") || strings.Contains(l.GetValue(), "not.a.Service") {
					t.Errorf("%s has a series for a path that names no procedure: %v", f.GetName(), m)
				}
			}
		}
	}
	// A call let in is logged once, by its handler's line, not as refused.
	logsBefore := len(ts.logs.String())
	_, err = ts.clientsWithToken(authProtocols[1], acmeToken).jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: missingJobID})
	wantCode(t, err, connect.CodeNotFound)
	if after := ts.logs.String()[logsBefore:]; strings.Contains(after, "refused before") || !strings.Contains(after, "msg=call") {
		t.Errorf("a call that reached its handler logged:\n%s", after)
	}
}

// A WaitJob whose client hangs up while it is parked counts as canceled,
// as a WatchJob cut the same way does, not as ok: its answer reached no
// one.
func TestAWaitWhoseClientHangsUpCountsAsCanceled(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "slow"})
	const waitJob = "/jobwatch.v1.JobService/WaitJob"
	// Not subtests: the helpers below fail the test they were made for.
	for _, hc := range []struct {
		name   string
		client *http.Client
	}{{"HTTP/1.1", ts.http1Client()}, {"HTTP/2", ts.h2cClient()}} {
		canceled, ok := ts.requests(waitJob, "canceled"), ts.requests(waitJob, "ok")
		ctx, hangUp := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+waitJob,
			bytes.NewReader([]byte(`{"job_id":"`+job.GetId()+`"}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		done := make(chan error, 1)
		go func() {
			resp, err := hc.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		ts.waitForGauge("jobwatch_parked_waits", 1)
		hangUp()
		if err := <-done; err == nil {
			t.Fatalf("%s: the wait answered before its client hung up", hc.name)
		}
		ts.waitForMetric(hc.name+": the wait counted as canceled", 10*time.Second, func(v float64) bool { return v == canceled+1 },
			"jobwatch_requests_total", "procedure", waitJob, "code", "canceled")
		if got := ts.requests(waitJob, "ok"); got != ok {
			t.Errorf("%s: jobwatch_requests_total{WaitJob, ok} went from %v to %v, want no more", hc.name, ok, got)
		}
		ts.waitForGauge("jobwatch_parked_waits", 0)
	}
}
