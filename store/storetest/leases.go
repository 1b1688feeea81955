package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// leaseCases hold ClaimJobs and WriteLeases to their doc comments: a
// batch claim takes what as many claims in a row would take, and every
// lease write makes the job exactly what store.LeaseWrite.Apply makes it.
var leaseCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a batch claim takes the first ready jobs in claim order, each running under its own lease", testClaimJobsCommits},
	{"a batch claim honours the tenants, kinds and queues filters", testClaimJobsFilters},
	{"a batch claim takes no more of a queue or a pool than its rules leave room for", testClaimJobsLimits},
	{"a batch claim takes what as many single claims in a row would take", testClaimJobsLikeSingleClaims},
	{"concurrent batch claims never hand out one job twice", testClaimJobsConcurrent},
	{"concurrent batch claims never take a queue or a pool past its limit", testClaimJobsLimitsConcurrent},

	{"each lease write makes the job exactly what LeaseWrite.Apply makes it", testWriteLeasesApply},
	{"a lease write whose lease does not hold changes nothing and returns the job as it is", testWriteLeasesStale},
	{"a lease write to an unknown job reports ErrNotFound and fails nothing else", testWriteLeasesUnknown},
	{"a batch of mixed lease writes returns each result in the order written", testWriteLeasesMixed},
	{"a batch of 200 completions commits every one", testWriteLeasesManyCompletions},
	{"two writes to one job in a batch apply in order", testWriteLeasesSameJobTwice},
	{"an empty batch of lease writes writes nothing and returns no results", testWriteLeasesEmpty},
	{"a batch of lease writes run again holds only its heartbeats, which set what they set", testWriteLeasesRetried},
	{"a batch of lease writes with a cancelled context commits none of them", testWriteLeasesCancelledContext},
	{"concurrent batches of lease writes each commit alone", testWriteLeasesConcurrent},
	{"a cancel racing a completion: exactly one of them takes effect", testWriteLeasesCancelRace},
	{"every job a batch claim takes is heard by a listener", testClaimJobsHeard},
	{"a lease write that raises a version is heard by a listener, one not held is not", testWriteLeasesHeard},
	{"a lease write that ends a schedule's run records its end", testWriteLeasesEndScheduleRun},
}

// --- helpers ---

func leaseIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// batchClaim is a claim of up to n jobs by worker-1, with a lease of a
// minute, under leases named prefix-0, prefix-1, ...
func batchClaim(prefix string, n int) store.Claim {
	return store.Claim{WorkerID: "worker-1", LeaseIDs: leaseIDs(prefix, n), Now: at(100), Lease: time.Minute}
}

// claimJobs returns what ClaimJobs claimed, or nil for ErrNoJob, after
// checking that the i-th claimed job holds the i-th lease.
func claimJobs(t *testing.T, s store.Store, f store.ClaimFilter, c store.Claim) []store.Claimed {
	t.Helper()
	got, err := s.ClaimJobs(t.Context(), f, c)
	if errors.Is(err, jobtype.ErrNoJob) {
		if len(got) > 0 {
			t.Errorf("ClaimJobs returned ErrNoJob with %d jobs", len(got))
		}
		return nil
	}
	if err != nil {
		t.Fatalf("claim jobs: %v", err)
	}
	if len(got) == 0 {
		t.Fatalf("ClaimJobs claimed nothing without ErrNoJob")
	}
	if len(got) > len(c.LeaseIDs) {
		t.Fatalf("ClaimJobs claimed %d jobs with %d leases", len(got), len(c.LeaseIDs))
	}
	for i, cl := range got {
		if cl.Job.LeaseID != c.LeaseIDs[i] {
			t.Errorf("claimed job %d (%s) holds lease %q, want %q", i, cl.Job.ID, cl.Job.LeaseID, c.LeaseIDs[i])
		}
	}
	return got
}

func claimedIDs(cs []store.Claimed) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Job.ID
	}
	return out
}

// running is a RUNNING job of queue under lease "lease-"+id in its
// second of three attempts, 30 % done, with the error of its first.
func running(id, queue string, sec int) jobtype.Job {
	j := newJob(id, at(sec))
	j.Queue, j.State = queue, jobtype.Running
	j.Attempt, j.MaxAttempts = 2, 3
	j.Percent, j.Step = 30, "batch 3 of 10"
	j.Payload = json.RawMessage(`{"n":1}`)
	j.Error = &jobtype.JobError{Type: "Timeout", Message: "attempt 1 took too long"}
	j.StartedAt, j.UpdatedAt = at(sec+1), at(sec+2)
	j.WorkerID, j.LeaseID, j.LeaseExpiresAt = "worker-1", "lease-"+id, at(sec+32)
	return j
}

// leaseRules: a lease of 30 s, 10 min in queue slow; a backoff of 1 s
// up to a minute, 10 s up to an hour in queue patient.
var leaseRules = store.LeaseRules{
	Now:      at(300),
	Lease:    30 * time.Second,
	Leases:   map[string]time.Duration{"slow": 10 * time.Minute},
	Backoff:  store.Backoff{Initial: time.Second, Max: time.Minute},
	Backoffs: map[string]store.Backoff{"patient": {Initial: 10 * time.Second, Max: time.Hour}},
}

var boom = &jobtype.JobError{Type: "Boom", Message: "it broke"}

func heartbeat(j jobtype.Job, percent int32, step string) store.LeaseWrite {
	return store.LeaseWrite{Op: store.Heartbeat, JobID: j.ID, LeaseID: j.LeaseID, Percent: percent, Step: step}
}

func complete(j jobtype.Job, result string) store.LeaseWrite {
	w := store.LeaseWrite{Op: store.Complete, JobID: j.ID, LeaseID: j.LeaseID}
	if result != "" {
		w.Result = json.RawMessage(result)
	}
	return w
}

func fail(j jobtype.Job, retry bool, jitter float64) store.LeaseWrite {
	return store.LeaseWrite{Op: store.Fail, JobID: j.ID, LeaseID: j.LeaseID, Error: boom, Retry: retry, Jitter: jitter}
}

// applied is what w makes before under r, as the store must commit it:
// LeaseWrite.Apply, and the version up by one on a visible change.
func applied(before jobtype.Job, w store.LeaseWrite, r store.LeaseRules) (jobtype.Job, bool) {
	want := before.Clone()
	held := w.Apply(&want, r)
	if held && !want.SameVisible(&before) {
		want.Version++
	}
	return want, held
}

// writeLeases runs ws under r and checks each result and every job
// written against a model that applies ws one after another with
// LeaseWrite.Apply. It returns the results.
func writeLeases(t *testing.T, s store.Store, ws []store.LeaseWrite, r store.LeaseRules) []store.LeaseResult {
	t.Helper()
	model := map[string]jobtype.Job{}
	for _, w := range ws {
		if _, ok := model[w.JobID]; ok {
			continue
		}
		j, err := s.GetJob(t.Context(), w.JobID)
		if errors.Is(err, jobtype.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get %s: %v", w.JobID, err)
		}
		model[w.JobID] = j
	}
	got, err := s.WriteLeases(t.Context(), ws, r)
	if err != nil {
		t.Fatalf("write leases: %v", err)
	}
	if len(got) != len(ws) {
		t.Fatalf("WriteLeases returned %d results for %d writes", len(got), len(ws))
	}
	for i, w := range ws {
		what := fmt.Sprintf("write %d (%s of %s under %q)", i, opName(w.Op), w.JobID, w.LeaseID)
		before, exists := model[w.JobID]
		if !exists {
			if !errors.Is(got[i].Err, jobtype.ErrNotFound) || got[i].Held {
				t.Errorf("%s to an unknown job: held %v, err %v; want not held, ErrNotFound", what, got[i].Held, got[i].Err)
			}
			sameJob(t, what+": the job of a result with an error", got[i].Job, jobtype.Job{})
			continue
		}
		want, held := applied(before, w, r)
		if got[i].Err != nil || got[i].Held != held {
			t.Errorf("%s: held %v, err %v; want held %v, no error", what, got[i].Held, got[i].Err, held)
		}
		if held {
			startFromStore(t, what, &want, got[i].Job)
			model[w.JobID] = want
			sameJob(t, what+": the job it committed", got[i].Job, want)
		} else {
			sameJob(t, what+": the job as it is, unchanged", got[i].Job, before)
		}
	}
	for id, want := range model {
		sameJob(t, id+" as stored after the batch", get(t, s, id), want)
	}
	return got
}

