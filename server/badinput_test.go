package server_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

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
		{"an integer in a payload that a double cannot hold is invalid_argument, not rounded", jobs + "SubmitJob", jsonType, `{"kind":"k","payload":{"ids":[1,{"id":9007199254740993}]}}`, 400, "invalid_argument", "payload.ids[1].id: 9007199254740993 is an integer beyond ±2^53"},
		{"such an integer in a batch's payload is refused with its path", jobs + "SubmitJobs", jsonType, `{"jobs":[{"kind":"k"},{"kind":"k","payload":-12345678901234567890}]}`, 400, "invalid_argument", "jobs[1].payload: -12345678901234567890 is an integer beyond"},
		{"such an integer in a result is refused", workers + "CompleteJob", jsonType, `{"job_id":"j_1","lease_id":"l_1","result":{"n":123456789012345678901234567890}}`, 400, "invalid_argument", "result.n: "},
		{"a page_token the server never issued is invalid_argument", jobs + "ListJobs", jsonType, `{"page_token":"bogus"}`, 400, "invalid_argument", "page_token"},
		{"an empty worker_id is invalid_argument", workers + "ClaimJob", jsonType, `{}`, 400, "invalid_argument", "worker_id: must not be empty"},
		{"a max_jobs over 100 is invalid_argument naming the field", workers + "ClaimJob", jsonType, `{"worker_id":"w","max_jobs":101}`, 400, "invalid_argument", "max_jobs: must be 0 (one job) to 100, got 101"},
		{"a negative max_jobs is invalid_argument naming the field", workers + "ClaimJob", jsonType, `{"worker_id":"w","max_jobs":-1}`, 400, "invalid_argument", "max_jobs:"},
		{"an empty lease_id is invalid_argument", workers + "Heartbeat", jsonType, `{"job_id":"j_1"}`, 400, "invalid_argument", "lease_id: must not be empty"},
		{"a failure with an error type over 256 bytes is invalid_argument", workers + "FailJob", jsonType, `{"job_id":"j_1","lease_id":"l_1","error":{"type":"` + strings.Repeat("E", 257) + `"}}`, 400, "invalid_argument", "error.type: must be at most 256 bytes"},
		{"a slip of a field's name is invalid_argument naming the field meant, not a dropped field", jobs + "SubmitJob", jsonType, `{"kind":"k","uniqeKey":"report-7"}`, 400, "invalid_argument", `uniqeKey: no such field; did you mean "uniqueKey"?`},
		{"so is a field's name in another case or spelling", jobs + "SubmitJob", jsonType, `{"kind":"k","Unique-Key":"report-7"}`, 400, "invalid_argument", `Unique-Key: no such field; did you mean "uniqueKey"?`},
		{"so is a slip in a batch's job, with its path", jobs + "SubmitJobs", jsonType, `{"jobs":[{"kind":"k"},{"kind":"k","runnAt":"2030-01-01T00:00:00Z"}]}`, 400, "invalid_argument", `jobs[1].runnAt: no such field; did you mean "runAt"?`},
		{"a request over the size limit is resource_exhausted", jobs + "SubmitJob", jsonType, `{"kind":"k","payload":"` + strings.Repeat("x", 8000) + `"}`, 429, "resource_exhausted", "is over the limit of"},
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
// clients can call older servers. That must hold for unknown fields (but
// for a slip of a known one's name), but not for an unknown enum name:
// dropped, it would turn a filter on "RUNNING" into no filter at all.
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

