// Package storetest is the conformance suite that every store.Store
// backend runs (store/sqlite, store/postgres), in the manner of River's
// riverdrivertest: one set of tests, so that no backend can drift from the
// contract written in package store.
//
// It tests only through the store.Store interface and must never reach
// into a backend's tables, types or SQL. Timings are never asserted.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Run runs the suite. Each subtest calls open for a fresh, empty store and
// closes it when the subtest ends; open should register the removal of
// anything it made (a temp file, a schema) with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range slices.Concat(cases, readCases, scheduleCases, concurrentCases, changeCases, leaseCases, pauseCases, historyCases, priorityCases, logCases, batchCases, depCases, tenantDepthCases, rateCases, quotaCases, fairCases, capCases, retentionCases) {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close store: %v", err)
				}
			})
			tc.run(t, s)
		})
	}
	t.Run("a change cursor of another database is ahead of this one's", func(t *testing.T) {
		a, b := open(t), open(t)
		t.Cleanup(func() {
			a.Close()
			b.Close()
		})
		testCursorOfAnotherDatabase(t, a, b)
	})
}

var cases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"create then get returns the job exactly as given", testCreateGet},
	{"get of an unknown id returns ErrNotFound", testGetUnknown},
	{"create with an id that exists fails and keeps the first job", testCreateDuplicateID},
	{"create with a cancelled context writes nothing", testCreateCancelledContext},
	{"times come back in UTC and zero times stay zero", testTimesUTC},
	{"times keep at least microsecond precision", testTimePrecision},
	{"payload and result come back as the same JSON", testJSONRoundTrip},

	{"a second active job with the same unique key conflicts and names the active one", testUniqueConflict},
	{"a unique key is free again once its holder has ended", testUniqueFreedByTerminal},
	{"a job created in a terminal state holds no unique key", testUniqueTerminalHoldsNothing},
	{"the same unique key in another tenant does not conflict", testUniquePerTenant},
	{"jobs without a unique key never conflict", testNoUniqueKey},
	{"concurrent creates with one unique key admit exactly one", testUniqueConcurrent},

	{"list filters by tenant, states, kind and queue", testListFilters},
	{"list orders newest first, ties by later creation first", testListOrder},
	{"paging through a list yields every job once and in order", testListPaging},
	{"a page that ends at the last job has no next token", testListLastPageExact},
	{"jobs created while paging do not shift later pages", testListPagingStable},
	{"paging keeps the filter", testListPagingFiltered},
	{"list refuses a page token it did not issue", testListBadToken},
	{"a summary list leaves payload and result out, a full one has them", testListSummary},
	{"pages end early at MaxBytes and paging still yields every job once", testListMaxBytes},
	{"a job larger than MaxBytes comes alone on its page", testListMaxBytesLargeJob},
	{"a list reads no payload it does not return", testListReadsOnlyWhatItReturns},

	{"a visible change bumps the version by exactly one", testUpdateVisible},
	{"an invisible change is written without a version bump", testUpdateInvisible},
	{"an update that changes nothing keeps the version", testUpdateNoChange},
	{"the store owns the version, not the update func", testUpdateOwnsVersion},
	{"a failing update returns its error untouched and writes nothing", testUpdateError},
	{"update of an unknown id returns ErrNotFound without calling update", testUpdateUnknown},
	{"update sees the stored job", testUpdateSeesStored},
	{"concurrent updates of one job serialize with versions in sequence", testUpdateConcurrent},

	{"claim takes the earliest RunAt first, then creation order", testClaimOrder},
	{"claim skips jobs whose RunAt is still in the future", testClaimFuture},
	{"claim takes only queued jobs", testClaimOnlyQueued},
	{"claim honours the kinds and queues filters", testClaimFilters},
	{"claim honours the tenants filter, alone and with kinds and queues", testClaimTenants},
	{"a claim commits its changes with the version plus one", testClaimCommits},
	{"concurrent claims never hand out one job twice", testClaimConcurrent},
	{"claims and updates racing on the same jobs never lose a change", testClaimUpdateRace},

	{"next ready is the earliest RunAt of matching queued jobs, past or future", testNextReady},
	{"scheduled jobs are the queued jobs due after now, earliest first, up to the limit", testScheduledJobs},

	{"a serial queue runs one job at a time, in RunAt then creation order, whatever the worker's kinds", testClaimSerial},
	{"a serial queue that blocks waits behind its head backing off; one that skips moves on", testClaimSerialBlockSkip},
	{"a serial queue is serial per tenant: another tenant's head or running job never blocks a worker of one tenant, but max_running 1 holds across tenants", testClaimSerialTenants},
	{"next ready counts only the worker's tenants, and in a serial queue each tenant's own head", testNextReadyTenants},
	{"a parallel queue never has more than max_running running", testClaimMaxRunning},
	{"a pool shared by two queues is never exceeded, and a full queue does not hold back others", testClaimPool},
	{"concurrent claims never take a queue or a pool past its limit", testClaimLimitsConcurrent},
	{"next ready reports nothing for a queue that is full, and the head's RunAt for one backing off", testNextReadyLimits},
	{"expired leases are those of running jobs whose lease ended before now", testExpiredLeases},
	{"held leases are the given leases that hold a running job, each with its job", testHeldLeases},
	{"delete finished before removes only terminal jobs that ended earlier", testDeleteFinishedBefore},
	{"count by state counts every job once", testCountByState},

	{"queue stats count each queue's unfinished jobs and find its oldest ready one", testQueueStats},
	{"queue stats of a store with no unfinished job are empty", testQueueStatsEmpty},
	{"busy queues are those asked of that queue stats would list", testBusyQueues},
}

// base has microsecond precision, which every backend must keep.
var base = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

func at(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

func newJob(id string, created time.Time) jobtype.Job {
	return jobtype.Job{
		ID:          id,
		Tenant:      "acme",
		Kind:        "email",
		Queue:       "default",
		State:       jobtype.Queued,
		Version:     1,
		Attempt:     1,
		MaxAttempts: 3,
		CreatedAt:   created,
		UpdatedAt:   created,
		RunAt:       created,
	}
}

func create(t *testing.T, s store.Store, j jobtype.Job) jobtype.Job {
	t.Helper()
	got, err := s.CreateJob(t.Context(), j)
	if err != nil {
		t.Fatalf("create %s: %v", j.ID, err)
	}
	return got
}

func get(t *testing.T, s store.Store, id string) jobtype.Job {
	t.Helper()
	got, err := s.GetJob(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got
}

func mustBeGone(t *testing.T, s store.Store, id string) {
	t.Helper()
	if _, err := s.GetJob(t.Context(), id); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("get %s: err = %v, want ErrNotFound", id, err)
	}
}

// diff lists the fields in which got and want differ: times by instant,
// JSON by meaning, the rest exactly.
func diff(got, want jobtype.Job) []string {
	var out []string
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		same := false
		switch g := g.(type) {
		case time.Time:
			same = g.Equal(w.(time.Time))
		case json.RawMessage:
			same = jsonEqual(g, w.(json.RawMessage))
		case *jobtype.JobError:
			w := w.(*jobtype.JobError)
			same = (g == nil && w == nil) || (g != nil && w != nil && *g == *w)
		default:
			same = reflect.DeepEqual(g, w)
		}
		if !same {
			out = append(out, fmt.Sprintf("%s: got %v, want %v", name, show(g), show(w)))
		}
	}
	return out
}

func show(v any) any {
	switch v := v.(type) {
	case json.RawMessage:
		if v == nil {
			return "<nil>"
		}
		return string(v)
	case *jobtype.JobError:
		if v == nil {
			return "<nil>"
		}
		return *v
	}
	return v
}

func sameJob(t *testing.T, what string, got, want jobtype.Job) {
	t.Helper()
	if d := diff(got, want); len(d) > 0 {
		t.Errorf("%s differs from what was expected:\n  %s", what, joinLines(d))
	}
}

