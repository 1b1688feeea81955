package jobs_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestSubmitRefusesBadFieldsNamingTheField(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	long := strings.Repeat("a", 129)
	tests := []struct {
		name  string
		req   jobs.SubmitRequest
		field string
	}{
		{"an empty kind", jobs.SubmitRequest{}, "kind"},
		{"a kind over 128 bytes", jobs.SubmitRequest{Kind: long}, "kind"},
		{"a kind with a space", jobs.SubmitRequest{Kind: "send mail"}, "kind"},
		{"a tenant with a quote", jobs.SubmitRequest{Kind: "k", Tenant: `a"b`}, "tenant"},
		{"a tenant over 128 bytes", jobs.SubmitRequest{Kind: "k", Tenant: long}, "tenant"},
		{"a queue with a newline", jobs.SubmitRequest{Kind: "k", Queue: "q\n"}, "queue"},
		{"a unique key over 128 bytes", jobs.SubmitRequest{Kind: "k", UniqueKey: long}, "unique_key"},
		{"a unique key with a control character", jobs.SubmitRequest{Kind: "k", UniqueKey: "a\x00b"}, "unique_key"},
		{"a payload that is not JSON", jobs.SubmitRequest{Kind: "k", Payload: []byte("{")}, "payload"},
		{"negative max attempts", jobs.SubmitRequest{Kind: "k", MaxAttempts: -1}, "max_attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Submit(context.Background(), tt.req)
			if !isInvalid(err, tt.field) {
				t.Fatalf("got %v, want an InvalidError for %q", err, tt.field)
			}
		})
	}
}

func TestSubmitAcceptsNamesUsersWrite(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	for i, kind := range []string{"email.send", "reports/monthly", "a-b_c:d@e", strings.Repeat("k", 128)} {
		key := "report 2024-0" + strconv.Itoa(i+1) + " für Acme"
		if _, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: kind, UniqueKey: key}); err != nil {
			t.Errorf("submit kind %q: %v", kind, err)
		}
	}
}

func TestSubmitFillsDefaults(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, DefaultMaxAttempts: 3})
	j := submit(t, e, jobs.SubmitRequest{Kind: "k", Payload: mustJSON(map[string]int{"n": 1})})

	if !regexp.MustCompile(`^j_[0-9a-hjkmnp-tv-z]{26}$`).MatchString(j.ID) {
		t.Errorf("id %q is not j_ and 26 base32 characters", j.ID)
	}
	type fields struct {
		Tenant, Queue string
		State         jobtype.State
		Version       int64
		MaxAttempts   int32
	}
	want := fields{"default", "default", jobtype.Queued, 1, 3}
	got := fields{j.Tenant, j.Queue, j.State, j.Version, j.MaxAttempts}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if !j.RunAt.Equal(clock.Now()) || !j.CreatedAt.Equal(clock.Now()) {
		t.Errorf("run_at %v, created_at %v; want both now (%v)", j.RunAt, j.CreatedAt, clock.Now())
	}
	if string(j.Payload) != `{"n":1}` {
		t.Errorf("payload %s, want it as given", j.Payload)
	}
	if stored := get(t, e, j.ID); stored.Version != 1 || string(stored.Payload) != `{"n":1}` {
		t.Errorf("stored job %+v differs from the submitted one", stored)
	}
}

func TestJobIDsSortByCreationTime(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	var prev string
	for range 5 {
		j := submit(t, e, jobs.SubmitRequest{})
		if j.ID <= prev {
			t.Fatalf("id %s does not sort after %s", j.ID, prev)
		}
		prev = j.ID
		clock.Advance(time.Millisecond)
	}
}

