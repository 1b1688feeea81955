package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// connectError is the JSON body of a Connect error, as curl shows it.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func TestBadInputIsRefusedWithAClearErrorAndTheServerKeepsServing(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: 4096}, engine: jobs.Config{MaxPayloadBytes: 1024}})
	const (
		jsonType  = "application/json"
		protoType = "application/proto"
		jobs      = "/jobwatch.v1.JobService/"
		workers   = "/jobwatch.v1.WorkerService/"
	)
	long := strings.Repeat("a", 200)
	tests := []struct {
		name        string
		path        string
		contentType string
		body        string
		wantStatus  int
		wantCode    string
		wantMessage string // a substring of the message
	}{
		{"malformed JSON is invalid_argument", jobs + "GetJob", jsonType, `{"job_id":`, 400, "invalid_argument", "unmarshal"},
		{"a number where a string belongs is invalid_argument", jobs + "GetJob", jsonType, `{"job_id": 5}`, 400, "invalid_argument", "job"},
		{"a word where a number belongs is invalid_argument", jobs + "ListJobs", jsonType, `{"page_size": "many"}`, 400, "invalid_argument", "many"},
		{"a list where a string belongs is invalid_argument", jobs + "SubmitJob", jsonType, `{"kind": ["a"]}`, 400, "invalid_argument", "kind"},
		{"garbage protobuf is invalid_argument", jobs + "GetJob", protoType, "\xff\xff\xff\xff", 400, "invalid_argument", "unmarshal"},
		{"an empty job_id is invalid_argument naming the field", jobs + "GetJob", jsonType, `{}`, 400, "invalid_argument", "job_id: must not be empty"},
		{"an over-long job_id is invalid_argument naming the field", jobs + "WaitJob", jsonType, `{"job_id":"` + long + `"}`, 400, "invalid_argument", "job_id: must be at most 128 bytes"},
		{"a job_id with spaces is invalid_argument naming the field", jobs + "CancelJob", jsonType, `{"job_id":"a b"}`, 400, "invalid_argument", "job_id:"},
		{"an empty kind is invalid_argument naming the field", jobs + "SubmitJob", jsonType, `{"tenant":"acme"}`, 400, "invalid_argument", "kind: must not be empty"},
		{"an over-long kind is invalid_argument naming the field", jobs + "SubmitJob", jsonType, `{"kind":"` + long + `"}`, 400, "invalid_argument", "kind: must be at most 128 bytes"},
		{"waiting for a held job is invalid_argument", jobs + "SubmitJob", jsonType, `{"kind":"k","hold":true,"wait":true}`, 400, "invalid_argument", "wait:"},
		{"a negative page_size is invalid_argument", jobs + "ListJobs", jsonType, `{"page_size":-1}`, 400, "invalid_argument", "page_size: must not be negative"},
		{"a state name the server does not know is invalid_argument, not a dropped filter", jobs + "ListJobs", jsonType, `{"states":["JOB_STATE_QUEUED","RUNNING"]}`, 400, "invalid_argument", `states[1]: "RUNNING" is not a JobState`},
		{"a page_token the server never issued is invalid_argument", jobs + "ListJobs", jsonType, `{"page_token":"bogus"}`, 400, "invalid_argument", "page_token"},
		{"an empty worker_id is invalid_argument", workers + "ClaimJob", jsonType, `{}`, 400, "invalid_argument", "worker_id: must not be empty"},
		{"an empty lease_id is invalid_argument", workers + "Heartbeat", jsonType, `{"job_id":"j_1"}`, 400, "invalid_argument", "lease_id: must not be empty"},
		{"a failure with an error type over 256 bytes is invalid_argument", workers + "FailJob", jsonType, `{"job_id":"j_1","lease_id":"l_1","error":{"type":"` + strings.Repeat("E", 257) + `"}}`, 400, "invalid_argument", "error.type: must be at most 256 bytes"},
		{"a request over the size limit is resource_exhausted", jobs + "SubmitJob", jsonType, `{"kind":"k","payload":"` + strings.Repeat("x", 8000) + `"}`, 429, "resource_exhausted", "larger than configured max"},
		{"a payload over its limit is resource_exhausted naming the field", jobs + "SubmitJob", jsonType, `{"kind":"k","payload":"` + strings.Repeat("x", 2000) + `"}`, 429, "resource_exhausted", "payload: "},
		{"a result over its limit is resource_exhausted naming the field", workers + "CompleteJob", jsonType, `{"job_id":"j_1","lease_id":"l_1","result":"` + strings.Repeat("x", 2000) + `"}`, 429, "resource_exhausted", "result: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawPost(t, ts.url+tt.path, tt.contentType, []byte(tt.body))
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", status, tt.wantStatus, body)
			}
			var got connectError
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body %q is not a Connect error: %v", body, err)
			}
			if got.Code != tt.wantCode || !strings.Contains(got.Message, tt.wantMessage) {
				t.Errorf("error = %+v, want code %s with a message containing %q", got, tt.wantCode, tt.wantMessage)
			}

			// The server still serves everyone else.
			status, body = rawPost(t, ts.url+jobs+"GetServerInfo", jsonType, []byte(`{}`))
			if status != http.StatusOK || !strings.Contains(body, `"version"`) {
				t.Fatalf("GetServerInfo after bad input: %d %s", status, body)
			}
		})
	}
}

// Connect's JSON decoding ignores what it does not know, so that newer
// clients can call older servers. That must hold for unknown fields, but
// not for an unknown enum name: dropped, it would turn a filter on
// "RUNNING" into no filter at all.
func TestJSONIgnoresUnknownFieldsButNotUnknownStates(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	queued := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true})
	const listJobs = "/jobwatch.v1.JobService/ListJobs"

	status, body := rawPost(t, ts.url+listJobs, "application/json", []byte(`{"states":["JOB_STATE_QUEUED"],"a_field_from_the_future":{"x":1}}`))
	var list struct {
		Jobs []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(body), &list); status != http.StatusOK || err != nil {
		t.Fatalf("ListJobs with an unknown field = %d %s, want OK", status, body)
	}
	if len(list.Jobs) != 1 || list.Jobs[0].ID != queued.GetId() {
		t.Fatalf("ListJobs of QUEUED = %s, want only job %s", body, queued.GetId())
	}

	for _, contentType := range []string{"application/json", "application/json; charset=utf-8"} {
		status, body = rawPost(t, ts.url+listJobs, contentType, []byte(`{"states":["RUNNING"]}`))
		if status != http.StatusBadRequest || !strings.Contains(body, "JOB_STATE_RUNNING") {
			t.Errorf("ListJobs of state RUNNING as %s = %d %s, want 400 listing the state names", contentType, status, body)
		}
	}
}