func opName(op store.LeaseOp) string {
	switch op {
	case store.Heartbeat:
		return "heartbeat"
	case store.Complete:
		return "complete"
	case store.Fail:
		return "fail"
	}
	return fmt.Sprintf("op %d", op)
}

// --- ClaimJobs ---

func testClaimJobsCommits(t *testing.T, s store.Store) {
	fixture := []struct {
		id    string
		queue string
		state jobtype.State
		runAt time.Time
	}{
		{"a", "default", jobtype.Queued, at(5)},
		{"b", "slow", jobtype.Queued, at(1)},
		{"c", "default", jobtype.Queued, at(3)},
		{"d", "default", jobtype.Queued, at(1)},
		{"e", "default", jobtype.Queued, time.Time{}},
		{"later", "default", jobtype.Queued, at(500)},
		{"held", "default", jobtype.Pending, at(0)},
		{"busy", "default", jobtype.Running, at(0)},
		{"done", "default", jobtype.Succeeded, at(0)},
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.Queue, j.State, j.RunAt, j.Attempt = f.queue, f.state, f.runAt, 0
		if f.id == "c" { // a retry: attempted before, queued again later
			j.Attempt, j.StartedAt, j.UpdatedAt = 1, at(20), at(40)
			j.Error = &jobtype.JobError{Type: "Boom"}
		}
		create(t, s, j)
	}
	claim := store.Claim{WorkerID: "worker-7", Now: at(100), Lease: 30 * time.Second,
		Leases: map[string]time.Duration{"slow": 5 * time.Minute}}
	f := store.ClaimFilter{Now: at(100)}

	steps := []struct {
		name string
		ask  int
		now  time.Time
		want []string
	}{
		{"asked for three of five ready, it takes the first three by RunAt, then creation", 3, at(100), []string{"e", "b", "d"}},
		{"asked for ten of two ready, it takes the two", 10, at(100), []string{"c", "a"}},
		{"with none ready it takes nothing", 10, at(100), nil},
		{"a job whose RunAt is still in the future waits for it", 10, at(499), nil},
		{"a job is taken once its RunAt comes", 10, at(500), []string{"later"}},
	}
	for si, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := map[string]jobtype.Job{}
			for _, fx := range fixture {
				before[fx.id] = get(t, s, fx.id)
			}
			c := claim
			c.LeaseIDs, c.Now = leaseIDs(fmt.Sprintf("lease-%d", si), st.ask), st.now
			f.Now = st.now
			got := claimJobs(t, s, f, c)
			if !slices.Equal(claimedIDs(got), st.want) {
				t.Fatalf("claimed %v, want %v", claimedIDs(got), st.want)
			}
			for i, cl := range got {
				old := before[cl.Job.ID]
				want := old
				one := c
				one.LeaseID = c.LeaseIDs[i]
				one.Apply(&want)
				want.Version++
				sameJob(t, "claimed "+cl.Job.ID, cl.Job, want)
				sameJob(t, "stored "+cl.Job.ID, get(t, s, cl.Job.ID), want)
				if !cl.QueuedAt.Equal(old.UpdatedAt) {
					t.Errorf("%s: QueuedAt %v, want its UpdatedAt before the claim, %v", cl.Job.ID, cl.QueuedAt, old.UpdatedAt)
				}
			}
			claimedNow := map[string]bool{}
			for _, id := range st.want {
				claimedNow[id] = true
			}
			for id, old := range before {
				if !claimedNow[id] {
					sameJob(t, id+", not claimed", get(t, s, id), old)
				}
			}
		})
	}
	// Spelled out once, beside Claim.Apply: b, in queue slow, first
	// claimed by the first batch, as its second job.
	b := get(t, s, "b")
	if b.State != jobtype.Running || b.Attempt != 1 || b.WorkerID != "worker-7" || b.LeaseID != "lease-0-1" ||
		!b.LeaseExpiresAt.Equal(at(100).Add(5*time.Minute)) || !b.StartedAt.Equal(at(100)) || b.Version != 2 {
		t.Errorf("b after its claim: %s, attempt %d, worker %q, lease %q until %v, started %v, version %d; "+
			"want running, 1, worker-7, lease-0-1 until %v, started %v, version 2",
			b.State, b.Attempt, b.WorkerID, b.LeaseID, b.LeaseExpiresAt, b.StartedAt, b.Version, at(100).Add(5*time.Minute), at(100))
	}
	if c := get(t, s, "c"); !c.StartedAt.Equal(at(20)) || c.Attempt != 2 {
		t.Errorf("c, a retry, after its claim: started %v, attempt %d; want its first start %v kept, attempt 2", c.StartedAt, c.Attempt, at(20))
	}
}

func testClaimJobsFilters(t *testing.T, s store.Store) {
	fixture := []struct{ id, tenant, kind, queue string }{
		{"a", "acme", "email", "default"},
		{"b", "globex", "report", "default"},
		{"c", "acme", "report", "bulk"},
		{"d", "initech", "email", "bulk"},
		{"e", "globex", "email", "default"},
		{"f", "acme", "resize", "bulk"},
	}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		want   []string
	}{
		{"no filter takes every job", store.ClaimFilter{}, []string{"a", "b", "c", "d", "e", "f"}},
		{"one tenant", store.ClaimFilter{Tenants: []string{"acme"}}, []string{"a", "c", "f"}},
		{"two kinds", store.ClaimFilter{Kinds: []string{"report", "resize"}}, []string{"b", "c", "f"}},
		{"one queue", store.ClaimFilter{Queues: []string{"bulk"}}, []string{"c", "d", "f"}},
		{"a tenant, a kind and a queue", store.ClaimFilter{Tenants: []string{"acme", "globex"}, Kinds: []string{"email"}, Queues: []string{"default"}}, []string{"a", "e"}},
		{"a kind nobody submitted", store.ClaimFilter{Kinds: []string{"fax"}}, nil},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own queues, so nothing of an earlier
			// case can match.
			prefix := fmt.Sprintf("t%d-", ti)
			for i, f := range fixture {
				j := newJob(prefix+f.id, at(i))
				j.Tenant, j.Kind, j.Queue = f.tenant, f.kind, prefix+f.queue
				create(t, s, j)
			}
			tc.filter.Now = at(100)
			if len(tc.filter.Queues) == 0 {
				tc.filter.Queues = []string{prefix + "default", prefix + "bulk"}
			} else {
				for i, q := range tc.filter.Queues {
					tc.filter.Queues[i] = prefix + q
				}
			}
			got := claimJobs(t, s, tc.filter, batchClaim(prefix+"lease", 10))
			var ids []string
			for _, id := range claimedIDs(got) {
				ids = append(ids, strings.TrimPrefix(id, prefix))
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("claimed %v, want %v", ids, tc.want)
			}
		})
	}
}

// limitJob is one job of a limits fixture.
type limitJob struct {
	id, queue string
	state     jobtype.State // "" is QUEUED
	kind      string        // "" is email
	attempt   int32
	runAt     int
}

// createLimitJobs creates jobs with ids, queues and tenant prefixed by
// prefix, in the order given (which is their creation order).
func createLimitJobs(t *testing.T, s store.Store, prefix string, jobs []limitJob) {
	t.Helper()
	for i, lj := range jobs {
		j := newJob(prefix+lj.id, at(i))
		j.Tenant, j.Queue, j.Attempt, j.RunAt = prefix, prefix+lj.queue, lj.attempt, at(lj.runAt)
		if lj.state != "" {
			j.State = lj.state
		}
		if lj.state == jobtype.Running {
			j.LeaseID, j.LeaseExpiresAt = "lease-"+lj.id, at(1000)
		}
		if lj.kind != "" {
			j.Kind = lj.kind
		}
		create(t, s, j)
	}
}

