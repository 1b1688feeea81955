package wire

import (
	"encoding/json"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestEveryStateMapsBothWays(t *testing.T) {
	for _, s := range []jobtype.State{jobtype.Pending, jobtype.Queued, jobtype.Running,
		jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		p := State(s)
		if p == jobwatchv1.JobState_JOB_STATE_UNSPECIFIED {
			t.Errorf("%s has no wire state", s)
		}
		if back, ok := StoreState(p); !ok || back != s {
			t.Errorf("%s → %v → %s, %v", s, p, back, ok)
		}
	}
	if _, ok := StoreState(jobwatchv1.JobState_JOB_STATE_UNSPECIFIED); ok {
		t.Error("UNSPECIFIED maps to a stored state")
	}
}

func TestJobCarriesEveryFieldACallerSees(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 123000, time.UTC)
	j := jobtype.Job{
		ID: "j_1", Tenant: "acme", Kind: "report", Queue: "default", State: jobtype.Failed,
		Version: 7, Percent: 45, Step: "batch 5 of 11",
		Payload: json.RawMessage(`{"month":"2026-11"}`), Result: json.RawMessage(`[1,2]`),
		Error:   &jobtype.JobError{Type: "TimeoutError", Message: "warehouse slow"},
		Attempt: 2, MaxAttempts: 3, UniqueKey: "nov", CreatedAt: at, StartedAt: at,
		UpdatedAt: at, FinishedAt: at, RunAt: at, WorkerID: "w1",
		LeaseID: "l_secret",
	}
	pj, err := Job(&j)
	if err != nil {
		t.Fatal(err)
	}
	if pj.GetId() != "j_1" || pj.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED ||
		pj.GetVersion() != 7 || pj.GetPercent() != 45 || pj.GetStep() != "batch 5 of 11" ||
		pj.GetAttempt() != 2 || pj.GetMaxAttempts() != 3 || pj.GetUniqueKey() != "nov" ||
		pj.GetWorkerId() != "w1" || pj.GetError().GetType() != "TimeoutError" ||
		!pj.GetFinishedAt().AsTime().Equal(at) {
		t.Fatalf("converted job lost a field: %v", pj)
	}
	payload, err := JSON(pj.GetPayload())
	if err != nil || string(payload) != `{"month":"2026-11"}` {
		t.Fatalf("payload round trip = %s, %v", payload, err)
	}
	if got := pj.GetResult().GetListValue().GetValues(); len(got) != 2 {
		t.Fatalf("result = %v", pj.GetResult())
	}
}

func TestAbsentValuesStayAbsent(t *testing.T) {
	pj, err := Job(&jobtype.Job{ID: "j_2", State: jobtype.Queued})
	if err != nil {
		t.Fatal(err)
	}
	if pj.Payload != nil || pj.Result != nil || pj.Error != nil || pj.StartedAt != nil {
		t.Fatalf("unset fields appeared on the wire: %v", pj)
	}
	if raw, err := JSON(nil); raw != nil || err != nil {
		t.Fatalf("JSON(nil) = %s, %v", raw, err)
	}
}

func TestStoredJSONThatIsNotJSONIsAnError(t *testing.T) {
	if _, err := Job(&jobtype.Job{ID: "j_3", Payload: json.RawMessage(`{nope`)}); err == nil {
		t.Fatal("a corrupt payload converted without error")
	}
}

func TestAViewIsASummaryUnlessItSaysFull(t *testing.T) {
	for _, tc := range []struct {
		view     jobwatchv1.JobView
		full, ok bool
	}{
		{jobwatchv1.JobView_JOB_VIEW_UNSPECIFIED, false, true},
		{jobwatchv1.JobView_JOB_VIEW_SUMMARY, false, true},
		{jobwatchv1.JobView_JOB_VIEW_FULL, true, true},
		{jobwatchv1.JobView(7), false, false},
	} {
		if full, ok := FullView(tc.view); full != tc.full || ok != tc.ok {
			t.Errorf("FullView(%v) = %v, %v; want %v, %v", tc.view, full, ok, tc.full, tc.ok)
		}
	}
}