func joinLines(lines []string) string {
	var b bytes.Buffer
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// jsonEqual: nil stays nil (no value), otherwise the documents must mean
// the same. A backend may normalise whitespace, key order and how a
// number is written (jsonb prints 1e-7 as 0.0000001) but must keep every
// value, numbers to the last digit.
func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if decode(a, &x) != nil || decode(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return sameJSONValue(x, y)
}

func decode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// sameJSONValue compares decoded documents, numbers by exact value.
func sameJSONValue(x, y any) bool {
	switch x := x.(type) {
	case json.Number:
		y, ok := y.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	case []any:
		y, ok := y.([]any)
		return ok && slices.EqualFunc(x, y, sameJSONValue)
	case map[string]any:
		y, ok := y.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameJSONValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(x, y)
}

func ids(jobs []jobtype.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// --- create and get ---

func fullJob() jobtype.Job {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	return jobtype.Job{
		ID:             "job-full",
		Tenant:         "acme",
		Kind:           "report",
		Queue:          "bulk",
		State:          jobtype.Running,
		Version:        7,
		Percent:        45,
		Step:           "batch 5 of 11",
		Payload:        json.RawMessage(`{"account":42,"tags":["a","b"]}`),
		Result:         json.RawMessage(`{"rows":1000}`),
		Error:          &jobtype.JobError{Type: "Timeout", Message: "attempt 1 took too long"},
		Attempt:        2,
		MaxAttempts:    5,
		UniqueKey:      "report:42",
		CreatedAt:      at(1).In(zone),
		StartedAt:      at(2).In(zone),
		UpdatedAt:      at(3).In(zone),
		FinishedAt:     at(4),
		RunAt:          at(1).Add(time.Microsecond),
		WorkerID:       "worker-7",
		LeaseID:        "lease-abc",
		LeaseExpiresAt: at(33),
		Batch:          "reports-2030-01",
		TraceParent:    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		TraceState:     "congo=t61rcWkgMzE",
	}
}

func testCreateGet(t *testing.T, s store.Store) {
	want := fullJob()
	got := create(t, s, want)
	sameJob(t, "CreateJob's result", got, want)
	sameJob(t, "GetJob's result", get(t, s, want.ID), want)
}

func testGetUnknown(t *testing.T, s store.Store) {
	create(t, s, newJob("job-1", at(0)))
	mustBeGone(t, s, "job-2")
	mustBeGone(t, s, "")
}

func testCreateDuplicateID(t *testing.T, s store.Store) {
	first := create(t, s, newJob("job-1", at(0)))
	dup := newJob("job-1", at(5))
	dup.Kind = "other"
	if _, err := s.CreateJob(t.Context(), dup); err == nil {
		t.Fatal("second create with the same id succeeded")
	}
	sameJob(t, "the first job", get(t, s, "job-1"), first)
}

func testCreateCancelledContext(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.CreateJob(ctx, newJob("job-1", at(0))); err == nil {
		t.Fatal("create with a cancelled context succeeded")
	}
	mustBeGone(t, s, "job-1")
}

func timeFields(j jobtype.Job) map[string]time.Time {
	return map[string]time.Time{
		"CreatedAt": j.CreatedAt, "StartedAt": j.StartedAt, "UpdatedAt": j.UpdatedAt,
		"FinishedAt": j.FinishedAt, "RunAt": j.RunAt, "LeaseExpiresAt": j.LeaseExpiresAt,
	}
}

func testTimesUTC(t *testing.T, s store.Store) {
	full := fullJob()
	sparse := newJob("job-sparse", at(0).In(time.FixedZone("UTC-7", -7*3600)))
	sparse.RunAt = time.Time{}
	for _, j := range []jobtype.Job{full, sparse} {
		created := create(t, s, j)
		for _, got := range []jobtype.Job{created, get(t, s, j.ID)} {
			want := timeFields(j)
			for name, tm := range timeFields(got) {
				if want[name].IsZero() {
					if !tm.IsZero() {
						t.Errorf("%s %s: got %v, want the zero time", j.ID, name, tm)
					}
					continue
				}
				if tm.Location() != time.UTC {
					t.Errorf("%s %s: location %v, want UTC", j.ID, name, tm.Location())
				}
			}
		}
	}
}

func testTimePrecision(t *testing.T, s store.Store) {
	j := newJob("job-1", base.Add(789*time.Nanosecond))
	j.StartedAt = base.Add(999 * time.Nanosecond)
	created := create(t, s, j)
	for name, tm := range timeFields(created) {
		want := timeFields(j)[name]
		if d := tm.Sub(want).Abs(); d >= time.Microsecond {
			t.Errorf("%s: got %v, want within 1µs of %v", name, tm, want)
		}
	}
	sameJob(t, "GetJob's result (must equal what CreateJob returned)", get(t, s, j.ID), created)
}

func testJSONRoundTrip(t *testing.T, s store.Store) {
	tests := []struct {
		name string
		json json.RawMessage
	}{
		{"none", nil},
		{"null", json.RawMessage(`null`)},
		{"an object with nesting", json.RawMessage(`{"a":{"b":[1,2,{"c":null}]},"d":true}`)},
		{"a big integer", json.RawMessage(`{"n":12345678901234567890123}`)},
		{"a precise decimal", json.RawMessage(`[0.1,1e-7,-3.25]`)},
		{"unicode and escapes", json.RawMessage(`{"s":"grüße \"quoted\" \\ \u2028 ✓","e":""}`)},
		{"a bare string", json.RawMessage(`"just text"`)},
		{"an empty array", json.RawMessage(`[]`)},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(fmt.Sprintf("job-%d", i), at(i))
			j.Payload, j.Result = tc.json, tc.json
			created := create(t, s, j)
			for what, got := range map[string]jobtype.Job{"CreateJob": created, "GetJob": get(t, s, j.ID)} {
				if !jsonEqual(got.Payload, tc.json) {
					t.Errorf("%s payload: got %s, want %s", what, show(got.Payload), show(tc.json))
				}
				if !jsonEqual(got.Result, tc.json) {
					t.Errorf("%s result: got %s, want %s", what, show(got.Result), show(tc.json))
				}
			}
		})
	}
}

// --- unique keys ---

func wantConflict(t *testing.T, err error, activeID, key string) {
	t.Helper()
	var ce *jobtype.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *jobtype.ConflictError", err)
	}
	if ce.ActiveID != activeID || ce.UniqueKey != key {
		t.Errorf("conflict = {ActiveID: %q, UniqueKey: %q}, want {%q, %q}", ce.ActiveID, ce.UniqueKey, activeID, key)
	}
}

func keyed(id string, created time.Time, key string, state jobtype.State) jobtype.Job {
	j := newJob(id, created)
	j.UniqueKey, j.State = key, state
	return j
}

func testUniqueConflict(t *testing.T, s store.Store) {
	for i, holder := range jobtype.ActiveStates {
		t.Run("holder "+string(holder), func(t *testing.T) {
			key := "key-" + string(holder)
			first := create(t, s, keyed(fmt.Sprintf("job-%d-a", i), at(0), key, holder))
			_, err := s.CreateJob(t.Context(), keyed(fmt.Sprintf("job-%d-b", i), at(1), key, jobtype.Queued))
			wantConflict(t, err, first.ID, key)
			mustBeGone(t, s, fmt.Sprintf("job-%d-b", i))
		})
	}
}

func testUniqueFreedByTerminal(t *testing.T, s store.Store) {
	for i, end := range []jobtype.State{jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		t.Run("holder "+string(end), func(t *testing.T) {
			key := "key-" + string(end)
			a, b, c := fmt.Sprintf("job-%d-a", i), fmt.Sprintf("job-%d-b", i), fmt.Sprintf("job-%d-c", i)
			create(t, s, keyed(a, at(0), key, jobtype.Running))
			if _, err := s.UpdateJob(t.Context(), a, func(j *jobtype.Job) error {
				j.State, j.FinishedAt = end, at(1)
				return nil
			}); err != nil {
				t.Fatalf("end the holder: %v", err)
			}
			create(t, s, keyed(b, at(2), key, jobtype.Queued))
			_, err := s.CreateJob(t.Context(), keyed(c, at(3), key, jobtype.Pending))
			wantConflict(t, err, b, key)
		})
	}
}

func testUniqueTerminalHoldsNothing(t *testing.T, s store.Store) {
	create(t, s, keyed("job-old", at(0), "k", jobtype.Succeeded))
	create(t, s, keyed("job-new", at(1), "k", jobtype.Queued))
}

func testUniquePerTenant(t *testing.T, s store.Store) {
	create(t, s, keyed("job-acme", at(0), "k", jobtype.Queued))
	other := keyed("job-other", at(1), "k", jobtype.Queued)
	other.Tenant = "globex"
	create(t, s, other)
	_, err := s.CreateJob(t.Context(), keyed("job-acme-2", at(2), "k", jobtype.Queued))
	wantConflict(t, err, "job-acme", "k")
}

func testNoUniqueKey(t *testing.T, s store.Store) {
	for i := range 3 {
		create(t, s, keyed(fmt.Sprintf("job-%d", i), at(i), "", jobtype.Running))
	}
}

func testUniqueConcurrent(t *testing.T, s store.Store) {
	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.CreateJob(t.Context(), keyed(fmt.Sprintf("job-%02d", i), at(i), "k", jobtype.Queued))
		})
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		if err == nil {
			if winner != "" {
				t.Fatalf("both %s and job-%02d were admitted", winner, i)
			}
			winner = fmt.Sprintf("job-%02d", i)
		}
	}
	if winner == "" {
		t.Fatalf("no create was admitted: %v", errs)
	}
	for _, err := range errs {
		if err != nil {
			wantConflict(t, err, winner, "k")
		}
	}
}

// --- list ---

func list(t *testing.T, s store.Store, f store.ListFilter) ([]jobtype.Job, string) {
	t.Helper()
	jobs, next, err := s.ListJobs(t.Context(), f)
	if err != nil {
		t.Fatalf("list %+v: %v", f, err)
	}
	return jobs, next
}

// listAll pages through f with the given page size.
func listAll(t *testing.T, s store.Store, f store.ListFilter, size int) []string {
	t.Helper()
	var out []string
	f.Limit = size
	for range 1000 {
		jobs, next := list(t, s, f)
		if len(jobs) > size {
			t.Fatalf("page of %d jobs, limit %d", len(jobs), size)
		}
		if next != "" && len(jobs) == 0 {
			t.Fatal("an empty page has a next token")
		}
		out = append(out, ids(jobs)...)
		if next == "" {
			return out
		}
		f.PageToken = next
	}
	t.Fatal("paging does not end")
	return nil
}