// prefixed returns limits and pools with queue and pool names prefixed.
func prefixed(prefix string, limits map[string]store.QueueLimit, pools map[string]int) (map[string]store.QueueLimit, map[string]int) {
	ls := map[string]store.QueueLimit{}
	for q, l := range limits {
		l.Pools = slices.Clone(l.Pools)
		for i := range l.Pools {
			l.Pools[i] = prefix + l.Pools[i]
		}
		ls[prefix+q] = l
	}
	ps := map[string]int{}
	for p, n := range pools {
		ps[prefix+p] = n
	}
	return ls, ps
}

func testClaimJobsLimits(t *testing.T, s store.Store) {
	serial := store.QueueLimit{MaxRunning: 1, Serial: true}
	holding := store.QueueLimit{MaxRunning: 1, Serial: true, HoldRetry: true}
	tests := []struct {
		name   string
		limits map[string]store.QueueLimit
		pools  map[string]int
		jobs   []limitJob
		kinds  []string
		ask    int
		want   []string
	}{
		{
			name:   "a serial queue yields only its head even when asked for ten",
			limits: map[string]store.QueueLimit{"index": serial},
			jobs:   []limitJob{{id: "i1", queue: "index", runAt: 5}, {id: "i2", queue: "index", runAt: 1}, {id: "i3", queue: "index", runAt: 3}},
			want:   []string{"i2"},
		},
		{
			name:   "a serial queue yields its head and other queues fill the rest of the batch in claim order",
			limits: map[string]store.QueueLimit{"index": serial},
			jobs: []limitJob{
				{id: "i1", queue: "index", runAt: 5}, {id: "i2", queue: "index", runAt: 1}, {id: "i3", queue: "index", runAt: 3},
				{id: "d1", queue: "default", runAt: 2}, {id: "d2", queue: "default", runAt: 4}, {id: "d3", queue: "default", runAt: 6},
			},
			want: []string{"i2", "d1", "d2", "d3"},
		},
		{
			name:   "a serial queue with a job running yields nothing",
			limits: map[string]store.QueueLimit{"index": serial},
			jobs:   []limitJob{{id: "r", queue: "index", state: jobtype.Running}, {id: "i1", queue: "index", runAt: 1}, {id: "i2", queue: "index", runAt: 2}},
			want:   nil,
		},
		{
			name:   "a serial queue whose head is of another kind yields nothing to this worker",
			limits: map[string]store.QueueLimit{"index": serial},
			jobs: []limitJob{
				{id: "head", queue: "index", kind: "report", runAt: 0}, {id: "i1", queue: "index", runAt: 1},
				{id: "d1", queue: "default", runAt: 2},
			},
			kinds: []string{"email"},
			want:  []string{"d1"},
		},
		{
			name:   "a serial queue that holds retries waits behind its head backing off",
			limits: map[string]store.QueueLimit{"block": holding},
			jobs: []limitJob{
				{id: "head", queue: "block", attempt: 1, runAt: 60},
				{id: "b2", queue: "block", runAt: 1}, {id: "b3", queue: "block", runAt: 2},
			},
			want: nil,
		},
		{
			name:   "a serial queue that holds retries yields its head once it is due",
			limits: map[string]store.QueueLimit{"block": holding},
			jobs: []limitJob{
				{id: "b2", queue: "block", runAt: 1}, {id: "head", queue: "block", attempt: 1, runAt: 50},
				{id: "b3", queue: "block", runAt: 2},
			},
			want: []string{"head"},
		},
		{
			name:   "a serial queue that skips moves on past its head backing off, and yields one job",
			limits: map[string]store.QueueLimit{"skip": serial},
			jobs: []limitJob{
				{id: "head", queue: "skip", attempt: 1, runAt: 60},
				{id: "s2", queue: "skip", runAt: 1}, {id: "s3", queue: "skip", runAt: 2},
			},
			want: []string{"s2"},
		},
		{
			name:   "max_running 3 with one running yields at most two",
			limits: map[string]store.QueueLimit{"readme": {MaxRunning: 3}},
			jobs: []limitJob{
				{id: "r", queue: "readme", state: jobtype.Running},
				{id: "j1", queue: "readme", runAt: 1}, {id: "j2", queue: "readme", runAt: 2}, {id: "j3", queue: "readme", runAt: 3},
				{id: "j4", queue: "readme", runAt: 4},
			},
			want: []string{"j1", "j2"},
		},
		{
			name:   "max_running 3 with three running yields none",
			limits: map[string]store.QueueLimit{"readme": {MaxRunning: 3}},
			jobs: []limitJob{
				{id: "r1", queue: "readme", state: jobtype.Running}, {id: "r2", queue: "readme", state: jobtype.Running},
				{id: "r3", queue: "readme", state: jobtype.Running}, {id: "j1", queue: "readme", runAt: 1},
			},
			want: nil,
		},
		{
			name:   "max_running 0 is unbounded",
			limits: map[string]store.QueueLimit{"readme": {}},
			jobs: []limitJob{
				{id: "r", queue: "readme", state: jobtype.Running},
				{id: "j1", queue: "readme", runAt: 1}, {id: "j2", queue: "readme", runAt: 2}, {id: "j3", queue: "readme", runAt: 3},
			},
			want: []string{"j1", "j2", "j3"},
		},
		{
			name: "a pool shared by two queues is never exceeded by one batch",
			limits: map[string]store.QueueLimit{
				"a": {MaxRunning: 2, Pools: []string{"db"}},
				"b": {Pools: []string{"db"}},
			},
			pools: map[string]int{"db": 3},
			jobs: []limitJob{
				{id: "b0", queue: "b", state: jobtype.Running},
				{id: "a1", queue: "a", runAt: 1}, {id: "b1", queue: "b", runAt: 2}, {id: "a2", queue: "a", runAt: 3},
				{id: "b2", queue: "b", runAt: 4}, {id: "free1", queue: "free", runAt: 5},
			},
			want: []string{"a1", "b1", "free1"},
		},
		{
			name: "a queue in two pools needs a unit of each",
			limits: map[string]store.QueueLimit{
				"both":   {Pools: []string{"db", "api"}},
				"dbonly": {Pools: []string{"db"}},
			},
			pools: map[string]int{"db": 2, "api": 1},
			jobs: []limitJob{
				{id: "both1", queue: "both", runAt: 1}, {id: "both2", queue: "both", runAt: 2},
				{id: "db1", queue: "dbonly", runAt: 3}, {id: "db2", queue: "dbonly", runAt: 4},
			},
			want: []string{"both1", "db1"},
		},
		{
			name: "a full queue does not hold back the queues behind it",
			limits: map[string]store.QueueLimit{
				"full": {MaxRunning: 1},
			},
			jobs: []limitJob{
				{id: "r", queue: "full", state: jobtype.Running},
				{id: "f1", queue: "full", runAt: 1}, {id: "f2", queue: "full", runAt: 2},
				{id: "o1", queue: "open", runAt: 3}, {id: "o2", queue: "open", runAt: 4},
			},
			ask:  2,
			want: []string{"o1", "o2"},
		},
		{
			name:   "asked for fewer than are ready, a batch takes the first in claim order across queues",
			limits: map[string]store.QueueLimit{"bounded": {MaxRunning: 2}},
			jobs: []limitJob{
				{id: "x1", queue: "bounded", runAt: 1}, {id: "y1", queue: "open", runAt: 2}, {id: "x2", queue: "bounded", runAt: 3},
				{id: "x3", queue: "bounded", runAt: 4}, {id: "y2", queue: "open", runAt: 5}, {id: "y3", queue: "open", runAt: 6},
			},
			ask:  4,
			want: []string{"x1", "y1", "x2", "y2"},
		},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("t%d-", ti)
			createLimitJobs(t, s, prefix, tc.jobs)
			limits, pools := prefixed(prefix, tc.limits, tc.pools)
			f := store.ClaimFilter{Tenants: []string{prefix}, Kinds: tc.kinds, Now: at(55), Limits: limits, Pools: pools}
			ask := tc.ask
			if ask == 0 {
				ask = 10
			}
			got := claimJobs(t, s, f, batchClaim(prefix+"lease", ask))
			var ids []string
			for _, id := range claimedIDs(got) {
				ids = append(ids, strings.TrimPrefix(id, prefix))
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("claimed %v, want %v", ids, tc.want)
			}
		})
	}
}