func TestSubmitWithHoldIsPendingUntilStarted(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := submit(t, e, jobs.SubmitRequest{Kind: "k", Hold: true})
	if j.State != jobtype.Pending {
		t.Fatalf("state %s, want pending", j.State)
	}
	if _, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now()); !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("claim of a held job: %v, want ErrNoJob", err)
	}
	started, err := e.Start(ctx, j.ID)
	if err != nil || started.State != jobtype.Queued || started.Version != 2 {
		t.Fatalf("start: %+v, %v; want queued at version 2", started, err)
	}
	again, err := e.Start(ctx, j.ID)
	if err != nil || again.Version != 2 {
		t.Fatalf("second start: %+v, %v; want the job unchanged", again, err)
	}
	claimed, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, soon())
	if err != nil || claimed.ID != j.ID {
		t.Fatalf("claim after start: %+v, %v", claimed, err)
	}
	if again, err := e.Start(ctx, j.ID); err != nil || again.State != jobtype.Running {
		t.Fatalf("start of a running job: %+v, %v; want it unchanged", again, err)
	}
}

func TestStartOfAnEndedJobIsAStateError(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Hold: true})
	if _, err := e.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	_, err := e.Start(context.Background(), j.ID)
	var se *jobs.StateError
	if !errors.As(err, &se) || se.State != jobtype.Cancelled || se.Op != "start" {
		t.Fatalf("got %v, want a StateError for a cancelled job", err)
	}
}

func TestUniqueKeyIsHeldOnlyByActiveJobs(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	first := submit(t, e, jobs.SubmitRequest{Kind: "k", UniqueKey: "nightly"})

	_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", UniqueKey: "nightly"})
	var conflict *jobtype.ConflictError
	if !errors.As(err, &conflict) || conflict.ActiveID != first.ID {
		t.Fatalf("second submit: %v, want a ConflictError naming %s", err, first.ID)
	}
	if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Tenant: "other", UniqueKey: "nightly"}); err != nil {
		t.Fatalf("another tenant's job with the same key: %v", err)
	}
	if _, err := e.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", UniqueKey: "nightly"}); err != nil {
		t.Fatalf("submit after the holder ended: %v", err)
	}
}

func TestCancel(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(t *testing.T, e *jobs.Engine) jobtype.Job
		want    jobtype.State
		wantErr bool
	}{
		{"a pending job is cancelled", func(t *testing.T, e *jobs.Engine) jobtype.Job {
			return submit(t, e, jobs.SubmitRequest{Hold: true})
		}, jobtype.Cancelled, false},
		{"a queued job is cancelled", func(t *testing.T, e *jobs.Engine) jobtype.Job {
			return submit(t, e, jobs.SubmitRequest{})
		}, jobtype.Cancelled, false},
		{"a running job is cancelled", func(t *testing.T, e *jobs.Engine) jobtype.Job {
			return running(t, e, jobs.SubmitRequest{})
		}, jobtype.Cancelled, false},
		{"a cancelled job is returned unchanged", func(t *testing.T, e *jobs.Engine) jobtype.Job {
			j := submit(t, e, jobs.SubmitRequest{})
			j, _ = e.Cancel(ctx, j.ID)
			return j
		}, jobtype.Cancelled, false},
		{"a succeeded job is refused", func(t *testing.T, e *jobs.Engine) jobtype.Job {
			j := running(t, e, jobs.SubmitRequest{})
			j, _ = e.Complete(ctx, j.ID, j.LeaseID, nil)
			return j
		}, jobtype.Succeeded, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			e, _ := newEngine(t, jobs.Config{Now: clock.Now})
			before := tt.prepare(t, e)
			clock.Advance(time.Second)
			j, err := e.Cancel(ctx, before.ID)
			var se *jobs.StateError
			if tt.wantErr != errors.As(err, &se) || (!tt.wantErr && err != nil) {
				t.Fatalf("cancel: %v, want a StateError: %v", err, tt.wantErr)
			}
			after := get(t, e, before.ID)
			if after.State != tt.want {
				t.Fatalf("state %s, want %s", after.State, tt.want)
			}
			if before.State.Terminal() {
				if after.Version != before.Version || (err == nil && j.Version != before.Version) {
					t.Errorf("an ended job changed: version %d → %d", before.Version, after.Version)
				}
				return
			}
			if after.Version != before.Version+1 || !after.FinishedAt.Equal(clock.Now()) {
				t.Errorf("version %d → %d, finished_at %v; want one version up, finished now", before.Version, after.Version, after.FinishedAt)
			}
		})
	}
}