func testListFilters(t *testing.T, s store.Store) {
	fixture := []struct {
		id, tenant, kind, queue string
		state                   jobtype.State
		created, updated        int
	}{
		{"a", "acme", "email", "default", jobtype.Queued, 1, 1},
		{"b", "acme", "report", "default", jobtype.Running, 2, 10},
		{"c", "acme", "email", "bulk", jobtype.Succeeded, 3, 5},
		{"d", "globex", "email", "default", jobtype.Queued, 4, 4},
		{"e", "acme", "email", "default", jobtype.Failed, 5, 20},
	}
	for _, f := range fixture {
		j := newJob(f.id, at(f.created))
		j.Tenant, j.Kind, j.Queue, j.State, j.UpdatedAt = f.tenant, f.kind, f.queue, f.state, at(f.updated)
		create(t, s, j)
	}
	tests := []struct {
		name   string
		filter store.ListFilter
		want   []string
	}{
		{"no filter lists every job", store.ListFilter{}, []string{"e", "d", "c", "b", "a"}},
		{"tenant", store.ListFilter{Tenant: "acme"}, []string{"e", "c", "b", "a"}},
		{"states", store.ListFilter{States: []jobtype.State{jobtype.Queued, jobtype.Running}}, []string{"d", "b", "a"}},
		{"one state", store.ListFilter{States: []jobtype.State{jobtype.Succeeded}}, []string{"c"}},
		{"running alone", store.ListFilter{States: []jobtype.State{jobtype.Running}}, []string{"b"}},
		{"a tenant's running jobs", store.ListFilter{Tenant: "acme", States: []jobtype.State{jobtype.Running}}, []string{"b"}},
		{"another tenant's running jobs", store.ListFilter{Tenant: "globex", States: []jobtype.State{jobtype.Running}}, nil},
		{"kind", store.ListFilter{Kind: "email"}, []string{"e", "d", "c", "a"}},
		{"queue", store.ListFilter{Queue: "bulk"}, []string{"c"}},
		{"all together", store.ListFilter{Tenant: "acme", Kind: "email", Queue: "default", States: []jobtype.State{jobtype.Failed, jobtype.Queued}}, []string{"e", "a"}},
		{"nothing matches", store.ListFilter{Tenant: "initech"}, nil},
		{"several kinds", store.ListFilter{Kinds: []string{"report", "sms"}}, []string{"b"}},
		{"several queues", store.ListFilter{Queues: []string{"bulk", "default"}, Tenant: "globex"}, []string{"d"}},
		{"created before", store.ListFilter{CreatedBefore: at(3)}, []string{"b", "a"}},
		{"kinds, queues, states and created before together", store.ListFilter{Kinds: []string{"email"}, Queues: []string{"default", "bulk"},
			States: []jobtype.State{jobtype.Succeeded, jobtype.Failed, jobtype.Queued}, CreatedBefore: at(5)}, []string{"d", "c", "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs, next := list(t, s, tc.filter)
			if got := ids(jobs); !slices.Equal(got, tc.want) {
				t.Errorf("ids = %v, want %v", got, tc.want)
			}
			if next != "" {
				t.Errorf("next token %q on a single page", next)
			}
		})
	}
}

func testListOrder(t *testing.T, s store.Store) {
	for _, c := range []struct {
		id  string
		sec int
	}{{"x", 5}, {"y", 1}, {"z", 5}, {"w", 3}} {
		create(t, s, newJob(c.id, at(c.sec)))
	}
	jobs, _ := list(t, s, store.ListFilter{})
	if got, want := ids(jobs), []string{"z", "x", "w", "y"}; !slices.Equal(got, want) {
		t.Errorf("ids = %v, want %v", got, want)
	}
}

func testListPaging(t *testing.T, s store.Store) {
	// 23 jobs in a shuffled creation order, three to a CreatedAt, so that
	// page boundaries fall inside ties.
	r := rand.New(rand.NewPCG(1, 2))
	perm := r.Perm(23)
	type row struct {
		id      string
		created int
		order   int
	}
	var rows []row
	for order, i := range perm {
		id := fmt.Sprintf("job-%02d", i)
		create(t, s, newJob(id, at(i/3)))
		rows = append(rows, row{id, i / 3, order})
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].created != rows[b].created {
			return rows[a].created > rows[b].created
		}
		return rows[a].order > rows[b].order
	})
	var want []string
	for _, r := range rows {
		want = append(want, r.id)
	}
	all, next := list(t, s, store.ListFilter{})
	if got := ids(all); !slices.Equal(got, want) {
		t.Fatalf("unpaged ids = %v, want %v", got, want)
	}
	if next != "" {
		t.Errorf("unpaged list has next token %q", next)
	}
	for _, size := range []int{1, 2, 4, 7, 22, 23, 24, 100} {
		if got := listAll(t, s, store.ListFilter{}, size); !slices.Equal(got, want) {
			t.Errorf("pages of %d: ids = %v, want %v", size, got, want)
		}
	}
}

func testListLastPageExact(t *testing.T, s store.Store) {
	for i := range 8 {
		create(t, s, newJob(fmt.Sprintf("job-%d", i), at(i)))
	}
	first, next := list(t, s, store.ListFilter{Limit: 4})
	if len(first) != 4 || next == "" {
		t.Fatalf("first page: %d jobs, token %q; want 4 jobs and a token", len(first), next)
	}
	second, next := list(t, s, store.ListFilter{Limit: 4, PageToken: next})
	if got, want := ids(second), []string{"job-3", "job-2", "job-1", "job-0"}; !slices.Equal(got, want) {
		t.Errorf("second page ids = %v, want %v", got, want)
	}
	if next != "" {
		t.Errorf("last page has next token %q", next)
	}
}

func testListPagingStable(t *testing.T, s store.Store) {
	for i := range 6 {
		create(t, s, newJob(fmt.Sprintf("job-%d", i), at(i)))
	}
	first, next := list(t, s, store.ListFilter{Limit: 3})
	if got, want := ids(first), []string{"job-5", "job-4", "job-3"}; !slices.Equal(got, want) {
		t.Fatalf("first page ids = %v, want %v", got, want)
	}
	for i := 6; i < 9; i++ {
		create(t, s, newJob(fmt.Sprintf("job-%d", i), at(i)))
	}
	second, _ := list(t, s, store.ListFilter{Limit: 3, PageToken: next})
	if got, want := ids(second), []string{"job-2", "job-1", "job-0"}; !slices.Equal(got, want) {
		t.Errorf("second page ids = %v, want %v", got, want)
	}
}

func testListPagingFiltered(t *testing.T, s store.Store) {
	var want []string
	var running []string // globex's running jobs, newest first
	for i := range 12 {
		j := newJob(fmt.Sprintf("job-%02d", i), at(i))
		if i%3 == 0 {
			j.Tenant = "globex"
			want = append([]string{j.ID}, want...)
		}
		if i%2 == 0 {
			j.State = jobtype.Running
			if j.Tenant == "globex" {
				running = append([]string{j.ID}, running...)
			}
		}
		create(t, s, j)
	}
	if got := listAll(t, s, store.ListFilter{Tenant: "globex"}, 2); !slices.Equal(got, want) {
		t.Errorf("ids = %v, want %v", got, want)
	}
	if got := listAll(t, s, store.ListFilter{Tenant: "globex", States: []jobtype.State{jobtype.Running}}, 1); !slices.Equal(got, running) {
		t.Errorf("a tenant's running jobs, page by page: ids = %v, want %v", got, running)
	}
}

func testListBadToken(t *testing.T, s store.Store) {
	create(t, s, newJob("job-1", at(0)))
	for _, token := range []string{"garbage!", "AAAA", "%%%"} {
		if _, _, err := s.ListJobs(t.Context(), store.ListFilter{PageToken: token}); !errors.Is(err, jobtype.ErrInvalidPageToken) {
			t.Errorf("token %q: err = %v, want ErrInvalidPageToken", token, err)
		}
	}
}

func testListSummary(t *testing.T, s store.Store) {
	want := create(t, s, fullJob())
	jobs, _ := list(t, s, store.ListFilter{})
	if len(jobs) != 1 {
		t.Fatalf("summary list = %v, want one job", ids(jobs))
	}
	if jobs[0].Payload != nil || jobs[0].Result != nil {
		t.Errorf("summary has payload %s and result %s, want neither", show(jobs[0].Payload), show(jobs[0].Result))
	}
	summary := want
	summary.Payload, summary.Result = nil, nil
	sameJob(t, "the summary", jobs[0], summary)

	jobs, _ = list(t, s, store.ListFilter{Full: true})
	if len(jobs) != 1 {
		t.Fatalf("full list = %v, want one job", ids(jobs))
	}
	sameJob(t, "the full job", jobs[0], want)
}

// sizedJobs creates n jobs, newest last, whose payloads and results take
// about the given bytes each (varying, so that page ends fall anywhere),
// and returns them newest first, as a list orders them.
func sizedJobs(t *testing.T, s store.Store, n, bytes int) []jobtype.Job {
	t.Helper()
	var out []jobtype.Job
	for i := range n {
		j := newJob(fmt.Sprintf("job-%02d", i), at(i))
		pad := bytes/2 + (i%5)*bytes/8
		j.Payload = json.RawMessage(fmt.Sprintf(`{"pad":%q}`, bytes2(pad)))
		j.Result = json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, bytes2(bytes-pad)))
		out = append([]jobtype.Job{create(t, s, j)}, out...)
	}
	return out
}