// testClaimJobsLikeSingleClaims makes random fixtures under every kind
// of rule, twice over in queues and pools of their own, and compares a
// batch claim of n jobs from the one with n claims in a row from the
// other.
func testClaimJobsLikeSingleClaims(t *testing.T, s store.Store) {
	limits := map[string]store.QueueLimit{
		"serial":  {MaxRunning: 1, Serial: true},
		"holding": {MaxRunning: 1, Serial: true, HoldRetry: true},
		"bounded": {MaxRunning: 3},
		"pooled":  {MaxRunning: 2, Pools: []string{"db"}},
		"shared":  {Pools: []string{"db", "api"}},
		"api":     {Pools: []string{"api"}},
	}
	pools := map[string]int{"db": 3, "api": 2}
	queues := []string{"serial", "holding", "bounded", "pooled", "shared", "api", "free"}
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 17))
			var jobs []limitJob
			for i := range 40 {
				lj := limitJob{id: fmt.Sprintf("j%02d", i), queue: queues[r.IntN(len(queues))], runAt: r.IntN(30)}
				switch r.IntN(10) {
				case 0:
					lj.state = jobtype.Running
				case 1:
					lj.state = jobtype.Pending
				case 2:
					lj.attempt, lj.runAt = 1, 40+r.IntN(30) // backing off, due later or not
				}
				if r.IntN(6) == 0 {
					lj.kind = "fax"
				}
				jobs = append(jobs, lj)
			}
			ask := 1 + r.IntN(15)
			filter := func(prefix string) store.ClaimFilter {
				ls, ps := prefixed(prefix, limits, pools)
				return store.ClaimFilter{Tenants: []string{prefix}, Kinds: []string{"email", "report"}, Now: at(55), Limits: ls, Pools: ps}
			}
			batch, single := fmt.Sprintf("b%d-", seed), fmt.Sprintf("s%d-", seed)
			createLimitJobs(t, s, batch, jobs)
			createLimitJobs(t, s, single, jobs)

			var gotBatch []string
			for _, id := range claimedIDs(claimJobs(t, s, filter(batch), batchClaim(batch+"lease", ask))) {
				gotBatch = append(gotBatch, strings.TrimPrefix(id, batch))
			}
			var gotSingle []string
			for range ask {
				j, _, err := store.ClaimOne(t.Context(), s, filter(single), toRunning)
				if errors.Is(err, jobtype.ErrNoJob) {
					break
				}
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
				gotSingle = append(gotSingle, strings.TrimPrefix(j.ID, single))
			}
			if !slices.Equal(gotBatch, gotSingle) {
				t.Errorf("a batch claim of %d took %v; %d single claims took %v", ask, gotBatch, ask, gotSingle)
			}
		})
	}
}

// inClaimOrder reports whether the jobs of one batch come in claim order
// (RunAt, then creation, which here is the order of their numbers).
func inClaimOrder(cs []store.Claimed, seq func(id string) int) bool {
	return slices.IsSortedFunc(cs, func(a, b store.Claimed) int {
		if c := a.Job.RunAt.Compare(b.Job.RunAt); c != 0 {
			return c
		}
		return seq(a.Job.ID) - seq(b.Job.ID)
	})
}