// Numbers in a JSON payload are kept as doubles: every one a double holds
// exactly comes back as sent, and floating point as floating point (the
// integers it cannot hold are refused, in the table above).
func TestJSONPayloadNumbersComeBackAsSent(t *testing.T) {
	ts := startServer(t, serverOptions{})
	payload := `{"edge":9007199254740992,"neg":-9007199254740992,"float":1.5e300,"tenth":0.1,"big_float":12345678901234567890.5}`
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"kind":"k","payload":`+payload+`}`))
	var got struct {
		Job struct{ Payload map[string]json.Number }
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&got); status != http.StatusOK || err != nil {
		t.Fatalf("SubmitJob = %d %s, want OK", status, body)
	}
	want := map[string]string{"edge": "9007199254740992", "neg": "-9007199254740992", "float": "1.5e+300", "tenth": "0.1", "big_float": "12345678901234567000"}
	for k, v := range want {
		if string(got.Job.Payload[k]) != v {
			t.Errorf("payload.%s came back as %s, want %s", k, got.Job.Payload[k], v)
		}
	}
}

// curl -d without -H 'Content-Type: application/json' sends a form, and
// curl with application/json to a stream sends what the Connect protocol
// takes only for a unary call: the answer is connect-go's 415 with a
// JSON body that says what to send, for a call of each kind; the server
// serves on.
func TestAFormOrNoContentTypeIsToldWhatToSend(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, tc := range []struct{ path, contentType, want string }{
		{"/jobwatch.v1.JobService/GetJob", "application/x-www-form-urlencoded", "Content-Type: application/json"},
		{"/jobwatch.v1.JobService/GetJob", "application/connect+json", "is for server streams; GetJob is unary: send JSON with Content-Type: application/json"},
		{"/jobwatch.v1.JobService/GetJob", "application/json; charset=latin1", `names the charset "latin1": jobwatch reads text in UTF-8 alone; send the body in UTF-8 with charset=utf-8 or no charset`},
		{"/jobwatch.v1.JobService/GetJob", "application/grpc-web-text", "Content-Type: application/json"},
		{"/jobwatch.v1.JobService/GetJob", "application/grpc+xml", "Content-Type: application/json"},
		{"/jobwatch.v1.JobService/WatchJob", "application/grpc-web-text+proto", "WatchJob, a server stream: send Content-Type: application/connect+json"},
		{"/jobwatch.v1.WorkerService/ClaimJob", "text/plain", "Content-Type: application/json"},
		{"/jobwatch.v1.JobService/WatchJob", "", "WatchJob, a server stream: send Content-Type: application/connect+json"},
		{"/jobwatch.v1.JobService/WatchJobLogs", "application/json", "WatchJobLogs, a server stream: send Content-Type: application/connect+json"},
	} {
		status, body := rawPost(t, ts.url+tc.path, tc.contentType, []byte(`{"jobId":"j_x"}`))
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(body), &e); status != http.StatusUnsupportedMediaType || err != nil ||
			e.Code != "invalid_argument" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s as %q = %d %s; want 415 and JSON saying %q", tc.path, tc.contentType, status, body, tc.want)
		}
	}
	// A path that names no method is the handlers' 404, whatever it sends.
	if status, _ := rawPost(t, ts.url+"/jobwatch.v1.JobService/NoSuchCall", "text/plain", nil); status != http.StatusNotFound {
		t.Errorf("an unknown method as text/plain = %d, want 404", status)
	}
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "after.a.form"})
}

// A procedure opened in a browser's address bar, or curled without -d,
// is connect-go's 405 with Allow: POST, and a JSON body that says how to
// call it; a HEAD gets the 405 alone, a path that names no procedure the
// handlers' answer (the page's 404), and the server serves on.
func TestAGetOfAProcedureIsToldToPost(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/jobwatch.v1.JobService/GetJob", "GetJob is called with POST, not GET: POST it JSON with Content-Type: application/json"},
		{http.MethodPut, "/jobwatch.v1.JobService/SubmitJob", "SubmitJob is called with POST, not PUT"},
		{"FROBNICATE", "/jobwatch.v1.QueueService/ListQueues", "ListQueues is called with POST, not another method"},
		{http.MethodGet, "/jobwatch.v1.JobService/WatchJob", "WatchJob is called with POST, not GET: POST it, a server stream: Content-Type: application/connect+json"},
	} {
		req, _ := http.NewRequest(tc.method, ts.url+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Code, Message string }
		if err := json.Unmarshal(body, &e); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || err != nil ||
			!strings.Contains(e.Message, tc.want) {
			t.Errorf("%s %s = %d (Allow %q) %s; want 405, Allow: POST and JSON saying %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodHead, ts.url+"/jobwatch.v1.JobService/GetJob", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("HEAD of a procedure = %v, %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get(ts.url + "/jobwatch.v1.JobService/NoSuchCall"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of a path that names no procedure = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "after.a.get"})
}

// A whole body whose string holds a lone escaped surrogate is refused
// for that, not as a body cut short.
func TestALoneSurrogateIsNamedNotCalledACutBody(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, req := range []string{
		`{"kind":"x","payload":{"a":"\ud800"}}`,
		`{"kind":"x \ud800 lone"}`, // protojson: "invalid escape code"
	} {
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(req))
		if status != http.StatusBadRequest || !strings.Contains(body, "surrogate") || strings.Contains(body, "EOF") || strings.Contains(body, "escape code") {
			t.Errorf("a lone surrogate in %s = %d %s; want 400 naming the surrogate", req, status, body)
		}
	}
}

// A body that is not the request in JSON says so in words a curl user
// reads: the request's name and what is wrong, without protojson's
// "proto:".
func TestABodyThatIsNotJSONNamesTheRequest(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, body := range []string{`{"kind":"enrich"`, `{"kind": 3}`, `{kind: "x"}`} {
		status, got := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(body))
		if status != http.StatusBadRequest || !strings.Contains(got, "the body is not a jobwatch.v1.SubmitJobRequest as JSON: ") ||
			strings.Contains(got, "proto:") {
			t.Errorf("%s = %d %s; want 400 naming SubmitJobRequest, without \"proto:\"", body, status, got)
		}
	}
	// The same for protobuf's binary form: a message cut short, and a
	// string that is not UTF-8.
	for _, body := range [][]byte{{0x0a, 0x05, 'a', 'b'}, {0x0a, 0x02, 0xff, 0xfe}} {
		status, got := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/proto", body)
		if status != http.StatusBadRequest || !strings.Contains(got, "the body is not a jobwatch.v1.SubmitJobRequest in protobuf's binary form: ") ||
			strings.Contains(got, "proto:") {
			t.Errorf("%x as protobuf = %d %s; want 400 naming SubmitJobRequest, without \"proto:\"", body, status, got)
		}
	}
}

// TestAMessageCutShortIsAClientError sends bodies whose envelope (the
// 5-byte flags-and-length prefix of gRPC, gRPC-Web and Connect streaming
// messages) promises more than the body holds, as a broken or hostile
// client would. They are the caller's mistake: invalid_argument with a
// message that says what is wrong and no protocol internals, counted as
// such, and the server serves on.
func TestAMessageCutShortIsAClientError(t *testing.T) {
	ts := startServer(t, serverOptions{})
	promises100 := append([]byte{0, 0, 0, 0, 100}, "ten bytes!"...)
	cutPrefix := []byte{0, 0, 0}
	tests := []struct {
		name, protocol, procedure string
		body                      []byte
		wantMessage               string
	}{
		{"a gRPC unary call whose message is shorter than its prefix says", "grpc", "/jobwatch.v1.JobService/GetJob", promises100, "promised 100 bytes, 10 arrived"},
		{"a gRPC unary call whose prefix is cut", "grpc", "/jobwatch.v1.JobService/SubmitJob", cutPrefix, "3 bytes of it arrived"},
		{"a gRPC-Web unary call whose message is shorter than its prefix says", "grpc-web", "/jobwatch.v1.JobService/GetJob", promises100, "promised 100 bytes, 10 arrived"},
		{"a Connect stream whose message is shorter than its prefix says", "connect-stream", "/jobwatch.v1.JobService/WatchJob", promises100, "promised 100 bytes, 10 arrived"},
		{"a gRPC stream whose prefix is cut", "grpc", "/jobwatch.v1.JobService/WatchJob", cutPrefix, "3 bytes of it arrived"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.requests(tt.procedure, "invalid_argument")
			code, message := envelopeCall(t, ts, tt.protocol, tt.procedure, tt.body)
			if code != "invalid_argument" || !strings.Contains(message, tt.wantMessage) {
				t.Errorf("answer = %s %q, want invalid_argument saying %q", code, message, tt.wantMessage)
			}
			if strings.Contains(message, "protocol error") {
				t.Errorf("message %q shows protocol internals", message)
			}
			if got := ts.requests(tt.procedure, "invalid_argument"); got != before+1 {
				t.Errorf("requests_total{%s, invalid_argument} went from %v to %v, want one more", tt.procedure, before, got)
			}
			if got := ts.requests(tt.procedure, "internal"); got != 0 {
				t.Errorf("requests_total{%s, internal} = %v, want 0", tt.procedure, got)
			}
		})
	}

	// Whole messages still work, on every protocol.
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithGRPCWeb()} {
		grpcClients := ts.clients(ts.h2cClient(), opt)
		if _, err := grpcClients.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
			t.Errorf("GetJob of a whole message: %v", err)
		}
	}
	if strings.Contains(ts.logs.String(), "level=ERROR") {
		t.Errorf("bad input was logged as an error:\n%s", ts.logs.String())
	}
}

// TestAMessagePrefixAClientMayNotSendIsAClientError sends messages whose
// prefix carries flags no client may set (compressed without naming a
// compression; end of stream and trailers, which only the server sends;
// reserved bits), or promises a message over --max-request-bytes. Each is
// the caller's mistake, answered at once with a code the caller can act
// on, no protocol internals, counted as such, and never internal.
func TestAMessagePrefixAClientMayNotSendIsAClientError(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: 4096}})
	getJob := append([]byte{0, 0, 0, 0, 2}, "{}"...) // an empty GetJobRequest as JSON
	withFlags := func(flags byte, msg []byte) []byte {
		out := bytes.Clone(msg)
		out[0] = flags
		return out
	}
	tests := []struct {
		name, protocol, procedure string
		body                      []byte
		wantCode, wantMessage     string
	}{
		{"a gRPC unary message flagged compressed with no grpc-encoding", "grpc", "/jobwatch.v1.JobService/GetJob",
			withFlags(0x01, getJob), "invalid_argument", "names no compression"},
		{"a gRPC-Web unary message flagged as trailers", "grpc-web", "/jobwatch.v1.JobService/GetJob",
			withFlags(0x80, getJob), "invalid_argument", "flags 0x80"},
		{"a Connect stream message flagged end of stream", "connect-stream", "/jobwatch.v1.JobService/WatchJob",
			withFlags(0x02, getJob), "invalid_argument", "flags 0x02"},
		{"a gRPC stream message with a reserved flag", "grpc", "/jobwatch.v1.JobService/WatchJob",
			withFlags(0x04, getJob), "invalid_argument", "flags 0x04"},
		{"a Connect stream's JSON sent without its frame, as to a unary call", "connect-stream", "/jobwatch.v1.JobService/WatchJob",
			[]byte(`{"jobId":"j_1"}`), "invalid_argument", "each message of a stream goes behind a 5-byte frame"},
		{"a gRPC-Web message that promises 4 GiB", "grpc-web", "/jobwatch.v1.JobService/GetJob",
			[]byte{0, 0xff, 0xff, 0xff, 0xff, '{', '}'}, "resource_exhausted", "over the limit of 4096 bytes"},
		{"a gRPC-Web unary call with no message", "grpc-web", "/jobwatch.v1.JobService/GetJob",
			nil, "invalid_argument", "holds no message: a unary call takes exactly one"},
		{"a gRPC unary call with two messages", "grpc", "/jobwatch.v1.JobService/GetJob",
			make([]byte, 2*5), "invalid_argument", "more than one message: a unary call takes exactly one"}, // two empty messages
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.requests(tt.procedure, tt.wantCode)
			code, message := envelopeCall(t, ts, tt.protocol, tt.procedure, tt.body)
			if code != tt.wantCode || !strings.Contains(message, tt.wantMessage) {
				t.Errorf("answer = %s %q, want %s saying %q", code, message, tt.wantCode, tt.wantMessage)
			}
			if strings.Contains(message, "protocol error") {
				t.Errorf("message %q shows protocol internals", message)
			}
			if got := ts.requests(tt.procedure, tt.wantCode); got != before+1 {
				t.Errorf("requests_total{%s, %s} went from %v to %v, want one more", tt.procedure, tt.wantCode, before, got)
			}
			if got := ts.requests(tt.procedure, "internal"); got != 0 {
				t.Errorf("requests_total{%s, internal} = %v, want 0", tt.procedure, got)
			}
		})
	}

	// So is a health check's (which jobwatch_requests_total does not
	// count).
	if code, message := envelopeCall(t, ts, "grpc", "/grpc.health.v1.Health/Check", nil); code != "invalid_argument" ||
		!strings.Contains(message, "holds no message: a unary call takes exactly one") {
		t.Errorf("a gRPC health check with no message = %s %q, want invalid_argument saying it holds no message", code, message)
	}

	// Messages that are compressed and say so still work.
	job := submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "k"})
	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithGRPCWeb(), connect.WithProtoJSON()} {
		gzipped := ts.clients(ts.h2cClient(), opt, connect.WithSendGzip())
		if _, err := gzipped.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
			t.Errorf("GetJob of a gzipped message: %v", err)
		}
	}
	if strings.Contains(ts.logs.String(), "level=ERROR") {
		t.Errorf("bad input was logged as an error:\n%s", ts.logs.String())
	}
}

// Connect answers a unary call whose body it cannot take (undecodable,
// too large, in an unknown compression) before any interceptor runs.
// Those are the mistakes callers make most, so jobwatch_requests_total
// counts them with the code the caller got; and a path that names no
// RPC adds no series.
func TestCallsRefusedBeforeTheHandlerAreCountedWithTheirCode(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: 4096}})
	const (
		getJob    = "/jobwatch.v1.JobService/GetJob"
		submitJob = "/jobwatch.v1.JobService/SubmitJob"
	)
	tests := []struct {
		name, procedure, wantCode string
		call                      func()
	}{
		{"malformed JSON", getJob, "invalid_argument", func() {
			rawPost(t, ts.url+getJob, "application/json", []byte(`{"job_id":`))
		}},
		{"a body over --max-request-bytes", submitJob, "resource_exhausted", func() {
			rawPost(t, ts.url+submitJob, "application/json", []byte(`{"kind":"k","payload":"`+strings.Repeat("x", 8000)+`"}`))
		}},
		{"a compression the server does not know", getJob, "unimplemented", func() {
			rawPost(t, ts.url+getJob, "application/json", []byte(`{}`), "Content-Encoding", "br")
		}},
		{"garbage protobuf over gRPC-Web", getJob, "invalid_argument", func() {
			envelopeCall(t, ts, "grpc-web", getJob, []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff})
		}},
		{"garbage protobuf over gRPC", getJob, "invalid_argument", func() {
			envelopeCall(t, ts, "grpc", getJob, []byte{0, 0, 0, 0, 3, 0xff, 0xff, 0xff})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ts.requests(tt.procedure, tt.wantCode)
			tt.call()
			if got := ts.requests(tt.procedure, tt.wantCode); got != before+1 {
				t.Errorf("requests_total{%s, %s} went from %v to %v, want one more", tt.procedure, tt.wantCode, before, got)
			}
		})
	}

	rawPost(t, ts.url+"/jobwatch.v1.JobService/NoSuchCall", "application/json", []byte(`{}`))
	families, err := ts.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "NoSuchCall") {
					t.Errorf("%s has a series for a path that names no RPC: %v", f.GetName(), m)
				}
			}
		}
	}
}

// requests reads jobwatch_requests_total{procedure, code}.
func (ts *testServer) requests(procedure, code string) float64 {
	ts.t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		ts.t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "jobwatch_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["procedure"] == procedure && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// envelopeCall posts body, as it is, as one call of protocol ("grpc" over
// h2c, "grpc-web" over HTTP/1.1, "connect-stream" over HTTP/1.1), and
// returns the Connect code and message of the server's answer.
func envelopeCall(t *testing.T, ts *testServer, protocol, procedure string, body []byte) (code, message string) {
	t.Helper()
	contentType := map[string]string{
		"grpc":           "application/grpc+proto",
		"grpc-web":       "application/grpc-web+proto",
		"connect-stream": "application/connect+json",
	}[protocol]
	hc := ts.http1Client()
	if protocol == "grpc" {
		hc = ts.h2cClient()
	}
	req, err := http.NewRequestWithContext(ctxTimeout(t, 5*time.Second), http.MethodPost, ts.url+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("TE", "trailers")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", procedure, err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	switch protocol {
	case "grpc", "grpc-web":
		status, msg := resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		if status == "" {
			status, msg = resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
		}
		if status == "" && protocol == "grpc-web" {
			// Trailers in the body: the frame flagged 0x80.
			for _, frame := range frames(t, respBody) {
				if frame.flags&0x80 == 0 {
					continue
				}
				for _, line := range strings.Split(string(frame.data), "\r\n") {
					k, v, _ := strings.Cut(line, ":")
					switch strings.ToLower(strings.TrimSpace(k)) {
					case "grpc-status":
						status = strings.TrimSpace(v)
					case "grpc-message":
						msg = strings.TrimSpace(v)
					}
				}
			}
		}
		n, err := strconv.Atoi(status)
		if err != nil {
			t.Fatalf("no grpc-status in the answer (%d %q, headers %v)", resp.StatusCode, respBody, resp.Header)
		}
		msg, _ = url.PathUnescape(msg)
		return connect.Code(n).String(), msg
	default:
		for _, frame := range frames(t, respBody) {
			if frame.flags&0x02 == 0 {
				continue
			}
			var end struct {
				Error *connectError `json:"error"`
			}
			if err := json.Unmarshal(frame.data, &end); err != nil || end.Error == nil {
				t.Fatalf("end of stream %q has no error: %v", frame.data, err)
			}
			return end.Error.Code, end.Error.Message
		}
		t.Fatalf("no end of stream in %q", respBody)
	}
	return "", ""
}

type frame struct {
	flags byte
	data  []byte
}

// frames splits a response body into its envelopes.
func frames(t *testing.T, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a response frame is cut short: %q", b)
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			t.Fatalf("a response frame promises %d bytes, has %d", n, len(b)-5)
		}
		out = append(out, frame{flags: b[0], data: b[5 : 5+n]})
		b = b[5+n:]
	}
	return out
}

// A deadline header that is not one is refused in the caller's protocol
// with what one looks like, not strconv's words; a well-formed one still
// bounds the call.
func TestAMalformedDeadlineHeaderSaysWhatOneLooksLike(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, v := range []string{"abc", "-5", "1.5", "12345678901"} {
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"jobId":"j_x"}`), "Connect-Timeout-Ms", v)
		var e struct{ Code, Message string }
		if err := json.Unmarshal([]byte(body), &e); status != http.StatusBadRequest || err != nil || e.Code != "invalid_argument" ||
			!strings.Contains(e.Message, "Connect-Timeout-Ms header must be the call's deadline as a whole number of milliseconds") ||
			strings.Contains(e.Message, "strconv") {
			t.Errorf("Connect-Timeout-Ms: %s = %d %s; want 400 saying what the header holds", v, status, body)
		}
	}
	if status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"jobId":"j_x"}`), "Connect-Timeout-Ms", "0"); status != http.StatusGatewayTimeout ||
		!strings.Contains(body, "the call's deadline had passed when the server read it") {
		t.Errorf("Connect-Timeout-Ms: 0 = %d %s; want 504 saying the deadline had passed", status, body)
	}
	if status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/GetJob", "application/json", []byte(`{"jobId":"j_x"}`), "Connect-Timeout-Ms", "5000"); status != http.StatusNotFound {
		t.Errorf("Connect-Timeout-Ms: 5000 = %d %s; want the call's own answer, 404", status, body)
	}

	// gRPC: an empty GetJobRequest in its 5-byte frame.
	grpcGetJob := func(timeout string) (status, msg string) {
		req, err := http.NewRequest(http.MethodPost, ts.url+"/jobwatch.v1.JobService/GetJob", bytes.NewReader(make([]byte, 5)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Grpc-Timeout", timeout)
		resp, err := ts.h2cClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status, msg = resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
		if status == "" {
			status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		}
		return status, msg
	}
	if status, msg := grpcGetJob("soon"); status != "3" || !strings.Contains(msg, "grpc-timeout header must be 1 to 8 digits and a unit") {
		t.Errorf("grpc-timeout: soon = grpc-status %q, message %q; want 3 (invalid_argument) saying what the header holds", status, msg)
	}
	if status, msg := grpcGetJob("0m"); status != "4" || !strings.Contains(msg, "the call's deadline had passed when the server read it") {
		t.Errorf("grpc-timeout: 0m = grpc-status %q, message %q; want 4 (deadline_exceeded) saying the deadline had passed", status, msg)
	}
	// A deadline under a millisecond passes before any answer: said in
	// words, not Go's "context deadline exceeded".
	for _, timeout := range []string{"1n", "999999n", "1u", "999u"} {
		if status, msg := grpcGetJob(timeout); status != "4" || !strings.Contains(msg, "is under a millisecond: it passed before the server could answer") {
			t.Errorf("grpc-timeout: %s = grpc-status %q, message %q; want 4 (deadline_exceeded) saying the deadline was under a millisecond", timeout, status, msg)
		}
	}
	submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "after.a.bad.deadline"})
}

// On HTTP/1.1 a request refused for its size, before its body was read,
// ends its connection: the answer says Connection: close and nothing
// more is read from it. The rest of the body was once read as the
// connection's next request (answered 431 Request Header Fields Too
// Large): bytes of one request taken for another, which a proxy in front
// that sends several clients' requests on one connection would have
// been desynced by. Each protocol's framing is checked: Connect unary
// (refused at its Content-Length) and gRPC-Web (at its message prefix).
func TestAnHTTP1RequestRefusedForItsSizeEndsItsConnection(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: 4096}})
	big := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name, contentType string
		body              []byte
	}{
		{"connect unary", "application/json", []byte(`{"kind":"k","payload":"` + big + `"}`)},
		{"grpc-web", "application/grpc-web+proto", append([]byte{0, 0, 0x10, 0, 0}, big...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addrOf(ts.url))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// What follows the body on the same connection: a request of
			// its own, which must not be answered.
			next := "POST /jobwatch.v1.JobService/GetJob HTTP/1.1\r\nHost: " + addrOf(ts.url) +
				"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
			go func() {
				// The server may close before it has it all: a write error
				// here is the point.
				_, _ = fmt.Fprintf(conn, "POST /jobwatch.v1.JobService/SubmitJob HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
					addrOf(ts.url), c.contentType, len(c.body))
				_, _ = conn.Write(c.body)
				_, _ = io.WriteString(conn, next)
			}()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(conn)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("no answer to the oversized request: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "over the limit") && resp.Header.Get("Grpc-Message") == "" {
				t.Errorf("answer %d %q, want a refusal over the limit", resp.StatusCode, body)
			}
			if !resp.Close {
				t.Errorf("the refusal of an oversized body keeps the connection (headers %v): the rest of the body would be read as a request", resp.Header)
			}
			if again, err := http.ReadResponse(r, nil); err == nil {
				t.Errorf("the connection answered again after the refusal: %d %s", again.StatusCode, again.Status)
			}
		})
	}
}

// The payload limit counts the payload as the caller sent it, compact:
// protojson, which turns it into JSON for the store, puts a space after
// some commas at random per binary, and an array of small numbers then
// counted up to a third more (an outside probe saw 200,001 bytes refused
// as 300,000). A payload of the limit's size less one is taken and read
// back as sent; one a byte over is refused, and the count is the one the
// caller can make.
func TestThePayloadLimitCountsThePayloadAsSent(t *testing.T) {
	ts := startServer(t, serverOptions{engine: jobs.Config{MaxPayloadBytes: 1024}})
	payload := func(size int) string { // [1,1,...,1] of size bytes, size odd
		return "[" + strings.Repeat("1,", (size-3)/2) + "1]"
	}
	status, body := postAnswer(t, http.DefaultClient, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", nil,
		[]byte(`{"kind":"k","hold":true,"payload":`+payload(1023)+`}`))
	id := regexp.MustCompile(`"id":\s*"(j_[0-9a-z]+)"`).FindStringSubmatch(body)
	if status != 200 || id == nil {
		t.Fatalf("a payload of 1,023 bytes under a limit of 1,024: HTTP %d %.300s; want it taken", status, body)
	}
	j, err := ts.engine.Get(t.Context(), id[1])
	if err != nil || string(j.Payload) != payload(1023) {
		t.Fatalf("the stored payload = %d bytes, %v; want the 1,023 sent, as sent", len(j.Payload), err)
	}
	status, body = postAnswer(t, http.DefaultClient, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", nil,
		[]byte(`{"kind":"k","hold":true,"payload":`+payload(1025)+`}`))
	if status != 429 || !strings.Contains(body, "payload: 1025 bytes as JSON is over the limit of 1024") {
		t.Fatalf("a payload of 1,025 bytes: HTTP %d %s; want 429 counting 1025 bytes", status, body)
	}
	// Nested past what protojson decodes (10,000 levels), it is refused
	// with the limit a payload has, not the decoder's words.
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	status, body = postAnswer(t, http.DefaultClient, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", nil,
		[]byte(`{"kind":"k","hold":true,"payload":`+deep+`}`))
	if status != 400 || !strings.Contains(body, "nested too deep to decode: a payload or result may be nested 128 levels at most") {
		t.Fatalf("a payload nested 10,001 levels: HTTP %d %s; want 400 naming the 128 levels", status, body)
	}
}