func bytes2(n int) string { return string(bytes.Repeat([]byte("x"), max(0, n))) }

func sizeOf(jobs []jobtype.Job) int {
	n := 0
	for i := range jobs {
		n += jobs[i].Size()
	}
	return n
}

func testListMaxBytes(t *testing.T, s store.Store) {
	all := sizedJobs(t, s, 15, 3000)
	const maxBytes = 10_000
	for _, full := range []bool{true, false} {
		t.Run(fmt.Sprintf("full %v", full), func(t *testing.T) {
			f := store.ListFilter{Limit: 100, MaxBytes: maxBytes, Full: full}
			var got []jobtype.Job
			pages := 0
			for range 100 {
				page, next := list(t, s, f)
				pages++
				if size := sizeOf(page); size > maxBytes {
					t.Errorf("page %d: %d jobs of %d bytes, over MaxBytes %d", pages, len(page), size, maxBytes)
				}
				got = append(got, page...)
				if next == "" {
					break
				}
				// The page ended early only because the next job did not fit.
				if rest := all[len(got):]; len(rest) > 0 {
					withNext := sizeOf(page) + sizeOf(summaries(rest[:1], full))
					if withNext <= maxBytes {
						t.Errorf("page %d ended at %d bytes, but the next job (%d bytes) fits", pages, sizeOf(page), withNext-sizeOf(page))
					}
				}
				f.PageToken = next
			}
			if !slices.Equal(ids(got), ids(all)) {
				t.Fatalf("paging by bytes: ids = %v, want %v", ids(got), ids(all))
			}
			for i := range got {
				sameJob(t, got[i].ID, got[i], summaries(all[i:i+1], full)[0])
			}
			if full && pages < 4 {
				t.Errorf("%d full jobs of about 3 KB in %d pages of at most %d bytes", len(all), pages, maxBytes)
			}
			if !full && pages != 1 {
				t.Errorf("15 summaries took %d pages, want 1: a summary's size has no payload", pages)
			}
		})
	}
}

// summaries returns jobs as a list in the given view returns them.
func summaries(jobs []jobtype.Job, full bool) []jobtype.Job {
	if full {
		return jobs
	}
	out := slices.Clone(jobs)
	for i := range out {
		out[i].Payload, out[i].Result = nil, nil
	}
	return out
}

func testListMaxBytesLargeJob(t *testing.T, s store.Store) {
	all := sizedJobs(t, s, 3, 5000)
	f := store.ListFilter{Full: true, MaxBytes: 1000}
	for i := range all {
		page, next := list(t, s, f)
		if len(page) != 1 || page[0].ID != all[i].ID {
			t.Fatalf("page %d = %v, want %s alone", i, ids(page), all[i].ID)
		}
		if (next == "") != (i == len(all)-1) {
			t.Fatalf("page %d: next token %q", i, next)
		}
		f.PageToken = next
	}
}

// testListReadsOnlyWhatItReturns holds a backend to reading no payload or
// result for a summary and no row past a full page's MaxBytes, measured by
// what the process allocates while listing.
func testListReadsOnlyWhatItReturns(t *testing.T, s store.Store) {
	const n, each = 64, 64 << 10
	sizedJobs(t, s, n, each)
	stored := n * each
	allocated := func(f store.ListFilter) (int, []jobtype.Job) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		jobs, _ := list(t, s, f)
		runtime.ReadMemStats(&after)
		return int(after.TotalAlloc - before.TotalAlloc), jobs
	}
	bytes, jobs := allocated(store.ListFilter{Limit: 500})
	if len(jobs) != n {
		t.Fatalf("summary list has %d jobs, want %d", len(jobs), n)
	}
	if bytes > stored/8 {
		t.Errorf("a summary list of %d jobs with %d KiB of payload and result allocated %d KiB, want under %d KiB: it read what it does not return",
			n, stored>>10, bytes>>10, stored/8>>10)
	}
	t.Logf("a summary list of %d jobs allocated %d KiB", n, bytes>>10)
	bytes, jobs = allocated(store.ListFilter{Limit: 500, Full: true, MaxBytes: 4 * each})
	if len(jobs) > 4 {
		t.Fatalf("full page of %d jobs of %d KiB, want at most 4 under MaxBytes %d KiB", len(jobs), each>>10, 4*each>>10)
	}
	if bytes > stored/4 {
		t.Errorf("a full page of %d jobs (%d KiB) allocated %d KiB of the %d KiB stored, want under %d KiB: it read rows past MaxBytes",
			len(jobs), sizeOf(jobs)>>10, bytes>>10, stored>>10, stored/4>>10)
	}
	t.Logf("a full page of %d jobs (%d KiB) allocated %d KiB", len(jobs), sizeOf(jobs)>>10, bytes>>10)
}

// --- update ---

func update(t *testing.T, s store.Store, id string, f func(*jobtype.Job)) jobtype.Job {
	t.Helper()
	got, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error { f(j); return nil })
	if err != nil {
		t.Fatalf("update %s: %v", id, err)
	}
	return got
}

func testUpdateVisible(t *testing.T, s store.Store) {
	tests := []struct {
		name   string
		change func(*jobtype.Job)
	}{
		{"state", func(j *jobtype.Job) { j.State = jobtype.Running }},
		{"percent", func(j *jobtype.Job) { j.Percent = 45 }},
		{"step", func(j *jobtype.Job) { j.Step = "batch 5 of 11" }},
		{"result", func(j *jobtype.Job) { j.Result = json.RawMessage(`{"ok":true}`) }},
		{"error", func(j *jobtype.Job) { j.Error = &jobtype.JobError{Type: "Timeout"} }},
		{"error message", func(j *jobtype.Job) { j.Error = &jobtype.JobError{Type: "Boom", Message: "other"} }},
		{"attempt", func(j *jobtype.Job) { j.Attempt++ }},
		{"worker", func(j *jobtype.Job) { j.WorkerID = "worker-2" }},
		{"run at", func(j *jobtype.Job) { j.RunAt = at(60) }},
		{"several at once", func(j *jobtype.Job) { j.State, j.Percent, j.UpdatedAt = jobtype.Succeeded, 100, at(9) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(fmt.Sprintf("job-%d", i), at(i))
			j.Error = &jobtype.JobError{Type: "Boom", Message: "first"}
			create(t, s, j)
			want := j
			tc.change(&want)
			want.Version = 2
			got := update(t, s, j.ID, tc.change)
			sameJob(t, "UpdateJob's result", got, want)
			sameJob(t, "GetJob's result", get(t, s, j.ID), want)
		})
	}
}

func testUpdateInvisible(t *testing.T, s store.Store) {
	j := newJob("job-1", at(0))
	j.State = jobtype.Running
	create(t, s, j)
	change := func(j *jobtype.Job) {
		j.LeaseID, j.LeaseExpiresAt, j.UpdatedAt = "lease-2", at(90), at(60)
	}
	want := j
	change(&want)
	got := update(t, s, j.ID, change)
	sameJob(t, "UpdateJob's result", got, want)
	sameJob(t, "GetJob's result", get(t, s, j.ID), want)
}

func testUpdateNoChange(t *testing.T, s store.Store) {
	j := create(t, s, newJob("job-1", at(0)))
	got := update(t, s, j.ID, func(*jobtype.Job) {})
	sameJob(t, "UpdateJob's result", got, j)
}

func testUpdateOwnsVersion(t *testing.T, s store.Store) {
	create(t, s, newJob("job-1", at(0)))
	tests := []struct {
		name        string
		change      func(*jobtype.Job)
		wantVersion int64
	}{
		{"visible change with a made-up version", func(j *jobtype.Job) { j.Percent, j.Version = 10, 99 }, 2},
		{"invisible change with a made-up version", func(j *jobtype.Job) { j.LeaseID, j.Version = "l", 0 }, 2},
		{"no change but a made-up version", func(j *jobtype.Job) { j.Version = 50 }, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := update(t, s, "job-1", tc.change); got.Version != tc.wantVersion {
				t.Errorf("version = %d, want %d", got.Version, tc.wantVersion)
			}
			if got := get(t, s, "job-1"); got.Version != tc.wantVersion {
				t.Errorf("stored version = %d, want %d", got.Version, tc.wantVersion)
			}
		})
	}
}

type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func testUpdateError(t *testing.T, s store.Store) {
	j := create(t, s, newJob("job-1", at(0)))
	want := &refusal{"not in this state"}
	_, err := s.UpdateJob(t.Context(), j.ID, func(j *jobtype.Job) error {
		j.State, j.Percent, j.LeaseID = jobtype.Failed, 50, "lease-x"
		return want
	})
	if err != want {
		t.Errorf("err = %#v, want the update's own error %#v", err, want)
	}
	sameJob(t, "the job after a failed update", get(t, s, j.ID), j)
}

func testUpdateUnknown(t *testing.T, s store.Store) {
	called := false
	_, err := s.UpdateJob(t.Context(), "job-missing", func(*jobtype.Job) error { called = true; return nil })
	if !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
	if called {
		t.Error("update was called for a job that does not exist")
	}
}