func testClaimJobsConcurrent(t *testing.T, s store.Store) {
	const jobs, claimers, batch = 500, 8, 10
	for i := range jobs {
		create(t, s, newJob(fmt.Sprintf("job-%03d", i), at(i%7)))
	}
	seq := func(id string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "job-"))
		return n
	}
	type took struct {
		lease string
		by    int
	}
	var (
		mu    sync.Mutex
		taken = map[string]took{}
		wg    sync.WaitGroup
	)
	for w := range claimers {
		wg.Go(func() {
			for b := range jobs + 1 { // a store that hands out jobs forever must not hang the suite
				c := batchClaim(fmt.Sprintf("w%d-b%d", w, b), batch)
				got, err := s.ClaimJobs(t.Context(), store.ClaimFilter{Now: at(100)}, c)
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					t.Errorf("claimer %d: claim jobs: %v", w, err)
					return
				}
				if len(got) == 0 || len(got) > batch {
					t.Errorf("claimer %d: a batch of %d jobs, want 1 to %d", w, len(got), batch)
					return
				}
				if !inClaimOrder(got, seq) {
					t.Errorf("claimer %d: batch %v is not in claim order", w, claimedIDs(got))
				}
				mu.Lock()
				for i, cl := range got {
					if prev, dup := taken[cl.Job.ID]; dup {
						t.Errorf("%s claimed by claimer %d and claimer %d", cl.Job.ID, prev.by, w)
					}
					taken[cl.Job.ID] = took{c.LeaseIDs[i], w}
					if cl.Job.State != jobtype.Running || cl.Job.LeaseID != c.LeaseIDs[i] || cl.Job.Version != 2 {
						t.Errorf("%s claimed as %s under %q at version %d, want running under %q at 2",
							cl.Job.ID, cl.Job.State, cl.Job.LeaseID, cl.Job.Version, c.LeaseIDs[i])
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(taken) != jobs {
		t.Errorf("%d distinct jobs claimed, want %d", len(taken), jobs)
	}
	all, _ := list(t, s, store.ListFilter{Limit: 2 * jobs})
	for _, j := range all {
		if tk, ok := taken[j.ID]; ok && (j.LeaseID != tk.lease || j.State != jobtype.Running || j.Version != 2) {
			t.Errorf("%s stored as %s under %q at version %d, want running under %q, the lease of the claim that returned it, at 2",
				j.ID, j.State, j.LeaseID, j.Version, tk.lease)
		}
	}
}

func testClaimJobsLimitsConcurrent(t *testing.T, s store.Store) {
	const perQueue, claimers, batch = 40, 8, 10
	for i := range perQueue {
		for _, q := range []string{"serial", "bounded", "pooled", "free"} {
			create(t, s, fresh(fmt.Sprintf("%s-%02d", q, i), q, i))
		}
	}
	const total = 4 * perQueue
	f := store.ClaimFilter{
		Now: at(100),
		Limits: map[string]store.QueueLimit{
			"serial":  {MaxRunning: 1, Serial: true, Pools: []string{"db"}},
			"bounded": {MaxRunning: 4},
			"pooled":  {Pools: []string{"db"}},
		},
		Pools: map[string]int{"db": 5},
	}
	var (
		claimed atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		serial  []string // the serial queue's jobs, in the order claimed
	)
	for w := range claimers {
		wg.Go(func() {
			for b := range total * 20 {
				if claimed.Load() == total {
					return
				}
				c := batchClaim(fmt.Sprintf("w%d-b%d", w, b), batch)
				got, err := s.ClaimJobs(t.Context(), f, c)
				if errors.Is(err, jobtype.ErrNoJob) {
					continue
				}
				if err != nil {
					t.Errorf("claimer %d: claim jobs: %v", w, err)
					return
				}
				claimed.Add(int64(len(got)))
				// Right after the claim, one snapshot of the RUNNING jobs:
				// none may ever hold more than the rules allow.
				running, _, err := s.ListJobs(t.Context(), store.ListFilter{States: []jobtype.State{jobtype.Running}, Limit: 1000})
				if err != nil {
					t.Errorf("claimer %d: list running: %v", w, err)
					return
				}
				perQ, pool := map[string]int{}, 0
				for _, r := range running {
					perQ[r.Queue]++
					if r.Queue == "serial" || r.Queue == "pooled" {
						pool++
					}
				}
				if perQ["serial"] > 1 || perQ["bounded"] > 4 || pool > 5 {
					t.Errorf("after claiming %v: running %v, pool db %d; want serial ≤ 1, bounded ≤ 4, db ≤ 5",
						claimedIDs(got), perQ, pool)
				}
				ws := make([]store.LeaseWrite, len(got))
				for i, cl := range got {
					if cl.Job.Queue == "serial" {
						mu.Lock()
						serial = append(serial, cl.Job.ID)
						mu.Unlock()
					}
					ws[i] = complete(cl.Job, `{"ok":true}`)
				}
				res, err := s.WriteLeases(t.Context(), ws, leaseRules)
				if err != nil {
					t.Errorf("claimer %d: complete: %v", w, err)
					return
				}
				for i, r := range res {
					if !r.Held || r.Err != nil || r.Job.State != jobtype.Succeeded {
						t.Errorf("claimer %d: completing %s: held %v, err %v, state %s; want held, succeeded",
							w, ws[i].JobID, r.Held, r.Err, r.Job.State)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := claimed.Load(); n != total {
		t.Errorf("%d jobs claimed, want %d", n, total)
	}
	if !slices.IsSorted(serial) {
		t.Errorf("the serial queue's jobs ran in the order %v, want their RunAt order", serial)
	}
}

func testClaimJobsHeard(t *testing.T, s store.Store) {
	for i := range 4 {
		create(t, s, newJob(fmt.Sprintf("job-%d", i), at(i)))
	}
	h := listen(t, s)
	got := claimJobs(t, s, store.ClaimFilter{Now: at(100)}, batchClaim("lease", 3))
	if len(got) != 3 {
		t.Fatalf("claimed %v, want 3 jobs", claimedIDs(got))
	}
	want := map[string]int64{}
	for _, cl := range got {
		want[cl.Job.ID] = cl.Job.Version
	}
	for _, c := range h.untilAll(t, want) {
		if v, ok := want[c.JobID]; ok && c.Version == v && (c.State != jobtype.Running || !c.Local) {
			t.Errorf("the claim of %s was heard as %+v, want running, local", c.JobID, c)
		}
	}
}

// sharedLeaseCases are run by RunShared: two Stores on one database.
var sharedLeaseCases = []struct {
	name string
	run  func(t *testing.T, a, b store.Store)
}{
	{"batch claims through either store never take a job the other took, and either store completes them", testClaimJobsShared},
}

func testClaimJobsShared(t *testing.T, a, b store.Store) {
	const jobs, claimers, batch = 200, 8, 10
	for i := range jobs {
		create(t, a, newJob(fmt.Sprintf("job-%03d", i), at(i%5)))
	}
	var (
		mu    sync.Mutex
		taken = map[string]int{}
		wg    sync.WaitGroup
	)
	for w := range claimers {
		claimer, completer := []store.Store{a, b}[w%2], []store.Store{b, a}[w%2]
		wg.Go(func() {
			for n := range jobs + 1 {
				got, err := claimer.ClaimJobs(t.Context(), store.ClaimFilter{Now: at(100)}, batchClaim(fmt.Sprintf("w%d-b%d", w, n), batch))
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					t.Errorf("claimer %d: claim jobs: %v", w, err)
					return
				}
				ws := make([]store.LeaseWrite, len(got))
				mu.Lock()
				for i, cl := range got {
					if prev, dup := taken[cl.Job.ID]; dup {
						t.Errorf("%s claimed by claimer %d and claimer %d", cl.Job.ID, prev, w)
					}
					taken[cl.Job.ID] = w
					ws[i] = complete(cl.Job, `1`)
				}
				mu.Unlock()
				res, err := completer.WriteLeases(t.Context(), ws, leaseRules)
				if err != nil {
					t.Errorf("claimer %d: complete through the other store: %v", w, err)
					return
				}
				for i, r := range res {
					if !r.Held || r.Job.State != jobtype.Succeeded {
						t.Errorf("completing %s through the other store: held %v, state %s; want held, succeeded", ws[i].JobID, r.Held, r.Job.State)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(taken) != jobs {
		t.Errorf("%d distinct jobs claimed, want %d", len(taken), jobs)
	}
	counts, err := b.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if counts[jobtype.Succeeded] != jobs {
		t.Errorf("counts after claiming and completing every job: %v, want %d succeeded", counts, jobs)
	}
}

// --- WriteLeases ---

func testWriteLeasesApply(t *testing.T, s store.Store) {
	const second = time.Second
	now := leaseRules.Now
	tests := []struct {
		name  string
		queue string
		job   func(j *jobtype.Job) // from running(...), before the write
		write func(j jobtype.Job) store.LeaseWrite
		// check states the expected outcome once more, apart from
		// LeaseWrite.Apply, for the reader and against Apply itself.
		check func(before, got jobtype.Job) string
	}{
		{
			name:  "a heartbeat raises percent, sets step and extends the lease",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 45, "batch 5 of 11") },
			check: func(b, g jobtype.Job) string {
				return expect(g.Percent == 45 && g.Step == "batch 5 of 11" && g.LeaseExpiresAt.Equal(now.Add(30*second)) &&
					g.Version == b.Version+1 && g.UpdatedAt.Equal(now) && g.State == jobtype.Running && g.LeaseID == b.LeaseID,
					"percent 45, the new step, lease until now+30s, version+1, updated now, still running under its lease")
			},
		},
		{
			name:  "a heartbeat never lowers percent",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 10, "batch 4 of 10") },
			check: func(b, g jobtype.Job) string {
				return expect(g.Percent == 30 && g.Step == "batch 4 of 10" && g.Version == b.Version+1, "percent kept at 30, the new step, version+1")
			},
		},
		{
			name:  "a heartbeat with an empty step keeps the step",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 40, "") },
			check: func(b, g jobtype.Job) string {
				return expect(g.Percent == 40 && g.Step == b.Step && g.Version == b.Version+1, "percent 40, step kept, version+1")
			},
		},
		{
			name:  "a heartbeat that changes nothing visible keeps the version and UpdatedAt but extends the lease",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 30, "") },
			check: func(b, g jobtype.Job) string {
				return expect(g.Version == b.Version && g.UpdatedAt.Equal(b.UpdatedAt) && g.LeaseExpiresAt.Equal(now.Add(30*second)),
					"version and UpdatedAt kept, lease until now+30s")
			},
		},
		{
			name:  "a heartbeat repeating the step and a lower percent keeps the version",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 20, j.Step) },
			check: func(b, g jobtype.Job) string {
				return expect(g.Version == b.Version && g.Percent == 30 && g.LeaseExpiresAt.Equal(now.Add(30*second)), "version and percent kept, lease extended")
			},
		},
		{
			name:  "a heartbeat over 100 percent counts as 100",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 250, "") },
			check: func(b, g jobtype.Job) string { return expect(g.Percent == 100, "percent 100") },
		},
		{
			name:  "a heartbeat below 0 percent changes no progress",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, -5, "") },
			check: func(b, g jobtype.Job) string {
				return expect(g.Percent == 30 && g.Version == b.Version, "percent kept, version kept")
			},
		},
		{
			name:  "a heartbeat in a queue with its own lease extends the lease by that",
			queue: "slow",
			write: func(j jobtype.Job) store.LeaseWrite { return heartbeat(j, 50, "") },
			check: func(b, g jobtype.Job) string {
				return expect(g.LeaseExpiresAt.Equal(now.Add(10*time.Minute)), "lease until now+10m")
			},
		},
		{
			name:  "a completion ends the job succeeded with its result, percent 100, no error, and its lease ended",
			write: func(j jobtype.Job) store.LeaseWrite { return complete(j, `{"rows":3,"tags":["a"]}`) },
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Succeeded && g.Percent == 100 && jsonEqual(g.Result, json.RawMessage(`{"rows":3,"tags":["a"]}`)) &&
					g.Error == nil && g.LeaseID == b.LeaseID && g.LeaseExpiresAt.IsZero() && g.FinishedAt.Equal(now) &&
					g.WorkerID == b.WorkerID && g.Attempt == b.Attempt && g.Step == b.Step && g.Version == b.Version+1 && g.UpdatedAt.Equal(now),
					"succeeded, 100 %, the result, no error, the lease id kept without expiry, finished now, worker, attempt and step kept, version+1")
			},
		},
		{
			name:  "a completion without a result stores none",
			write: func(j jobtype.Job) store.LeaseWrite { return complete(j, "") },
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Succeeded && g.Result == nil, "succeeded without a result")
			},
		},
		{
			name: "a completion at 100 percent without an error still raises the version",
			job: func(j *jobtype.Job) {
				j.Percent, j.Error = 100, nil
			},
			write: func(j jobtype.Job) store.LeaseWrite { return complete(j, `{}`) },
			check: func(b, g jobtype.Job) string { return expect(g.Version == b.Version+1, "version+1") },
		},
		{
			name:  "a failure with retry and attempts left queues the job again at now plus the backoff",
			job:   func(j *jobtype.Job) { j.Attempt = 1 },
			write: func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0.5) },
			check: func(b, g jobtype.Job) string {
				// Step 1 s: the delay is ⌊0.5 × 1,000,001⌋ µs.
				return expect(g.State == jobtype.Queued && g.RunAt.Equal(now.Add(500*time.Millisecond)) &&
					g.Percent == 0 && g.Step == "" && g.Error != nil && *g.Error == *boom && g.LeaseID == b.LeaseID && g.LeaseExpiresAt.IsZero() &&
					g.FinishedAt.IsZero() && g.Attempt == 1 && g.StartedAt.Equal(b.StartedAt) && g.Version == b.Version+1 && g.UpdatedAt.Equal(now),
					"queued at now+0.5s, progress reset, the new error, the lease id kept without expiry, not finished, attempt and start kept, version+1")
			},
		},
		{
			name:  "a failure with retry in a queue with its own backoff waits that backoff",
			queue: "patient",
			job:   func(j *jobtype.Job) { j.Attempt = 2 },
			write: func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0.5) },
			check: func(b, g jobtype.Job) string {
				// Step 20 s after the second attempt: ⌊0.5 × 20,000,001⌋ µs.
				return expect(g.State == jobtype.Queued && g.RunAt.Equal(now.Add(10*time.Second)), "queued at now+10s")
			},
		},
		{
			name: "a failure with retry after many attempts waits at most the maximum backoff",
			job:  func(j *jobtype.Job) { j.Attempt, j.MaxAttempts = 30, 40 },
			write: func(j jobtype.Job) store.LeaseWrite {
				return fail(j, true, math.Nextafter(1, 0))
			},
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Queued && g.RunAt.Equal(now.Add(time.Minute)), "queued at now+1m, the maximum")
			},
		},
		{
			name:  "a failure with retry and jitter 0 is due at once",
			write: func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0) },
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Queued && g.RunAt.Equal(now), "queued at now")
			},
		},
		{
			name:  "a failure with retry on the last attempt ends the job failed",
			job:   func(j *jobtype.Job) { j.Attempt = 3 },
			write: func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0.5) },
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Failed && g.FinishedAt.Equal(now) && g.Error != nil && *g.Error == *boom && g.LeaseID == b.LeaseID &&
					g.LeaseExpiresAt.IsZero() && g.RunAt.Equal(b.RunAt) && g.Percent == b.Percent && g.Step == b.Step && g.Version == b.Version+1,
					"failed, finished now, the new error, the lease id kept without expiry, RunAt and progress kept, version+1")
			},
		},
		{
			name:  "a failure without retry ends the job failed though attempts are left",
			job:   func(j *jobtype.Job) { j.Attempt = 1 },
			write: func(j jobtype.Job) store.LeaseWrite { return fail(j, false, 0.5) },
			check: func(b, g jobtype.Job) string {
				return expect(g.State == jobtype.Failed && g.FinishedAt.Equal(now), "failed, finished now")
			},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			queue := tc.queue
			if queue == "" {
				queue = "default"
			}
			j := running(fmt.Sprintf("job-%02d", i), queue, i)
			if tc.job != nil {
				tc.job(&j)
			}
			before := create(t, s, j)
			got := writeLeases(t, s, []store.LeaseWrite{tc.write(before)}, leaseRules)
			if !got[0].Held {
				t.Fatalf("the write did not hold the job's lease")
			}
			if msg := tc.check(before, got[0].Job); msg != "" {
				t.Errorf("%s", msg)
			}
		})
	}
}