func TestUnknownAndMalformedIDs(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	calls := map[string]func(id string) error{
		"get":    func(id string) error { _, err := e.Get(ctx, id); return err },
		"start":  func(id string) error { _, err := e.Start(ctx, id); return err },
		"cancel": func(id string) error { _, err := e.Cancel(ctx, id); return err },
		"wait":   func(id string) error { _, err := e.Wait(ctx, id, soon()); return err },
		"watch": func(id string) error {
			return e.Watch(ctx, id, jobs.WatchOptions{Send: func(*jobs.Snapshot) error { return nil }})
		},
		"heartbeat": func(id string) error { _, err := e.Heartbeat(ctx, id, "l_x", 1, ""); return err },
		"complete":  func(id string) error { _, err := e.Complete(ctx, id, "l_x", nil); return err },
		"fail":      func(id string) error { _, err := e.Fail(ctx, id, "l_x", jobtype.JobError{}, false); return err },
	}
	for name, call := range calls {
		t.Run(name+" of an unknown job is ErrNotFound", func(t *testing.T) {
			if err := call("j_nosuchjob"); !errors.Is(err, jobtype.ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		})
		t.Run(name+" of an empty or malformed id names job_id", func(t *testing.T) {
			for _, id := range []string{"", "j x", strings.Repeat("j", 129)} {
				if err := call(id); !isInvalid(err, "job_id") {
					t.Fatalf("id %q: got %v, want an InvalidError for job_id", id, err)
				}
			}
		})
	}
}

func TestListIsNewestFirstInPages(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	var ids []string
	for range 60 {
		ids = append(ids, submit(t, e, jobs.SubmitRequest{}).ID)
		clock.Advance(time.Millisecond)
	}
	ctx := context.Background()
	page, next, err := e.List(ctx, jobs.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != jobs.DefaultPageSize || next == "" {
		t.Fatalf("first page: %d jobs, next %q; want %d and a token", len(page), next, jobs.DefaultPageSize)
	}
	if page[0].ID != ids[59] {
		t.Errorf("first job %s, want the newest %s", page[0].ID, ids[59])
	}
	rest, next, err := e.List(ctx, jobs.ListRequest{PageToken: next, Limit: 1000})
	if err != nil || len(rest) != 10 || next != "" {
		t.Fatalf("second page: %d jobs, next %q, %v; want the last 10", len(rest), next, err)
	}
	if rest[9].ID != ids[0] {
		t.Errorf("last job %s, want the oldest %s", rest[9].ID, ids[0])
	}
	if _, _, err := e.List(ctx, jobs.ListRequest{Limit: -1}); !isInvalid(err, "page_size") {
		t.Errorf("negative page size: %v", err)
	}
}

func TestCountByStateCountsEveryJobOnce(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	submit(t, e, jobs.SubmitRequest{Hold: true})
	submit(t, e, jobs.SubmitRequest{})
	submit(t, e, jobs.SubmitRequest{})
	running(t, e, jobs.SubmitRequest{})
	counts, err := e.CountByState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[jobtype.State]int64{jobtype.Pending: 1, jobtype.Queued: 2, jobtype.Running: 1}
	for s, n := range want {
		if counts[s] != n {
			t.Errorf("%s: %d, want %d (all: %v)", s, counts[s], n, counts)
		}
	}
}

// A WAITING job is not started by Start: it is queued once the jobs it
// runs after have succeeded (or ended, with RUN), and Start says so
// rather than answer with the job unchanged, as if it had started.
func TestStartOfAWaitingJobIsAStateError(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	parent := submit(t, e, jobs.SubmitRequest{Kind: "k"})
	child := submit(t, e, jobs.SubmitRequest{Kind: "k", After: []string{parent.ID}})
	if child.State != jobtype.Waiting {
		t.Fatalf("child is %s, want WAITING", child.State)
	}
	_, err := e.Start(context.Background(), child.ID)
	var se *jobs.StateError
	if !errors.As(err, &se) || se.State != jobtype.Waiting || !strings.Contains(err.Error(), "once the jobs it runs after have all succeeded, and cancelled if one does not") {
		t.Fatalf("got %v, want a StateError saying the job is queued once its dependencies succeed", err)
	}
}