func testUpdateSeesStored(t *testing.T, s store.Store) {
	create(t, s, fullJob())
	stored := get(t, s, "job-full")
	update(t, s, "job-full", func(j *jobtype.Job) {
		// The attempt's start is handed to update alone (GetJob leaves
		// it out); testAttemptHistory checks it.
		seen := *j
		seen.AttemptStartedAt = time.Time{}
		sameJob(t, "the job update sees", seen, stored)
	})
}

func testUpdateConcurrent(t *testing.T, s store.Store) {
	const n = 16
	create(t, s, newJob("job-1", at(0)))
	versions := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got, err := s.UpdateJob(t.Context(), "job-1", func(j *jobtype.Job) error {
				j.Percent++
				return nil
			})
			if err != nil {
				t.Errorf("update %d: %v", i, err)
				return
			}
			versions[i] = got.Version
		})
	}
	wg.Wait()
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+2) {
			t.Fatalf("versions = %v, want 2..%d each once", versions, n+1)
		}
	}
	if got := get(t, s, "job-1"); got.Percent != n || got.Version != n+1 {
		t.Errorf("after %d increments: percent %d version %d, want %d and %d", n, got.Percent, got.Version, n, n+1)
	}
}

// --- claim ---

// toRunning is a claim by worker-1 with a lease of a minute.
var toRunning = store.Claim{WorkerID: "worker-1", LeaseID: "lease-1", Now: at(100), Lease: time.Minute}

func claimAll(t *testing.T, s store.Store, f store.ClaimFilter) []string {
	t.Helper()
	var out []string
	for range 1000 {
		j, _, err := store.ClaimOne(t.Context(), s, f, toRunning)
		if errors.Is(err, jobtype.ErrNoJob) {
			return out
		}
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		out = append(out, j.ID)
	}
	t.Fatal("claiming does not end")
	return nil
}

func testClaimOrder(t *testing.T, s store.Store) {
	for i, runAt := range []time.Time{at(5), at(1), at(3), at(1), {}} {
		j := newJob(fmt.Sprintf("job-%d", i+1), at(i))
		j.RunAt = runAt
		create(t, s, j)
	}
	got := claimAll(t, s, store.ClaimFilter{Now: at(100)})
	if want := []string{"job-5", "job-2", "job-4", "job-3", "job-1"}; !slices.Equal(got, want) {
		t.Errorf("claim order = %v, want %v (zero RunAt first, ties by creation)", got, want)
	}
}

func testClaimFuture(t *testing.T, s store.Store) {
	j := newJob("job-1", at(0))
	j.RunAt = at(10)
	create(t, s, j)
	if _, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(9)}, toRunning); !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("claim before RunAt: err = %v, want ErrNoJob", err)
	}
	sameJob(t, "the job after an empty claim", get(t, s, "job-1"), j)
	got, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(10)}, toRunning)
	if err != nil || got.ID != "job-1" {
		t.Fatalf("claim at RunAt: %v, %v; want job-1", got.ID, err)
	}
}

func testClaimOnlyQueued(t *testing.T, s store.Store) {
	for i, st := range []jobtype.State{jobtype.Pending, jobtype.Running, jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		j := newJob("job-"+string(st), at(i))
		j.State = st
		create(t, s, j)
	}
	if got := claimAll(t, s, store.ClaimFilter{Now: at(100)}); len(got) > 0 {
		t.Errorf("claimed %v; only queued jobs may be claimed", got)
	}
}

func testClaimFilters(t *testing.T, s store.Store) {
	fixture := []struct{ id, kind, queue string }{
		{"a", "email", "default"},
		{"b", "report", "default"},
		{"c", "email", "bulk"},
		{"d", "resize", "bulk"},
	}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		want   []string
	}{
		{"no filter", store.ClaimFilter{}, []string{"a", "b", "c", "d"}},
		{"one kind", store.ClaimFilter{Kinds: []string{"email"}}, []string{"a", "c"}},
		{"two kinds", store.ClaimFilter{Kinds: []string{"report", "resize"}}, []string{"b", "d"}},
		{"one queue", store.ClaimFilter{Queues: []string{"bulk"}}, []string{"c", "d"}},
		{"kind and queue", store.ClaimFilter{Kinds: []string{"email"}, Queues: []string{"bulk"}}, []string{"c"}},
		{"unknown kind", store.ClaimFilter{Kinds: []string{"fax"}}, nil},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("t%d-", ti)
			for i, f := range fixture {
				j := newJob(prefix+f.id, at(i))
				j.Kind, j.Queue, j.Tenant = f.kind, f.queue, prefix
				create(t, s, j)
			}
			tc.filter.Now = at(100)
			var got []string
			for _, id := range claimAll(t, s, tc.filter) {
				if len(id) < len(prefix) || id[:len(prefix)] != prefix {
					t.Fatalf("claimed %s, left over from an earlier case", id)
				}
				got = append(got, id[len(prefix):])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("claimed %v, want %v", got, tc.want)
			}
			claimAll(t, s, store.ClaimFilter{Now: at(100)}) // leave nothing for the next case
		})
	}
}

func testClaimCommits(t *testing.T, s store.Store) {
	j := create(t, s, newJob("job-1", at(0)))
	claim := store.Claim{WorkerID: "worker-9", LeaseID: "lease-9", Now: at(1), Lease: 10 * time.Second,
		Leases: map[string]time.Duration{"other": time.Hour}}
	want := j
	want.State, want.WorkerID, want.LeaseID, want.LeaseExpiresAt = jobtype.Running, "worker-9", "lease-9", at(11)
	want.Attempt++
	want.StartedAt, want.UpdatedAt = at(1), at(1)
	want.Version = 2
	got, queuedAt, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(1)}, claim)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if !queuedAt.Equal(j.UpdatedAt) {
		t.Errorf("queuedAt = %v, want the job's UpdatedAt before the claim, %v", queuedAt, j.UpdatedAt)
	}
	sameJob(t, "ClaimJob's result", got, want)
	sameJob(t, "GetJob's result", get(t, s, "job-1"), want)
}

func testClaimConcurrent(t *testing.T, s store.Store) {
	const jobs, workers = 40, 8
	for i := range jobs {
		create(t, s, newJob(fmt.Sprintf("job-%02d", i), at(i%5)))
	}
	claimed := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range jobs + 1 { // a store that hands out jobs forever must not hang the suite
				j, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(100)}, toRunning)
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					t.Errorf("worker %d: claim: %v", w, err)
					return
				}
				claimed[w] = append(claimed[w], j.ID)
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for w, list := range claimed {
		for _, id := range list {
			if prev, dup := seen[id]; dup {
				t.Errorf("%s claimed by worker %d and worker %d", id, prev, w)
			}
			seen[id] = w
		}
	}
	if len(seen) != jobs {
		t.Errorf("%d distinct jobs claimed, want %d", len(seen), jobs)
	}
}

// testClaimUpdateRace races claims against an update of every job (a
// cancel, say). Whichever commits first, the other must see its result:
// a backend that claims from a snapshot it did not lock, or writes back a
// row it read before the other committed, loses one of the two.
func testClaimUpdateRace(t *testing.T, s store.Store) {
	const jobs, workers = 20, 4
	for i := range jobs {
		create(t, s, newJob(fmt.Sprintf("job-%02d", i), at(i)))
	}
	const sawRunning = "the cancel saw it running"
	var (
		mu      sync.Mutex
		claimed = map[string]bool{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for range jobs + 1 {
				j, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(100)}, toRunning)
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					t.Errorf("worker %d: claim: %v", w, err)
					return
				}
				mu.Lock()
				claimed[j.ID] = true
				mu.Unlock()
			}
		})
	}
	for i := range jobs {
		wg.Go(func() {
			_, err := s.UpdateJob(t.Context(), fmt.Sprintf("job-%02d", i), func(j *jobtype.Job) error {
				switch j.State {
				case jobtype.Queued:
					j.State = jobtype.Cancelled
				case jobtype.Running:
					j.Step = sawRunning
				}
				return nil
			})
			if err != nil {
				t.Errorf("update job-%02d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range jobs {
		id := fmt.Sprintf("job-%02d", i)
		got := get(t, s, id)
		switch {
		case claimed[id] && (got.State != jobtype.Running || got.Step != sawRunning || got.Version != 3):
			t.Errorf("%s was claimed, then updated: state %s, step %q, version %d; want running, %q, 3",
				id, got.State, got.Step, got.Version, sawRunning)
		case !claimed[id] && (got.State != jobtype.Cancelled || got.Version != 2):
			t.Errorf("%s was cancelled, never claimed: state %s, version %d; want cancelled, 2", id, got.State, got.Version)
		}
	}
}

// --- periodic queries ---

func testClaimTenants(t *testing.T, s store.Store) {
	fixture := []struct{ id, tenant, kind, queue string }{
		{"a", "acme", "email", "default"},
		{"b", "globex", "email", "default"},
		{"c", "acme", "report", "bulk"},
		{"d", "initech", "email", "bulk"},
		{"e", "globex", "report", "default"},
	}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		want   []string
	}{
		{"no tenants takes every tenant's", store.ClaimFilter{}, []string{"a", "b", "c", "d", "e"}},
		{"one tenant", store.ClaimFilter{Tenants: []string{"acme"}}, []string{"a", "c"}},
		{"two tenants", store.ClaimFilter{Tenants: []string{"globex", "initech"}}, []string{"b", "d", "e"}},
		{"a tenant and a kind", store.ClaimFilter{Tenants: []string{"globex"}, Kinds: []string{"report"}}, []string{"e"}},
		{"a tenant and a queue", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"bulk"}}, []string{"c"}},
		{"a tenant with no jobs", store.ClaimFilter{Tenants: []string{"umbrella"}}, nil},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Tenants are the filter here, so each case has its own
			// queues instead: nothing of an earlier case can match.
			prefix := fmt.Sprintf("t%d-", ti)
			for i, f := range fixture {
				j := newJob(prefix+f.id, at(i))
				j.Tenant, j.Kind, j.Queue = f.tenant, f.kind, prefix+f.queue
				create(t, s, j)
			}
			tc.filter.Now = at(100)
			for i, q := range tc.filter.Queues {
				tc.filter.Queues[i] = prefix + q
			}
			var got []string
			for _, id := range claimAll(t, s, tc.filter) {
				if !strings.HasPrefix(id, prefix) {
					t.Fatalf("claimed %s, left over from an earlier case", id)
				}
				got = append(got, strings.TrimPrefix(id, prefix))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("claimed %v, want %v", got, tc.want)
			}
			claimAll(t, s, store.ClaimFilter{Now: at(100)}) // leave nothing for the next case
		})
	}
}