// expect returns "" if ok, else what was wanted.
func expect(ok bool, want string) string {
	if ok {
		return ""
	}
	return "want " + want
}

func testWriteLeasesStale(t *testing.T, s store.Store) {
	tests := []struct {
		name  string
		job   func(j *jobtype.Job)
		lease string // of the write; "" is the job's own
	}{
		{"another lease id", nil, "lease-other"},
		{"no lease id", nil, "-"},
		{"a job queued again for a retry", func(j *jobtype.Job) {
			j.State, j.LeaseID, j.LeaseExpiresAt = jobtype.Queued, "", time.Time{}
		}, "lease-old"},
		{"a job cancelled that keeps its lease id", func(j *jobtype.Job) {
			j.State, j.FinishedAt = jobtype.Cancelled, at(200)
		}, ""},
		{"a job lost that keeps its lease id", func(j *jobtype.Job) {
			j.State, j.FinishedAt = jobtype.Lost, at(200)
		}, ""},
		{"a job re-claimed under a new lease", func(j *jobtype.Job) {
			j.LeaseID, j.Attempt = "lease-new", 3
		}, "lease-old"},
		{"a job that succeeded", func(j *jobtype.Job) {
			j.State, j.FinishedAt, j.LeaseID, j.LeaseExpiresAt = jobtype.Succeeded, at(200), "", time.Time{}
		}, "lease-old"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []store.LeaseOp{store.Heartbeat, store.Complete, store.Fail} {
				j := running(fmt.Sprintf("job-%02d-%s", i, opName(op)), "default", i)
				if tc.job != nil {
					tc.job(&j)
				}
				before := create(t, s, j)
				w := store.LeaseWrite{Op: op, JobID: j.ID, LeaseID: j.LeaseID, Percent: 90, Step: "late", Result: json.RawMessage(`1`),
					Error: boom, Retry: true, Jitter: 0.5}
				switch tc.lease {
				case "":
				case "-":
					w.LeaseID = ""
				default:
					w.LeaseID = tc.lease
				}
				got := writeLeases(t, s, []store.LeaseWrite{w}, leaseRules)
				if got[0].Held {
					t.Errorf("a %s with a stale lease held the job", opName(op))
				}
				sameJob(t, "the job a stale "+opName(op)+" returned", got[0].Job, before)
			}
		})
	}
}

func testWriteLeasesUnknown(t *testing.T, s store.Store) {
	a := create(t, s, running("a", "default", 0))
	b := create(t, s, running("b", "default", 1))
	got := writeLeases(t, s, []store.LeaseWrite{
		complete(jobtype.Job{ID: "missing", LeaseID: "lease-missing"}, `1`),
		heartbeat(a, 50, "on"),
		fail(jobtype.Job{ID: "", LeaseID: ""}, true, 0.5),
		complete(b, `2`),
	}, leaseRules)
	for _, i := range []int{0, 2} {
		if !errors.Is(got[i].Err, jobtype.ErrNotFound) {
			t.Errorf("write %d to an unknown job: err %v, want ErrNotFound", i, got[i].Err)
		}
	}
	if !got[1].Held || !got[3].Held {
		t.Errorf("writes to known jobs beside unknown ones: held %v and %v, want both", got[1].Held, got[3].Held)
	}
}

