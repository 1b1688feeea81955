package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestCheckScopeFindsOnlyJobsInTheScopeAndCallsTheRestNotFound(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "enrich"})
	tests := []struct {
		name  string
		scope jobs.Scope
		id    string
		found bool
	}{
		{"no bounds reach every job", jobs.Scope{}, j.ID, true},
		{"its tenant", jobs.Scope{Tenants: []string{"acme"}}, j.ID, true},
		{"one of its tenants", jobs.Scope{Tenants: []string{"globex", "acme"}}, j.ID, true},
		{"its kind", jobs.Scope{Kinds: []string{"enrich"}}, j.ID, true},
		{"its tenant and kind", jobs.Scope{Tenants: []string{"acme"}, Kinds: []string{"enrich"}}, j.ID, true},
		{"another tenant", jobs.Scope{Tenants: []string{"globex"}}, j.ID, false},
		{"other tenants", jobs.Scope{Tenants: []string{"globex", "initech"}}, j.ID, false},
		{"another kind", jobs.Scope{Kinds: []string{"resize"}}, j.ID, false},
		{"its tenant, another kind", jobs.Scope{Tenants: []string{"acme"}, Kinds: []string{"resize"}}, j.ID, false},
		{"a job that does not exist", jobs.Scope{Tenants: []string{"acme"}}, "j_missing", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := e.CheckScope(ctx, tc.id, tc.scope)
			if tc.found && err != nil || !tc.found && !errors.Is(err, jobtype.ErrNotFound) {
				t.Fatalf("err = %v, want found %v", err, tc.found)
			}
			if !tc.found {
				// Worded as for a missing job, the id aside.
				missing := e.CheckScope(ctx, "j_missing", tc.scope)
				if strings.ReplaceAll(err.Error(), tc.id, "ID") != strings.ReplaceAll(missing.Error(), "j_missing", "ID") {
					t.Errorf("%q and, for a missing job, %q", err, missing)
				}
			}
		})
	}
	if err := e.CheckScope(ctx, "not an id!", jobs.Scope{Tenants: []string{"acme"}}); !errors.As(err, new(*jobtype.InvalidError)) {
		t.Errorf("a malformed id: %v, want an InvalidError", err)
	}
}

func TestGetInReadsOnlyTheCallersTenant(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Payload: []byte(`{"secret":1}`)})
	got, err := e.GetIn(ctx, "acme", j.ID)
	if err != nil || string(got.Payload) != `{"secret":1}` {
		t.Errorf("its own tenant: %s, %v; want the whole job", got.Payload, err)
	}
	if _, err := e.GetIn(ctx, "globex", j.ID); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("another tenant: %v, want ErrNotFound", err)
	}
	if tenant, err := e.TenantOf(ctx, j.ID); tenant != "acme" || err != nil {
		t.Errorf("TenantOf = %q, %v; want acme", tenant, err)
	}
}

func TestSubmitRefusesARunAtMoreThanACenturyFromNow(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	now := clock.Now()
	for _, runAt := range []time.Time{
		now.Add(-jobtype.MaxTimeOffset - time.Microsecond),
		now.Add(jobtype.MaxTimeOffset + time.Microsecond),
		time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		_, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "k", RunAt: runAt})
		var invalid *jobtype.InvalidError
		if !errors.As(err, &invalid) || invalid.Field != "run_at" || !strings.Contains(invalid.Reason, "within 100 years") {
			t.Errorf("run_at %v: %v, want an InvalidError for run_at", runAt, err)
		}
	}
	for _, runAt := range []time.Time{now.Add(-jobtype.MaxTimeOffset), now.Add(jobtype.MaxTimeOffset), now.Add(-time.Hour)} {
		j, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "k", RunAt: runAt})
		if err != nil || !j.RunAt.Equal(runAt) {
			t.Errorf("run_at %v: %v, %v; want it taken as given", runAt, j.RunAt, err)
		}
	}
	if err := e.CheckTime("run_at", time.Time{}); !errors.As(err, new(*jobtype.InvalidError)) {
		t.Errorf("the zero time: %v, want an InvalidError", err)
	}
	if err := e.CheckTime("run_at", now); err != nil {
		t.Errorf("now: %v", err)
	}
	// ListQueues' oldest queued age is computed from these times: it is
	// representable on either side of the range.
	if d := now.Sub(now.Add(-jobtype.MaxTimeOffset)); d != jobtype.MaxTimeOffset {
		t.Errorf("the age of the oldest run_at allowed is %v, want %v", d, jobtype.MaxTimeOffset)
	}
}