func testNextReady(t *testing.T, s store.Store) {
	fixture := []struct {
		id    string
		state jobtype.State
		kind  string
		queue string
		runAt int
	}{
		{"a", jobtype.Queued, "email", "default", 10},
		{"b", jobtype.Queued, "report", "default", 5},
		{"c", jobtype.Queued, "email", "bulk", 1},
		{"d", jobtype.Pending, "email", "default", 3},
		{"e", jobtype.Running, "email", "default", 4},
		{"f", jobtype.Succeeded, "email", "default", 2},
		{"g", jobtype.Queued, "email", "default", 7},
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.State, j.Kind, j.Queue, j.RunAt = f.state, f.kind, f.queue, at(f.runAt)
		create(t, s, j)
	}
	none := time.Time{}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		want   time.Time // zero: ok is false
	}{
		{"any job: a queued job already due", store.ClaimFilter{Now: at(20)}, at(1)},
		{"the answer does not depend on now", store.ClaimFilter{Now: at(0)}, at(1)},
		{"one kind", store.ClaimFilter{Kinds: []string{"report"}}, at(5)},
		{"one queue", store.ClaimFilter{Queues: []string{"default"}}, at(5)},
		{"a kind and a queue: pending, running and ended jobs do not count", store.ClaimFilter{Kinds: []string{"email"}, Queues: []string{"default"}}, at(7)},
		{"several kinds", store.ClaimFilter{Kinds: []string{"report", "sms"}}, at(5)},
		{"a kind with no queued job", store.ClaimFilter{Kinds: []string{"sms"}}, none},
		{"a queue with no jobs", store.ClaimFilter{Queues: []string{"other"}}, none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := s.NextReady(t.Context(), tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("next ready = %v, %v; want %v, %v", got, ok, tc.want, !tc.want.IsZero())
			}
		})
	}
}

