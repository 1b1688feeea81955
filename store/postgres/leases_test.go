package postgres

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// A retry's RunAt is computed in SQL; it must be what
// store.LeaseWrite.Apply computes in Go to the microsecond, also at the
// edges of Backoff: a huge attempt, a maximum near the largest duration
// (a delay past 2^53 microseconds), an initial step above the maximum,
// not positive, or not whole microseconds, and jitter near 1.
func TestRetryRunAtIsApplysAtTheEdgesOfBackoff(t *testing.T) {
	s, _ := openTwo(t)
	const maxDuration = time.Duration(math.MaxInt64)
	backoffs := []store.Backoff{
		{Initial: time.Second, Max: time.Minute},
		{Initial: time.Second, Max: maxDuration},
		{Initial: 3 * time.Second, Max: maxDuration / 2},
		{Initial: time.Hour, Max: time.Minute},
		{Initial: 1500 * time.Nanosecond, Max: time.Second},
		{Initial: 0, Max: time.Minute},
		{Initial: -time.Second, Max: time.Minute},
	}
	var (
		jobs []jobtype.Job
		ws   []store.LeaseWrite
	)
	rules := store.LeaseRules{Now: t0.Add(time.Hour + 789*time.Nanosecond), Lease: time.Minute,
		Backoffs: map[string]store.Backoff{}}
	for b, backoff := range backoffs {
		queue := fmt.Sprint("q", b)
		rules.Backoffs[queue] = backoff
		for _, attempt := range []int32{0, 1, 2, 7, 40, 100, math.MaxInt32 - 1} {
			for _, jitter := range []float64{0, 0.5, 0.999999, math.Nextafter(1, 0)} {
				j := job(fmt.Sprintf("job-%d-%d-%v", b, attempt, jitter), queue, 0)
				j.State, j.Attempt, j.MaxAttempts, j.LeaseID, j.WorkerID = jobtype.Running, attempt, math.MaxInt32, "lease", "w"
				jobs = append(jobs, mustCreate(t, s, j))
				ws = append(ws, store.LeaseWrite{Op: store.Fail, JobID: j.ID, LeaseID: "lease",
					Error: &jobtype.JobError{Type: "Boom", Message: "no"}, Retry: true, Jitter: jitter})
			}
		}
	}
	got, err := s.WriteLeases(t.Context(), ws, rules)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		want := j.Clone()
		if !ws[i].Apply(&want, rules) {
			t.Fatalf("%s: Apply says the lease does not hold", j.ID)
		}
		if !got[i].Held || !got[i].Job.RunAt.Equal(micro(want.RunAt)) {
			t.Errorf("%s (backoff %+v, attempt %d, jitter %v): held %v, run at %v, want %v (a delay of %v)",
				j.ID, rules.Backoffs[j.Queue], j.Attempt, ws[i].Jitter, got[i].Held, got[i].Job.RunAt, micro(want.RunAt),
				want.RunAt.Sub(rules.Now))
		}
	}
}
