package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// Every protocol, over the HTTP versions its real clients use, runs the
// same life of a job: submit, watch, claim, complete, wait, and a unique
// conflict whose detail the client can read.
func TestEveryProtocolRunsAJobEndToEnd(t *testing.T) {
	ts := startServer(t, serverOptions{})
	tests := []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"connect with JSON over HTTP/1.1 (like a browser)", ts.http1Client(), []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect with protobuf over h2c", ts.h2cClient(), nil},
		{"grpc over h2c", ts.h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web over HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpc-web over h2c", ts.h2cClient(), []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ts.clients(tt.hc, tt.opts...)
			kind := fmt.Sprintf("protocol-%d", i)
			job := submit(t, c, &jobwatchv1.SubmitJobRequest{
				Kind: kind, Payload: mustValue(t, map[string]any{"n": 7}), UniqueKey: kind,
			})
			if job.GetPayload().GetStructValue().GetFields()["n"].GetNumberValue() != 7 {
				t.Fatalf("payload = %v, want {n: 7}", job.GetPayload())
			}

			_, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: kind, UniqueKey: kind})
			wantConflictWith(t, err, job.GetId(), kind)

			s := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), 0)
			if got := nextJob(t, s); got.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
				t.Fatalf("watch began with %v, want QUEUED", got)
			}

			waited := make(chan *jobwatchv1.Job, 1)
			go func() {
				resp, err := c.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				if err != nil {
					t.Errorf("WaitJob: %v", err)
				}
				waited <- resp.GetJob()
			}()
			ts.waitForGauge("jobwatch_parked_waits", 1)

			done := complete(t, c, claim(t, c, kind), mustValue(t, "fine"))
			var last *jobwatchv1.Job
			for s.Receive() {
				if j := s.Msg().GetJob(); j != nil {
					last = j
				}
			}
			if err := s.Err(); err != nil || last.GetVersion() != done.GetVersion() {
				t.Fatalf("watch ended with %v after %v, want OK after version %d", err, last, done.GetVersion())
			}
			select {
			case got := <-waited:
				if got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || got.GetResult().GetStringValue() != "fine" {
					t.Fatalf("WaitJob answered %v, want SUCCEEDED with result \"fine\"", got)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("WaitJob did not wake")
			}
		})
	}
}

func wantConflictWith(t *testing.T, err error, activeID, uniqueKey string) {
	t.Helper()
	wantCode(t, err, connect.CodeAlreadyExists)
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error %T is not a *connect.Error", err)
	}
	if !strings.Contains(cerr.Message(), activeID) {
		t.Errorf("message %q does not name the active job %s", cerr.Message(), activeID)
	}
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Fatalf("detail: %v", derr)
		}
		if active, ok := v.(*jobwatchv1.JobAlreadyActive); ok {
			if active.GetJobId() != activeID || active.GetUniqueKey() != uniqueKey {
				t.Errorf("detail = %v, want job %s with key %s", active, activeID, uniqueKey)
			}
			return
		}
	}
	t.Errorf("no JobAlreadyActive detail in %v", cerr.Details())
}