func testScheduledJobs(t *testing.T, s store.Store) {
	fixture := []struct {
		id    string
		state jobtype.State
		runAt int
	}{
		{"due", jobtype.Queued, 5},
		{"later", jobtype.Queued, 30},
		{"soon", jobtype.Queued, 20},
		{"held", jobtype.Pending, 15},
		{"running", jobtype.Running, 25},
		{"soon-too", jobtype.Queued, 20},
		{"now", jobtype.Queued, 10},
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.State, j.Tenant, j.Kind, j.Queue, j.RunAt = f.state, "t-"+f.id, "k-"+f.id, "q-"+f.id, at(f.runAt)
		create(t, s, j)
	}
	tests := []struct {
		name  string
		limit int
		want  []string
	}{
		{"all of them", 10, []string{"soon", "soon-too", "later"}},
		{"the earliest up to the limit, ties in creation order", 2, []string{"soon", "soon-too"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ScheduledJobs(t.Context(), at(10), tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs []string
			for _, j := range got {
				gotIDs = append(gotIDs, j.ID)
				if j.Tenant != "t-"+j.ID || j.Kind != "k-"+j.ID || j.Queue != "q-"+j.ID || j.Version != 1 {
					t.Errorf("%s: tenant %q, kind %q, queue %q, version %d", j.ID, j.Tenant, j.Kind, j.Queue, j.Version)
				}
			}
			if !slices.Equal(gotIDs, tc.want) {
				t.Fatalf("scheduled jobs %v, want %v", gotIDs, tc.want)
			}
			if !got[0].RunAt.Equal(at(20)) {
				t.Errorf("run_at %v, want %v", got[0].RunAt, at(20))
			}
		})
	}
}

func testExpiredLeases(t *testing.T, s store.Store) {
	fixture := []struct {
		id      string
		state   jobtype.State
		expires int
	}{
		{"a", jobtype.Running, 5},
		{"b", jobtype.Running, 10},
		{"c", jobtype.Queued, 1},
		{"d", jobtype.Succeeded, 1},
		{"e", jobtype.Running, 30},
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.State, j.LeaseID, j.LeaseExpiresAt = f.state, "lease-"+f.id, at(f.expires)
		create(t, s, j)
	}
	tests := []struct {
		now  int
		want []string
	}{
		{0, nil},
		{10, []string{"a"}},
		{11, []string{"a", "b"}},
		{100, []string{"a", "b", "e"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("at second %d", tc.now), func(t *testing.T) {
			got, err := s.ExpiredLeases(t.Context(), at(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("expired = %v, want %v", got, tc.want)
			}
		})
	}
}

func testHeldLeases(t *testing.T, s store.Store) {
	fixture := []struct {
		id    string
		state jobtype.State
	}{
		{"a", jobtype.Running},
		{"b", jobtype.Running},
		{"c", jobtype.Queued}, // a lease left on a queued job holds nothing
		{"d", jobtype.Succeeded},
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.State, j.LeaseID, j.LeaseExpiresAt = f.state, "lease-"+f.id, at(100)
		create(t, s, j)
	}
	tests := []struct {
		leases []string
		want   []store.Attempt
	}{
		{nil, nil},
		{[]string{"lease-x"}, nil},
		{[]string{"lease-b"}, []store.Attempt{{JobID: "b", LeaseID: "lease-b"}}},
		{[]string{"lease-a", "lease-b", "lease-c", "lease-d", "lease-x"},
			[]store.Attempt{{JobID: "a", LeaseID: "lease-a"}, {JobID: "b", LeaseID: "lease-b"}}},
	}
	for _, tc := range tests {
		got, err := s.HeldLeases(t.Context(), tc.leases)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(x, y store.Attempt) int { return strings.Compare(x.JobID, y.JobID) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("held leases of %v = %v, want %v", tc.leases, got, tc.want)
		}
	}
}

func testDeleteFinishedBefore(t *testing.T, s store.Store) {
	fixture := []struct {
		id       string
		state    jobtype.State
		finished int
	}{
		{"a", jobtype.Succeeded, 1},
		{"b", jobtype.Failed, 2},
		{"c", jobtype.Cancelled, 9},
		{"d", jobtype.Lost, 1},
		{"e", jobtype.Running, 1}, // odd, but not terminal: kept
		{"f", jobtype.Queued, 0},
		{"g", jobtype.Succeeded, 5}, // exactly at the cut: kept
	}
	for i, f := range fixture {
		j := newJob(f.id, at(i))
		j.State, j.FinishedAt = f.state, at(f.finished)
		create(t, s, j)
	}
	n, err := s.DeleteFinishedBefore(t.Context(), at(5), deleteAll)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("deleted %d, want 3", n)
	}
	for _, id := range []string{"a", "b", "d"} {
		mustBeGone(t, s, id)
	}
	for _, id := range []string{"c", "e", "f", "g"} {
		get(t, s, id)
	}
	if n, err := s.DeleteFinishedBefore(t.Context(), at(5), deleteAll); err != nil || n != 0 {
		t.Errorf("second delete: %d, %v; want 0, nil", n, err)
	}
}

func testCountByState(t *testing.T, s store.Store) {
	want := map[jobtype.State]int64{jobtype.Queued: 2, jobtype.Running: 1, jobtype.Succeeded: 3, jobtype.Pending: 1}
	i := 0
	for st, n := range want {
		for range n {
			j := newJob(fmt.Sprintf("job-%d", i), at(i))
			j.State = st
			create(t, s, j)
			i++
		}
	}
	got, err := s.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []jobtype.State{jobtype.Pending, jobtype.Queued, jobtype.Running, jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		if got[st] != want[st] {
			t.Errorf("%s: %d, want %d", st, got[st], want[st])
		}
	}
}

func testQueueStats(t *testing.T, s store.Store) {
	fixture := []struct {
		queue string
		state jobtype.State
		runAt int
	}{
		// Created in this order, so creation order is not RunAt order.
		{"bulk", jobtype.Queued, 3},
		{"bulk", jobtype.Queued, 1},
		{"bulk", jobtype.Queued, 50},
		{"bulk", jobtype.Running, 0},
		{"bulk", jobtype.Succeeded, 0},
		{"alpha", jobtype.Running, 0},
		{"alpha", jobtype.Running, 0},
		{"alpha", jobtype.Pending, 0},
		{"mail", jobtype.Queued, 20},
		{"done", jobtype.Succeeded, 0},
		{"done", jobtype.Failed, 0},
		{"done", jobtype.Cancelled, 0},
		{"done", jobtype.Lost, 0},
		{"done", jobtype.Pending, 0},
		{"zeta", jobtype.Queued, 5},
	}
	for i, f := range fixture {
		j := newJob(fmt.Sprintf("job-%02d", i), at(i-100))
		j.Queue, j.State, j.RunAt = f.queue, f.state, at(f.runAt)
		create(t, s, j)
	}
	type q = store.QueueStats
	tests := []struct {
		name string
		now  time.Time
		want []store.QueueStats
	}{
		{"counts are per queue, sorted by name, and queues with only pending or ended jobs are absent", at(10), []q{
			{Name: "alpha", Running: 2},
			{Name: "bulk", Queued: 3, Running: 1, OldestReadyRunAt: at(1)},
			{Name: "mail", Queued: 1},
			{Name: "zeta", Queued: 1, OldestReadyRunAt: at(5)},
		}},
		{"jobs scheduled for later count as queued but are not waiting", at(0), []q{
			{Name: "alpha", Running: 2},
			{Name: "bulk", Queued: 3, Running: 1},
			{Name: "mail", Queued: 1},
			{Name: "zeta", Queued: 1},
		}},
		{"a job due exactly now is waiting", at(1), []q{
			{Name: "alpha", Running: 2},
			{Name: "bulk", Queued: 3, Running: 1, OldestReadyRunAt: at(1)},
			{Name: "mail", Queued: 1},
			{Name: "zeta", Queued: 1},
		}},
		{"once every job is due the oldest is the earliest RunAt", at(100), []q{
			{Name: "alpha", Running: 2},
			{Name: "bulk", Queued: 3, Running: 1, OldestReadyRunAt: at(1)},
			{Name: "mail", Queued: 1, OldestReadyRunAt: at(20)},
			{Name: "zeta", Queued: 1, OldestReadyRunAt: at(5)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.QueueStats(t.Context(), tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if !sameQueueStats(got, tc.want) {
				t.Errorf("queue stats at %v:\n got  %+v\n want %+v", tc.now, got, tc.want)
			}
		})
	}
}

func testQueueStatsEmpty(t *testing.T, s store.Store) {
	j := newJob("ended", at(0))
	j.State = jobtype.Succeeded
	create(t, s, j)
	got, err := s.QueueStats(t.Context(), at(10))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("queue stats = %+v, want none", got)
	}
}

func testBusyQueues(t *testing.T, s store.Store) {
	for i, f := range []struct {
		queue string
		state jobtype.State
		runAt int
	}{
		{"running", jobtype.Running, 0},
		{"scheduled", jobtype.Queued, 1000}, // not ready, but unfinished
		{"ready", jobtype.Queued, 0},
		{"ready", jobtype.Succeeded, 0},
		{"ended", jobtype.Succeeded, 0},
		{"ended", jobtype.Failed, 0},
		{"ended", jobtype.Cancelled, 0},
		{"ended", jobtype.Lost, 0},
		{"held", jobtype.Pending, 0},
		{"unasked", jobtype.Queued, 0},
	} {
		j := newJob(fmt.Sprintf("job-%02d", i), at(i))
		j.Queue, j.State, j.RunAt = f.queue, f.state, at(f.runAt)
		create(t, s, j)
	}
	got, err := s.BusyQueues(t.Context(), []string{"ended", "held", "nosuch", "ready", "running", "scheduled"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"ready", "running", "scheduled"}; !slices.Equal(got, want) {
		t.Errorf("busy queues = %q, want %q", got, want)
	}
	if got, err := s.BusyQueues(t.Context(), nil); err != nil || len(got) != 0 {
		t.Errorf("busy queues of none = %q, %v; want none", got, err)
	}
}

// sameQueueStats compares times by instant, and the zero time only with
// the zero time.
func sameQueueStats(got, want []store.QueueStats) bool {
	return slices.EqualFunc(got, want, func(a, b store.QueueStats) bool {
		return a.Name == b.Name && a.Queued == b.Queued && a.Running == b.Running &&
			a.OldestReadyRunAt.Equal(b.OldestReadyRunAt) &&
			a.OldestReadyRunAt.IsZero() == b.OldestReadyRunAt.IsZero()
	})
}

// fresh is a QUEUED job never attempted, of queue, created at sec.
func fresh(id, queue string, sec int) jobtype.Job {
	j := newJob(id, at(sec))
	j.Queue, j.Attempt = queue, 0
	return j
}

// finish ends a running job, freeing its queue's and pools' room.
func finish(t *testing.T, s store.Store, id string) {
	t.Helper()
	if _, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
		j.State, j.LeaseID = jobtype.Succeeded, ""
		j.FinishedAt = at(200)
		return nil
	}); err != nil {
		t.Fatalf("finish %s: %v", id, err)
	}
}

// claimOne claims with f and returns the id, or "" for ErrNoJob.
func claimOne(t *testing.T, s store.Store, f store.ClaimFilter) string {
	t.Helper()
	j, _, err := store.ClaimOne(t.Context(), s, f, toRunning)
	if errors.Is(err, jobtype.ErrNoJob) {
		return ""
	}
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return j.ID
}

var serialLimits = map[string]store.QueueLimit{"index": {MaxRunning: 1, Serial: true}}

func testClaimSerial(t *testing.T, s store.Store) {
	for i, runAt := range []int{5, 1, 3, 1} {
		j := fresh(fmt.Sprintf("job-%d", i+1), "index", i)
		j.RunAt = at(runAt)
		create(t, s, j)
	}
	other := fresh("other", "default", 0)
	other.RunAt = at(50)
	create(t, s, other)
	report := fresh("report", "index", 9)
	report.Kind, report.RunAt = "report", at(0)
	create(t, s, report)

	// The head is "report", of another kind: an email worker must not
	// overtake it, whatever else the queue holds.
	email := store.ClaimFilter{Kinds: []string{"email"}, Now: at(100), Limits: serialLimits}
	if got := claimOne(t, s, email); got != "other" {
		t.Fatalf("email worker claimed %q, want only %q of the unlimited queue (index's head is a report)", got, "other")
	}
	f := store.ClaimFilter{Now: at(100), Limits: serialLimits}
	var order []string
	for range 10 {
		id := claimOne(t, s, f)
		if id == "" {
			break
		}
		order = append(order, id)
		if again := claimOne(t, s, f); again != "" {
			t.Fatalf("claimed %s while %s of the serial queue runs", again, id)
		}
		finish(t, s, id)
	}
	if want := []string{"report", "job-2", "job-4", "job-3", "job-1"}; !slices.Equal(order, want) {
		t.Errorf("serial order = %v, want %v", order, want)
	}
}

// retrying puts a running job back to QUEUED backing off until sec, as
// the engine does after a failed attempt with attempts left.
func retrying(t *testing.T, s store.Store, id string, sec int) {
	t.Helper()
	if _, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
		j.State, j.LeaseID, j.RunAt = jobtype.Queued, "", at(sec)
		j.Attempt = max(j.Attempt, 1) // the engine counts the attempt at its claim
		return nil
	}); err != nil {
		t.Fatalf("retry %s: %v", id, err)
	}
}

func testClaimSerialBlockSkip(t *testing.T, s store.Store) {
	for _, q := range []string{"block", "skip"} {
		for i := range 3 {
			create(t, s, fresh(fmt.Sprintf("%s-%d", q, i+1), q, i))
		}
	}
	limits := map[string]store.QueueLimit{
		"block": {MaxRunning: 1, Serial: true, HoldRetry: true},
		"skip":  {MaxRunning: 1, Serial: true},
	}
	for _, q := range []string{"block", "skip"} {
		f := store.ClaimFilter{Queues: []string{q}, Now: at(10), Limits: limits}
		head := claimOne(t, s, f)
		if head != q+"-1" {
			t.Fatalf("%s: first claim %q, want %s-1", q, head, q)
		}
		retrying(t, s, head, 60)
		next := claimOne(t, s, f)
		switch q {
		case "block":
			if next != "" {
				t.Errorf("block: claimed %s while the head backs off until a later RunAt", next)
			}
			f.Now = at(60)
			if got := claimOne(t, s, f); got != head {
				t.Errorf("block: claim once the head is due = %q, want the head %s", got, head)
			}
			finish(t, s, head)
			if got := claimOne(t, s, f); got != "block-2" {
				t.Errorf("block: claim after the head succeeded = %q, want block-2", got)
			}
		case "skip":
			if next != "skip-2" {
				t.Errorf("skip: claim while the head backs off = %q, want skip-2", next)
			}
		}
	}
	// A cancelled head is not QUEUED: it holds nothing.
	create(t, s, fresh("c-1", "block2", 0))
	create(t, s, fresh("c-2", "block2", 1))
	limits["block2"] = store.QueueLimit{MaxRunning: 1, Serial: true, HoldRetry: true}
	f := store.ClaimFilter{Queues: []string{"block2"}, Now: at(10), Limits: limits}
	if got := claimOne(t, s, f); got != "c-1" {
		t.Fatalf("block2: first claim %q, want c-1", got)
	}
	retrying(t, s, "c-1", 60)
	if _, err := s.UpdateJob(t.Context(), "c-1", func(j *jobtype.Job) error {
		j.State, j.FinishedAt = jobtype.Cancelled, at(11)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := claimOne(t, s, f); got != "c-2" {
		t.Errorf("claim after the backing-off head was cancelled = %q, want c-2", got)
	}
}

func testClaimMaxRunning(t *testing.T, s store.Store) {
	for i := range 6 {
		create(t, s, fresh(fmt.Sprintf("job-%d", i+1), "readme", i))
	}
	f := store.ClaimFilter{Now: at(100), Limits: map[string]store.QueueLimit{"readme": {MaxRunning: 3}}}
	got := claimAll(t, s, f)
	if want := []string{"job-1", "job-2", "job-3"}; !slices.Equal(got, want) {
		t.Fatalf("claims with max_running 3 = %v, want %v", got, want)
	}
	finish(t, s, "job-2")
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"job-4"}) {
		t.Errorf("claims after one ended = %v, want [job-4]", got)
	}
	// 0 is unbounded.
	f.Limits = map[string]store.QueueLimit{"readme": {}}
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"job-5", "job-6"}) {
		t.Errorf("claims with max_running 0 = %v, want the rest", got)
	}
}

