package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A claim a worker sends just after it asked to stop claiming (it
// reached the server second) answers at once, with no job, for two
// seconds; then the worker's claims park again (a worker started again
// under the same id). A worker id no claim
// could name is refused.
func TestAClaimAfterStopClaimingAnswersAtOnce(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	if err := e.StopClaiming(context.Background(), "w-stopping", ""); err != nil {
		t.Fatal(err)
	}
	submit(t, e, jobs.SubmitRequest{Kind: "sync"})
	// Far in the future: a claim that parked would wait for it.
	deadline := time.Now().Add(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-stopping", Kinds: []string{"other"}}, deadline); !errors.Is(err, jobtype.ErrNoJob) || ctx.Err() != nil {
		t.Fatalf("claim of the stopping worker: %v (ctx %v); want no job, at once", err, ctx.Err())
	}
	if j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-other", Kinds: []string{"sync"}}, deadline); err != nil || j.Kind != "sync" {
		t.Fatalf("claim of another worker: %+v, %v; want the job", j, err)
	}
	clock.Advance(3 * time.Second)
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if _, err := e.Claim(short, jobs.ClaimRequest{WorkerID: "w-stopping", Kinds: []string{"other"}}, deadline); short.Err() == nil {
		t.Fatalf("a claim of the worker three seconds on answered %v without waiting; want it parked until its ctx ended", err)
	}
	if err := e.StopClaiming(context.Background(), "", ""); err == nil {
		t.Fatal("StopClaiming without a worker id was taken")
	}
}
