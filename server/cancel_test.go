package server_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// CancelJob on a job that has ended: a CANCELLED job answers OK with the
// job as it is, so a cancel retried after its answer was lost (or typed
// twice) is harmless; a job that ended any other way is
// failed_precondition (HTTP 400 for curl) naming the state it ended in,
// and stays as it ended.
func TestCancelJobOnAJobThatHasEnded(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	cancelJob := func(id string) (*jobwatchv1.Job, error) {
		resp, err := c.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: id})
		return resp.GetJob(), err
	}

	t.Run("cancelling a cancelled job again answers OK and changes nothing", func(t *testing.T) {
		j := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "cancel.twice"})
		first, err := cancelJob(j.GetId())
		if err != nil || first.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("first cancel: %v, %v", first, err)
		}
		again, err := cancelJob(j.GetId())
		if err != nil {
			t.Fatalf("second cancel: %v, want OK", err)
		}
		if again.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED || again.GetVersion() != first.GetVersion() ||
			!again.GetFinishedAt().AsTime().Equal(first.GetFinishedAt().AsTime()) {
			t.Fatalf("second cancel answered %v, want the job as the first left it (version %d)", again, first.GetVersion())
		}
	})

	t.Run("cancelling a succeeded job is failed_precondition naming its state", func(t *testing.T) {
		done := finishedJob(t, c, "cancel.done", nil)
		_, err := cancelJob(done.GetId())
		wantCode(t, err, connect.CodeFailedPrecondition)
		var ce *connect.Error
		if !errors.As(err, &ce) || !strings.Contains(ce.Message(), "it has succeeded") {
			t.Fatalf("the refusal does not say the job succeeded: %v", err)
		}
		got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: done.GetId()})
		if err != nil || got.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || got.GetJob().GetVersion() != done.GetVersion() {
			t.Fatalf("after the refused cancel: %v, %v; want it SUCCEEDED as it was", got.GetJob(), err)
		}
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/CancelJob", "application/json",
			[]byte(`{"jobId":"`+done.GetId()+`"}`))
		if status != http.StatusBadRequest || !strings.Contains(body, `"failed_precondition"`) {
			t.Fatalf("curl's cancel of a succeeded job: %d %s, want 400 failed_precondition", status, body)
		}
	})
}