func testClaimPool(t *testing.T, s store.Store) {
	for i := range 4 {
		create(t, s, fresh(fmt.Sprintf("a-%d", i+1), "a", i))
		create(t, s, fresh(fmt.Sprintf("b-%d", i+1), "b", i))
	}
	create(t, s, fresh("free-1", "free", 50))
	f := store.ClaimFilter{
		Now: at(100),
		Limits: map[string]store.QueueLimit{
			"a": {MaxRunning: 2, Pools: []string{"db"}},
			"b": {Pools: []string{"db"}},
		},
		Pools: map[string]int{"db": 3},
	}
	got := claimAll(t, s, f)
	slices.Sort(got)
	// By RunAt: a-1, b-1, a-2 take the pool's three units; a is also at
	// its own max. free is in no pool.
	if want := []string{"a-1", "a-2", "b-1", "free-1"}; !slices.Equal(got, want) {
		t.Fatalf("claims with pool db of 3 = %v, want %v", got, want)
	}
	finish(t, s, "a-1")
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"b-2"}) {
		t.Errorf("claims after a-1 ended = %v, want [b-2]: the freed unit goes to the earliest RunAt of either queue", got)
	}
	finish(t, s, "a-2")
	if got := claimAll(t, s, store.ClaimFilter{Queues: []string{"b"}, Now: f.Now, Limits: f.Limits, Pools: f.Pools}); !slices.Equal(got, []string{"b-3"}) {
		t.Errorf("claims of b after a-2 ended = %v, want [b-3]", got)
	}
	// b holds the whole pool now: a, with nothing running and its own
	// limit far off, waits for a unit.
	if got := claimAll(t, s, f); len(got) > 0 {
		t.Errorf("claims with pool db full = %v, want none", got)
	}
}

func testClaimLimitsConcurrent(t *testing.T, s store.Store) {
	const perQueue, workers = 15, 8
	for i := range perQueue {
		for _, q := range []string{"serial", "bounded", "pooled"} {
			create(t, s, fresh(fmt.Sprintf("%s-%02d", q, i), q, i))
		}
	}
	f := store.ClaimFilter{
		Now: at(100),
		Limits: map[string]store.QueueLimit{
			"serial":  {MaxRunning: 1, Serial: true, Pools: []string{"db"}},
			"bounded": {MaxRunning: 2},
			"pooled":  {Pools: []string{"db"}},
		},
		Pools: map[string]int{"db": 3},
	}
	// Each worker, right after its claim, reads the RUNNING jobs in one
	// snapshot: no snapshot may ever hold more than the rules allow.
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range 3 * perQueue * 20 {
				if claimed.Load() == 3*perQueue {
					return
				}
				j, _, err := store.ClaimOne(t.Context(), s, f, toRunning)
				if errors.Is(err, jobtype.ErrNoJob) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d: claim: %v", w, err)
					return
				}
				claimed.Add(1)
				running, _, err := s.ListJobs(t.Context(), store.ListFilter{States: []jobtype.State{jobtype.Running}, Limit: 100})
				if err != nil {
					t.Errorf("worker %d: list running: %v", w, err)
					return
				}
				perQ, pool := map[string]int{}, 0
				for _, r := range running {
					perQ[r.Queue]++
					if r.Queue != "bounded" {
						pool++
					}
				}
				if perQ["serial"] > 1 || perQ["bounded"] > 2 || pool > 3 {
					t.Errorf("after claiming %s: running %v, pool db %d; want serial ≤ 1, bounded ≤ 2, db ≤ 3", j.ID, perQ, pool)
				}
				finish(t, s, j.ID)
			}
		})
	}
	wg.Wait()
	if n := claimed.Load(); n != 3*perQueue {
		t.Errorf("%d jobs claimed, want %d", n, 3*perQueue)
	}
}

func testClaimSerialTenants(t *testing.T, s store.Store) {
	limits := map[string]store.QueueLimit{
		"index":  {Serial: true},
		"resize": {MaxRunning: 4},
	}
	for _, j := range []struct {
		id, tenant, queue string
		sec               int
	}{
		{"index-globex", "globex", "index", 0},
		{"index-acme", "acme", "index", 1},
		{"resize-globex", "globex", "resize", 2},
		{"resize-acme", "acme", "resize", 3},
	} {
		job := fresh(j.id, j.queue, j.sec)
		job.Tenant = j.tenant
		create(t, s, job)
	}
	// A serial queue is serial per tenant: index's head is globex's,
	// and acme's own head is acme's to take.
	acme := store.ClaimFilter{Tenants: []string{"acme"}, Now: at(100), Limits: limits}
	if got := claimAll(t, s, acme); !slices.Equal(got, []string{"index-acme", "resize-acme"}) {
		t.Fatalf("acme's worker claimed %v, want index-acme (acme's head) and resize-acme", got)
	}
	globex := store.ClaimFilter{Tenants: []string{"globex"}, Now: at(100), Limits: limits}
	if got := claimOne(t, s, globex); got != "index-globex" {
		t.Fatalf("globex's worker claimed %q, want its head index-globex while acme's runs", got)
	}
	// MaxRunning 1 holds across tenants.
	limits["index"] = store.QueueLimit{MaxRunning: 1, Serial: true}
	more := fresh("index-acme-2", "index", 4)
	more.Tenant = "acme"
	create(t, s, more)
	finish(t, s, "index-acme")
	if got := claimOne(t, s, acme); got != "" {
		t.Fatalf("acme's worker claimed %q while index-globex runs in a serial queue of max_running 1", got)
	}
	finish(t, s, "index-globex")
	if got := claimOne(t, s, acme); got != "index-acme-2" {
		t.Fatalf("acme's worker claimed %q, want index-acme-2", got)
	}
}

func testNextReadyTenants(t *testing.T, s store.Store) {
	for _, j := range []struct {
		id, tenant, queue string
		runAt             int
	}{
		{"index-globex", "globex", "index", 5},
		{"index-acme", "acme", "index", 6},
		{"default-globex", "globex", "default", 7},
		{"default-acme", "acme", "default", 8},
		{"bulk-globex", "globex", "bulk", 3},
	} {
		job := fresh(j.id, j.queue, 0)
		job.Tenant, job.RunAt = j.tenant, at(j.runAt)
		create(t, s, job)
	}
	none := time.Time{}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		want   time.Time // zero: ok is false
	}{
		{"unruled: the tenant's earliest", store.ClaimFilter{Tenants: []string{"acme"}}, at(6)},
		{"unruled: several tenants", store.ClaimFilter{Tenants: []string{"acme", "globex"}}, at(3)},
		{"unruled: a tenant with no jobs", store.ClaimFilter{Tenants: []string{"umbrella"}}, none},
		{"serial: the tenant's own head, past the other tenant's", store.ClaimFilter{Tenants: []string{"acme"}, Limits: serialLimits}, at(6)},
		{"serial: the tenant's own head counts", store.ClaimFilter{Tenants: []string{"globex"}, Limits: serialLimits}, at(3)},
		{"serial, one queue: the tenant's own head", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"index"}, Limits: serialLimits}, at(6)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := s.NextReady(t.Context(), tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("next ready = %v, %v; want %v, %v", got, ok, tc.want, !tc.want.IsZero())
			}
		})
	}
}

func testNextReadyLimits(t *testing.T, s store.Store) {
	create(t, s, fresh("s-1", "serial", 0))
	create(t, s, fresh("s-2", "serial", 1))
	f := store.ClaimFilter{Now: at(10), Limits: map[string]store.QueueLimit{"serial": {MaxRunning: 1, Serial: true, HoldRetry: true}}}
	if got := claimOne(t, s, f); got != "s-1" {
		t.Fatalf("claim = %q, want s-1", got)
	}
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Errorf("next ready while the serial queue runs = %v, %v, %v; want none", runAt, ok, err)
	}
	retrying(t, s, "s-1", 60)
	runAt, ok, err := s.NextReady(t.Context(), f)
	if err != nil || !ok || !runAt.Equal(at(60)) {
		t.Errorf("next ready while the head backs off = %v, %v, %v; want the head's RunAt %v", runAt, ok, err, at(60))
	}
}