func testWriteLeasesMixed(t *testing.T, s store.Store) {
	var jobs []jobtype.Job
	for i := range 8 {
		jobs = append(jobs, create(t, s, running(fmt.Sprintf("job-%d", i), []string{"default", "slow", "patient"}[i%3], i)))
	}
	cancelled := running("cancelled", "default", 9)
	cancelled.State, cancelled.FinishedAt = jobtype.Cancelled, at(200)
	create(t, s, cancelled)
	other := jobs[7]
	other.LeaseID = "lease-other"
	writeLeases(t, s, []store.LeaseWrite{
		heartbeat(jobs[0], 60, "more"),
		complete(cancelled, `1`),
		fail(jobs[1], true, 0.25),
		complete(jobtype.Job{ID: "missing", LeaseID: "l"}, `1`),
		fail(jobs[2], true, 0.75),
		heartbeat(other, 99, "stale"),
		complete(jobs[3], `{"done":true}`),
		heartbeat(jobs[4], 0, ""),
		fail(jobs[5], false, 0),
		heartbeat(cancelled, 50, "x"),
		complete(jobs[6], ""),
	}, leaseRules)
}

func testWriteLeasesManyCompletions(t *testing.T, s store.Store) {
	const n = 200
	ws := make([]store.LeaseWrite, n)
	for i := range n {
		j := create(t, s, running(fmt.Sprintf("job-%03d", i), "default", i))
		ws[i] = complete(j, fmt.Sprintf(`{"n":%d}`, i))
	}
	got := writeLeases(t, s, ws, leaseRules)
	for i, r := range got {
		if !r.Held {
			t.Errorf("completion %d did not hold", i)
		}
	}
	counts, err := s.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if counts[jobtype.Succeeded] != n || counts[jobtype.Running] != 0 {
		t.Errorf("after %d completions: %v, want all succeeded", n, counts)
	}
}

func testWriteLeasesSameJobTwice(t *testing.T, s store.Store) {
	tests := []struct {
		name   string
		writes func(j jobtype.Job) []store.LeaseWrite
		held   []bool
		state  jobtype.State
	}{
		{"a heartbeat then a completion: both hold", func(j jobtype.Job) []store.LeaseWrite {
			return []store.LeaseWrite{heartbeat(j, 80, "last batch"), complete(j, `1`)}
		}, []bool{true, true}, jobtype.Succeeded},
		{"a completion then a heartbeat: the heartbeat finds the lease gone", func(j jobtype.Job) []store.LeaseWrite {
			return []store.LeaseWrite{complete(j, `1`), heartbeat(j, 80, "late")}
		}, []bool{true, false}, jobtype.Succeeded},
		{"two completions: the second finds the lease gone", func(j jobtype.Job) []store.LeaseWrite {
			return []store.LeaseWrite{complete(j, `1`), complete(j, `2`)}
		}, []bool{true, false}, jobtype.Succeeded},
		{"a failure to retry then a completion: the completion finds the lease gone", func(j jobtype.Job) []store.LeaseWrite {
			return []store.LeaseWrite{fail(j, true, 0.5), complete(j, `1`)}
		}, []bool{true, false}, jobtype.Queued},
		{"three heartbeats: each applies to what the one before left", func(j jobtype.Job) []store.LeaseWrite {
			return []store.LeaseWrite{heartbeat(j, 40, "a"), heartbeat(j, 35, "b"), heartbeat(j, 60, "")}
		}, []bool{true, true, true}, jobtype.Running},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := create(t, s, running(fmt.Sprintf("job-%d", i), "default", i))
			got := writeLeases(t, s, tc.writes(j), leaseRules)
			for k, r := range got {
				if r.Held != tc.held[k] {
					t.Errorf("write %d: held %v, want %v", k, r.Held, tc.held[k])
				}
			}
			if last := get(t, s, j.ID); last.State != tc.state {
				t.Errorf("state after the batch %s, want %s", last.State, tc.state)
			}
		})
	}
}

func testWriteLeasesEmpty(t *testing.T, s store.Store) {
	j := create(t, s, running("job-1", "default", 0))
	for _, ws := range [][]store.LeaseWrite{nil, {}} {
		got, err := s.WriteLeases(t.Context(), ws, leaseRules)
		if err != nil || len(got) != 0 {
			t.Errorf("WriteLeases(%#v) = %d results, %v; want none, nil", ws, len(got), err)
		}
	}
	sameJob(t, "the job after empty batches", get(t, s, j.ID), j)
}

func testWriteLeasesRetried(t *testing.T, s store.Store) {
	a := create(t, s, running("a", "default", 0))
	b := create(t, s, running("b", "default", 1))
	c := create(t, s, running("c", "default", 2))
	ws := []store.LeaseWrite{complete(a, `1`), heartbeat(b, 70, "seven"), fail(c, true, 0.5)}
	first := writeLeases(t, s, ws, leaseRules)
	second := writeLeases(t, s, ws, leaseRules)
	for i, want := range []bool{false, true, false} {
		if second[i].Held != want {
			t.Errorf("write %d run again: held %v, want %v", i, second[i].Held, want)
		}
		sameJob(t, fmt.Sprintf("write %d's job run again", i), second[i].Job, first[i].Job)
	}
}

func testWriteLeasesCancelledContext(t *testing.T, s store.Store) {
	a := create(t, s, running("a", "default", 0))
	b := create(t, s, running("b", "default", 1))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.WriteLeases(ctx, []store.LeaseWrite{complete(a, `1`), heartbeat(b, 90, "x")}, leaseRules); err == nil {
		t.Fatal("lease writes with a cancelled context succeeded")
	}
	sameJob(t, "a after a cancelled batch", get(t, s, "a"), a)
	sameJob(t, "b after a cancelled batch", get(t, s, "b"), b)
}

func testWriteLeasesConcurrent(t *testing.T, s store.Store) {
	const writers, each = 8, 12
	type plan struct {
		ws     []store.LeaseWrite
		before map[string]jobtype.Job
	}
	plans := make([]plan, writers)
	for w := range writers {
		p := plan{before: map[string]jobtype.Job{}}
		for i := range each {
			j := create(t, s, running(fmt.Sprintf("w%d-%02d", w, i), []string{"default", "slow", "patient"}[i%3], i))
			p.before[j.ID] = j
			switch i % 4 {
			case 0:
				p.ws = append(p.ws, heartbeat(j, int32(40+i), fmt.Sprintf("step %d", i)))
			case 1:
				p.ws = append(p.ws, complete(j, fmt.Sprintf(`{"w":%d}`, w)))
			case 2:
				p.ws = append(p.ws, fail(j, i%8 == 2, 0.5))
			case 3:
				stale := j
				stale.LeaseID = "lease-stale"
				p.ws = append(p.ws, heartbeat(stale, 99, "stale"))
			}
		}
		p.ws = append(p.ws, complete(jobtype.Job{ID: fmt.Sprintf("w%d-missing", w), LeaseID: "l"}, `1`))
		plans[w] = p
	}
	results := make([][]store.LeaseResult, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			<-start
			results[w], errs[w] = s.WriteLeases(t.Context(), plans[w].ws, leaseRules)
		})
	}
	close(start)
	wg.Wait()
	for w, p := range plans {
		if errs[w] != nil {
			t.Errorf("writer %d: %v", w, errs[w])
			continue
		}
		if len(results[w]) != len(p.ws) {
			t.Errorf("writer %d: %d results for %d writes", w, len(results[w]), len(p.ws))
			continue
		}
		for i, wr := range p.ws {
			before, ok := p.before[wr.JobID]
			if !ok {
				if !errors.Is(results[w][i].Err, jobtype.ErrNotFound) {
					t.Errorf("writer %d, write %d to an unknown job: err %v, want ErrNotFound", w, i, results[w][i].Err)
				}
				continue
			}
			want, held := applied(before, wr, leaseRules)
			if results[w][i].Held != held {
				t.Errorf("writer %d, write %d: held %v, want %v", w, i, results[w][i].Held, held)
			}
			if held {
				startFromStore(t, fmt.Sprintf("writer %d, write %d", w, i), &want, results[w][i].Job)
			}
			sameJob(t, fmt.Sprintf("writer %d, write %d's job", w, i), results[w][i].Job, want)
			sameJob(t, wr.JobID+" as stored", get(t, s, wr.JobID), want)
		}
	}
}

