package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// A claim whose job the client cannot decode still tells the worker which
// job and lease it got, in binary and in JSON, so the job can be failed,
// and the rest of the job, so a caller can show it and see how it ended.
func TestAClaimOfAJobTheClientCannotDecodeNamesTheJobAndTheLease(t *testing.T) {
	deep := structpb.NewListValue(&structpb.ListValue{})
	for range 5000 { // two protobuf messages per level: over the decoder's 10,000
		deep = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{deep}})
	}
	binary, err := proto.Marshal(&jobwatchv1.ClaimJobResponse{
		Job: &jobwatchv1.Job{Id: "j_deep", Kind: "tree", State: jobwatchv1.JobState_JOB_STATE_FAILED, Payload: deep, Result: deep,
			Error: &jobwatchv1.JobError{Type: "UndecodableJob"}},
		LeaseId: "l_deep",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		opts        []client.Option
		contentType string
		body        []byte
		summary     bool // the rest of the job decodes
	}{
		{"binary, a payload nested too deep", nil, "application/proto", binary, true},
		{"JSON, a field this client cannot parse", []client.Option{client.WithJSON()}, "application/json",
			[]byte(`{"job":{"id":"j_deep","createdAt":"yesterday"},"leaseId":"l_deep"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.Write(tt.body)
			}))
			defer srv.Close()
			opts := append([]client.Option{client.WithHTTPClient(srv.Client()), client.WithLongCallHTTPClient(srv.Client())}, tt.opts...)
			c := client.New(srv.URL, opts...)
			defer c.Close()
			_, err := c.WorkerService().ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w"})
			var u *client.UndecodableJobError
			if !errors.As(err, &u) || u.JobID != "j_deep" || u.LeaseID != "l_deep" {
				t.Fatalf("claim: %v, want an UndecodableJobError for j_deep under l_deep", err)
			}
			j := u.Job
			switch {
			case !tt.summary && j != nil:
				t.Fatalf("Job = %v, want nil: the job itself does not decode", j)
			case tt.summary && (j.GetId() != "j_deep" || j.GetKind() != "tree" || j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED ||
				j.GetError().GetType() != "UndecodableJob" || j.GetPayload() != nil || j.GetResult() != nil):
				t.Fatalf("Job = %v, want the job's id, kind, state and error without payload or result", j)
			}
		})
	}
}