func testWriteLeasesCancelRace(t *testing.T, s store.Store) {
	const jobs = 24
	before := make([]jobtype.Job, jobs)
	for i := range jobs {
		before[i] = create(t, s, running(fmt.Sprintf("job-%02d", i), "default", i))
	}
	results := make([]store.LeaseResult, jobs)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range jobs {
		wg.Go(func() {
			<-start
			got, err := s.WriteLeases(t.Context(), []store.LeaseWrite{complete(before[i], `1`)}, leaseRules)
			if err != nil || len(got) != 1 {
				t.Errorf("complete job-%02d: %d results, %v", i, len(got), err)
				return
			}
			results[i] = got[0]
		})
		wg.Go(func() {
			<-start
			// A cancel keeps the lease id, as the engine's does: the
			// worker learns of it when its lease no longer holds.
			if _, err := s.UpdateJob(t.Context(), before[i].ID, func(j *jobtype.Job) error {
				if j.State == jobtype.Running {
					j.State, j.FinishedAt, j.UpdatedAt = jobtype.Cancelled, at(400), at(400)
				}
				return nil
			}); err != nil {
				t.Errorf("cancel job-%02d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		got := get(t, s, before[i].ID)
		switch {
		case r.Held && (got.State != jobtype.Succeeded || got.Version != before[i].Version+1 || r.Job.State != jobtype.Succeeded):
			t.Errorf("job-%02d: the completion held, yet it is %s at version %d (the completion returned %s); want succeeded at %d",
				i, got.State, got.Version, r.Job.State, before[i].Version+1)
		case !r.Held && (got.State != jobtype.Cancelled || got.Version != before[i].Version+1 || r.Job.State != jobtype.Cancelled):
			t.Errorf("job-%02d: the completion did not hold, yet it is %s at version %d (the completion returned %s); want cancelled at %d",
				i, got.State, got.Version, r.Job.State, before[i].Version+1)
		}
	}
}

// untilAll returns every change heard up to the batch that completes
// want (job id to version: each heard at that version), failing the
// test after a generous bound. Unlike waitFor it keeps the rest of each
// batch: one write's changes to several jobs may come in one batch.
func (h *heard) untilAll(t *testing.T, want map[string]int64) []store.Change {
	t.Helper()
	var out []store.Change
	missing := maps.Clone(want)
	timeout := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case batch := <-h.c:
			out = append(out, batch...)
			for _, c := range batch {
				if v, ok := missing[c.JobID]; ok && v == c.Version {
					delete(missing, c.JobID)
				}
			}
		case <-timeout:
			t.Fatalf("no change heard to %v (job: version); heard %+v", missing, out)
		}
	}
	return out
}

func testWriteLeasesHeard(t *testing.T, s store.Store) {
	done := create(t, s, running("done", "default", 0))
	retried := running("retried", "patient", 1)
	retried.Attempt = 1
	retried = create(t, s, retried)
	create(t, s, running("stale", "default", 2))
	h := listen(t, s)
	// A listener may also hear changes committed shortly before Listen
	// returned (a backend may notify after the commit), so stale's
	// creation might still come; a change heard once stale's version 2
	// is heard can only be a later one.
	stale := visibleUpdate(t, s, "stale", 31)
	h.untilAll(t, map[string]int64{"stale": stale.Version})

	wrong := stale
	wrong.LeaseID = "lease-other"
	got := writeLeases(t, s, []store.LeaseWrite{
		complete(done, `1`),
		heartbeat(wrong, 90, "stale"),
		fail(retried, true, 0.5),
		complete(wrong, `1`),
	}, leaseRules)

	changes := h.untilAll(t, map[string]int64{"done": got[0].Job.Version, "retried": got[2].Job.Version})
	for _, c := range changes {
		switch {
		case c.JobID == "done" && c.Version == got[0].Job.Version:
			if c.State != jobtype.Succeeded || !c.Local || c.Tenant != done.Tenant || c.Kind != done.Kind || c.Queue != done.Queue {
				t.Errorf("the completion was heard as %+v, want succeeded, local, with the job's tenant, kind and queue", c)
			}
		case c.JobID == "retried" && c.Version == got[2].Job.Version:
			if c.State != jobtype.Queued || !c.RunAt.Equal(got[2].Job.RunAt) {
				t.Errorf("the retry was heard as %+v, want queued with its new RunAt %v", c, got[2].Job.RunAt)
			}
		}
	}

	// Changes to one job are heard in commit order: once a later change
	// to stale is heard, anything the stale writes made would have been.
	marker := visibleUpdate(t, s, "stale", 32)
	changes = append(changes, h.untilAll(t, map[string]int64{"stale": marker.Version})...)
	for _, c := range changes {
		// A listener may hear a change again, or one from before it
		// began (see above): only a version between the update the
		// stale writes followed and the marker is theirs.
		if c.JobID == "stale" && c.Version > stale.Version && c.Version != marker.Version {
			t.Errorf("heard a change to stale at version %d besides the update to version %d: a write not held was heard", c.Version, marker.Version)
		}
	}
}

func testWriteLeasesEndScheduleRun(t *testing.T, s store.Store) {
	const every = time.Hour
	tests := []struct {
		name   string
		end    func(j jobtype.Job) store.LeaseWrite
		state  jobtype.State
		ended  bool
		second func(j jobtype.Job) store.LeaseWrite // after claiming the run again
	}{
		{"a completion", func(j jobtype.Job) store.LeaseWrite { return complete(j, `1`) }, jobtype.Succeeded, true, nil},
		{"a failure without retry", func(j jobtype.Job) store.LeaseWrite { return fail(j, false, 0) }, jobtype.Failed, true, nil},
		{"a failure to retry, which does not end the run, then a final failure", func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0) },
			jobtype.Queued, false, func(j jobtype.Job) store.LeaseWrite { return fail(j, true, 0) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("sched-%d", i)
			run := scheduleRun(name, every, at(0))
			run.Job.MaxAttempts = 2
			tick(t, s, at(0), run)
			claim := func(lease string, now time.Time) jobtype.Job {
				got := claimJobs(t, s, store.ClaimFilter{Kinds: []string{name}, Now: now},
					store.Claim{WorkerID: "w", LeaseIDs: []string{lease}, Now: now, Lease: time.Minute})
				if len(got) != 1 {
					t.Fatalf("claimed %v, want the schedule's run", claimedIDs(got))
				}
				return got[0].Job
			}
			j := claim("lease-a", at(100))
			if st, _ := scheduleState(t, s, name); st.LastJobState != jobtype.Running || !st.Unfinished() {
				t.Errorf("while the run runs: state %+v, want running and unfinished", st)
			}
			writeLeases(t, s, []store.LeaseWrite{tc.end(j)}, leaseRules)
			st, _ := scheduleState(t, s, name)
			want := store.ScheduleState{Name: name, LastJobID: run.Job.ID, LastJobState: tc.state}
			if tc.ended {
				want.LastEndedAt = leaseRules.Now
			}
			if st.Name != want.Name || st.LastJobID != want.LastJobID || st.LastJobState != want.LastJobState ||
				!st.LastEndedAt.Equal(want.LastEndedAt) {
				t.Errorf("after the write: state %+v, want %+v", st, want)
			}
			if st.Unfinished() == tc.ended {
				t.Errorf("after the write: unfinished %v, want %v", st.Unfinished(), !tc.ended)
			}
			if tc.second != nil {
				j = claim("lease-b", leaseRules.Now) // the retry is due at once
				writeLeases(t, s, []store.LeaseWrite{tc.second(j)}, leaseRules)
				st, _ = scheduleState(t, s, name)
				if st.LastJobState != jobtype.Failed || !st.LastEndedAt.Equal(leaseRules.Now) || st.Unfinished() {
					t.Errorf("after the last attempt failed: state %+v, want failed, ended at %v", st, leaseRules.Now)
				}
			}
			// The end as recorded decides the next run.
			due := leaseRules.Now.Add(every)
			if started := tick(t, s, due.Add(-time.Microsecond), scheduleRun(name, every, due)); len(started) != 0 {
				t.Errorf("a tick before end+every started %v", started)
			}
			if started := tick(t, s, due, scheduleRun(name, every, due)); len(started) != 1 {
				t.Errorf("the tick at end+every started %v, want one run", started)
			}
		})
	}
}
