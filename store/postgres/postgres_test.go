package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// openURL opens a store on url and closes it when t ends.
func openURL(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openTwo opens two stores on one fresh schema, as two replicas would.
func openTwo(t testing.TB) (*Store, *Store) {
	url := pgtest.URL(t)
	return openURL(t, url), openURL(t, url)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

func job(id, queue string, sec int) jobtype.Job {
	at := t0.Add(time.Duration(sec) * time.Second)
	return jobtype.Job{ID: id, Tenant: "acme", Kind: "email", Queue: queue, State: jobtype.Queued,
		Version: 1, MaxAttempts: 3, CreatedAt: at, UpdatedAt: at, RunAt: at}
}

func mustCreate(t testing.TB, s store.Store, j jobtype.Job) jobtype.Job {
	t.Helper()
	got, err := s.CreateJob(t.Context(), j)
	if err != nil {
		t.Fatalf("create %s: %v", j.ID, err)
	}
	return got
}

func TestPayloadWithNULInAStringRoundTrips(t *testing.T) {
	s, _ := openTwo(t)
	j := job("job-nul", "default", 0)
	j.Payload = json.RawMessage(`{"s":"a\u0000b","n":[1,2.50,"\u0000"]}`)
	j.Result = json.RawMessage(`"\u0000"`)
	mustCreate(t, s, j)
	got, err := s.GetJob(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != string(j.Payload) || string(got.Result) != string(j.Result) {
		t.Errorf("got payload %s result %s, want %s and %s byte for byte", got.Payload, got.Result, j.Payload, j.Result)
	}
	var v struct{ S string }
	if err := json.Unmarshal(got.Payload, &v); err != nil || v.S != "a\x00b" {
		t.Errorf("payload decodes to %q (%v), want \"a\\x00b\"", v.S, err)
	}
	jobs, _, err := s.ListJobs(t.Context(), store.ListFilter{Full: true, MaxBytes: 1 << 20})
	if err != nil || len(jobs) != 1 || string(jobs[0].Payload) != string(j.Payload) {
		t.Errorf("full list: %v, %v; want the payload as stored", jobs, err)
	}
}

func TestMigrationsByFourStoresOpeningAtOnce(t *testing.T) {
	url := pgtest.URL(t)
	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("store %d: open: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n, max int
	if err := stores[0].pool.QueryRow(t.Context(), "SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations) || max != len(migrations) {
		t.Errorf("schema_migrations has %d rows up to %d, want each of the %d steps once", n, max, len(migrations))
	}
	// Every store works on the one schema.
	mustCreate(t, stores[1], job("job-1", "default", 0))
	if _, err := stores[3].GetJob(t.Context(), "job-1"); err != nil {
		t.Errorf("a job created through one store is not found through another: %v", err)
	}
}

func TestSchemaTooNewIsRefused(t *testing.T) {
	url := pgtest.URL(t)
	s := openURL(t, url)
	if _, err := s.pool.Exec(t.Context(), "INSERT INTO schema_migrations (version) VALUES ($1)", len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), url); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("open of a newer schema: %v, want ErrSchemaTooNew", err)
	}
}

// claimer claims under f through s until the queue is empty, checking
// with the counters that no bound is ever passed, and completes each job.
type bounds struct {
	mu      sync.Mutex
	running map[string]int // by queue and by "pool:" + name
	limit   map[string]int
	claimed map[string]int // times each job was claimed
	order   []string       // claims of the serial queue, in order
	errs    []string
}

func (b *bounds) enter(keys []string, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.claimed[id]++
	for _, k := range keys {
		b.running[k]++
		if lim, ok := b.limit[k]; ok && b.running[k] > lim {
			b.errs = append(b.errs, fmt.Sprintf("%s: %d running, limit %d", k, b.running[k], lim))
		}
	}
}

func (b *bounds) leave(keys []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.running[k]--
	}
}

func TestClaimsOnManyConnectionsKeepEveryLimit(t *testing.T) {
	a, b := openTwo(t)
	limits := map[string]store.QueueLimit{
		"capped": {MaxRunning: 2},
		"pool-a": {Pools: []string{"p"}},
		"pool-b": {Pools: []string{"p"}},
		"serial": {MaxRunning: 1, Serial: true},
	}
	f := store.ClaimFilter{Now: t0.Add(time.Hour), Limits: limits, Pools: map[string]int{"p": 2}}
	const perQueue = 24
	queues := []string{"capped", "pool-a", "pool-b", "serial", "free"}
	var serialIDs []string
	for i := range perQueue {
		for _, q := range queues {
			id := fmt.Sprintf("%s-%02d", q, i)
			mustCreate(t, a, job(id, q, i))
			if q == "serial" {
				serialIDs = append(serialIDs, id)
			}
		}
	}
	bd := &bounds{running: map[string]int{}, claimed: map[string]int{},
		limit: map[string]int{"capped": 2, "pool:p": 2, "serial": 1}}
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for done.Load() < int64(perQueue*len(queues)) {
				j, _, err := store.ClaimOne(t.Context(), s, f, store.Claim{WorkerID: fmt.Sprint("w", w),
					LeaseID: fmt.Sprint("l", w), Now: t0.Add(time.Hour), Lease: time.Minute})
				if errors.Is(err, jobtype.ErrNoJob) {
					time.Sleep(time.Millisecond) // others hold the room; poll, as a parked claim would wake
					continue
				}
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				keys := []string{j.Queue}
				if j.Queue == "pool-a" || j.Queue == "pool-b" {
					keys = append(keys, "pool:p")
				}
				bd.enter(keys, j.ID)
				if j.Queue == "serial" {
					bd.mu.Lock()
					bd.order = append(bd.order, j.ID)
					bd.mu.Unlock()
				}
				time.Sleep(time.Duration(w%3) * time.Millisecond)
				bd.leave(keys)
				if _, err := s.UpdateJob(t.Context(), j.ID, func(j *jobtype.Job) error {
					j.State = jobtype.Succeeded
					return nil
				}); err != nil {
					t.Errorf("complete %s: %v", j.ID, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	for _, e := range bd.errs {
		t.Error(e)
	}
	for id, n := range bd.claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
	if len(bd.claimed) != perQueue*len(queues) {
		t.Errorf("%d jobs claimed, want %d", len(bd.claimed), perQueue*len(queues))
	}
	if !slices.Equal(bd.order, serialIDs) {
		t.Errorf("serial queue ran %v, want %v", bd.order, serialIDs)
	}
}

func TestClaimSetsTheClaimAndReturnsWhenItWasQueued(t *testing.T) {
	s, _ := openTwo(t)
	j := job("job-1", "slow", 0)
	mustCreate(t, s, j)
	now := t0.Add(time.Minute + 789*time.Nanosecond)
	got, queuedAt, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: now},
		store.Claim{WorkerID: "w", LeaseID: "l", Now: now, Lease: time.Second, Leases: map[string]time.Duration{"slow": time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	want := j
	now = now.Truncate(time.Microsecond)
	want.State, want.Attempt, want.WorkerID, want.LeaseID, want.Version = jobtype.Running, 1, "w", "l", 2
	want.LeaseExpiresAt, want.StartedAt, want.UpdatedAt = now.Add(time.Hour), now, now
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("claimed\n%+v\nwant\n%+v", got, want)
	}
	if !queuedAt.Equal(j.UpdatedAt) {
		t.Errorf("queuedAt %v, want %v", queuedAt, j.UpdatedAt)
	}
	if stored, _ := s.GetJob(t.Context(), j.ID); fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Errorf("stored\n%+v\nwant\n%+v", stored, want)
	}
}

// listener collects what Listen hears, so a test can wait for it.
type listener struct {
	mu      sync.Mutex
	changes []store.Change
	missed  int
	signal  chan struct{}
}

func listen(t *testing.T, s *Store) *listener {
	l := &listener{signal: make(chan struct{}, 1)}
	err := s.Listen(t.Context(), func(changes []store.Change, missed bool) {
		l.mu.Lock()
		l.changes = append(l.changes, changes...)
		if missed {
			l.missed++
		}
		l.mu.Unlock()
		select {
		case l.signal <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return l
}

// waitFor waits until cond holds of what l heard, or fails after 10 s.
func (l *listener) waitFor(t *testing.T, what string, cond func(changes []store.Change, missed int) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		ok := cond(l.changes, l.missed)
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.signal:
		case <-deadline:
			t.Fatalf("never heard %s", what)
		}
	}
}

func heard(id string, version int64) func([]store.Change, int) bool {
	return func(changes []store.Change, _ int) bool {
		return slices.ContainsFunc(changes, func(c store.Change) bool { return c.JobID == id && c.Version == version })
	}
}

func TestListenHearsAnotherStoreAndRecoversALostConnection(t *testing.T) {
	a, b := openTwo(t)
	l := listen(t, a)
	mustCreate(t, b, job("job-1", "default", 0))
	l.waitFor(t, "the create by another store", heard("job-1", 1))
	if _, err := b.UpdateJob(t.Context(), "job-1", func(j *jobtype.Job) error { j.Percent = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "the update by another store", heard("job-1", 2))
	l.mu.Lock()
	c := l.changes[len(l.changes)-1]
	l.mu.Unlock()
	if c != (store.Change{JobID: "job-1", Version: 2, Tenant: "acme", Kind: "email", Queue: "default", State: jobtype.Queued, RunAt: t0}) {
		t.Errorf("change %+v, want every field of job-1 at version 2", c)
	}

	// Kill the listening connection from another one.
	var killed int
	err := b.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, a.listenName()).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate the listener: %d killed, %v", killed, err)
	}
	l.waitFor(t, "that changes were missed", func(_ []store.Change, missed int) bool { return missed == 1 })
	mustCreate(t, b, job("job-2", "default", 1))
	l.waitFor(t, "a create after the reconnect", heard("job-2", 1))
}

func TestListenersOfOtherSchemasHearNothing(t *testing.T) {
	a, _ := openTwo(t)
	other, _ := openTwo(t)
	la, lo := listen(t, a), listen(t, other)
	mustCreate(t, a, job("job-a", "default", 0))
	mustCreate(t, other, job("job-o", "default", 0))
	la.waitFor(t, "its own schema's job", heard("job-a", 1))
	lo.waitFor(t, "its own schema's job", heard("job-o", 1))
	for _, l := range []*listener{la, lo} {
		l.mu.Lock()
		if len(l.changes) != 1 {
			t.Errorf("a listener heard %v, want its own schema's one change", l.changes)
		}
		l.mu.Unlock()
	}
}

func TestChangedSinceListsWritesCommittedAfterTheCursor(t *testing.T) {
	a, b := openTwo(t)
	mustCreate(t, a, job("before", "default", 0))
	mustCreate(t, a, job("touched", "default", 1))
	cur, err := b.ChangeCursor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, job("after", "default", 2))
	if _, err := a.UpdateJob(t.Context(), "touched", func(j *jobtype.Job) error { j.Step = "x"; return nil }); err != nil {
		t.Fatal(err)
	}
	// An invisible write raises no version and is no change.
	if _, err := a.UpdateJob(t.Context(), "before", func(j *jobtype.Job) error { j.LeaseID = "x"; return nil }); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := b.ListJobs(t.Context(), store.ListFilter{ChangedSince: cur})
	if err != nil {
		t.Fatal(err)
	}
	// "before" may be listed too, at the version it had then, if some
	// transaction (of any session on the server) was in flight when the
	// cursor was taken: the cursor is that snapshot's xmin.
	var ids []string
	for _, j := range jobs {
		if j.ID == "before" && j.Version == 1 {
			continue
		}
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []string{"after", "touched"}) {
		t.Errorf("changed since the cursor, in change order: %v, want [after touched]", ids)
	}
	if _, _, err := b.ListJobs(t.Context(), store.ListFilter{ChangedSince: "nonsense"}); !errors.Is(err, jobtype.ErrInvalidPageToken) {
		t.Errorf("a cursor it did not issue: %v, want ErrInvalidPageToken", err)
	}
}

func TestListPagesByBytes(t *testing.T) {
	s, _ := openTwo(t)
	big := json.RawMessage(`"` + string(make([]byte, 0)) + fmt.Sprintf("%01000d", 0) + `"`)
	for i := range 10 {
		j := job(fmt.Sprintf("job-%d", i), "default", i)
		j.Payload = big
		mustCreate(t, s, j)
	}
	one := (&jobtype.Job{ID: "job-0", Tenant: "acme", Kind: "email", Queue: "default", State: jobtype.Queued, Payload: big}).Size()
	var seen []string
	token := ""
	for pages := 0; ; pages++ {
		jobs, next, err := s.ListJobs(t.Context(), store.ListFilter{Full: true, MaxBytes: 3 * one, Limit: 100, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) > 3 || len(jobs) == 0 {
			t.Fatalf("page of %d jobs, want 1 to 3", len(jobs))
		}
		for _, j := range jobs {
			seen = append(seen, j.ID)
		}
		if next == "" {
			break
		}
		token = next
	}
	want := []string{"job-9", "job-8", "job-7", "job-6", "job-5", "job-4", "job-3", "job-2", "job-1", "job-0"}
	if !slices.Equal(seen, want) {
		t.Errorf("paged %v, want %v", seen, want)
	}
}

func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	if !errors.Is(err, jobtype.ErrUnavailable) {
		t.Errorf("open of a closed port: %v, want ErrUnavailable", err)
	}
}

// A claim under rules must not read the backlog of a queue without room:
// with 20000 ready jobs in a queue at its max_running, a claim (and
// NextReady) reads a few pages, not the queue.
func TestClaimReadsNoBacklogOfAFullQueue(t *testing.T) {
	s, _ := openTwo(t)
	_, err := s.pool.Exec(t.Context(), `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			attempt, max_attempts, unique_key, created_at, run_at, worker_id, lease_id)
		SELECT 'capped-'||i, 'acme', 'email', 'capped', CASE WHEN i <= 2 THEN 'running' ELSE 'queued' END,
			1, 0, '', 0, 1, '', $1::timestamptz + i * interval '1 ms', $1::timestamptz + i * interval '1 ms', '', ''
		FROM generate_series(1, 20000) AS i`, t0)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, job("free-1", "free", 3600))
	if _, err := s.pool.Exec(t.Context(), "VACUUM ANALYZE jobs"); err != nil {
		t.Fatal(err)
	}
	f := store.ClaimFilter{Now: t0.Add(2 * time.Hour), Kinds: []string{"email"},
		Limits: map[string]store.QueueLimit{"capped": {MaxRunning: 2}}}
	for _, ready := range []bool{true, false} {
		query, args := pickQuery(f, ready, 1, "j.seq", false, 1)
		var plan []byte
		err := pgx.BeginFunc(t.Context(), s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), prelude, []int64(nil)); err != nil {
				return err
			}
			return tx.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&plan)
		})
		if err != nil {
			t.Fatal(err)
		}
		var out []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			}
		}
		if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
			t.Fatalf("plan %s: %v", plan, err)
		}
		if pages := out[0].Plan.Hit + out[0].Plan.Read; pages > 100 {
			t.Errorf("ready %v: the pick read %d pages, want a few: it walked the full queue's jobs", ready, pages)
		}
	}
	j, _, err := store.ClaimOne(t.Context(), s, f, store.Claim{WorkerID: "w", LeaseID: "l", Now: f.Now, Lease: time.Minute})
	if err != nil || j.ID != "free-1" {
		t.Errorf("claim: %s, %v; want free-1, the one job with room", j.ID, err)
	}
}

// Replicas ticking at once start one run of a schedule per period, and
// the end of a run, recorded with its job's end, counts on every one.
func TestSchedulesTickedOnTwoStoresStartOneRunPerPeriod(t *testing.T) {
	a, b := openTwo(t)
	var n atomic.Int64
	run := func(now time.Time) store.ScheduleRun {
		j := job(fmt.Sprintf("nightly-%d", n.Add(1)), "default", 0)
		j.CreatedAt, j.UpdatedAt, j.RunAt = now, now, now
		return store.ScheduleRun{Name: "nightly", Every: time.Minute, Job: j}
	}
	for round, now := range []time.Time{t0, t0.Add(30 * time.Second), t0.Add(2 * time.Minute)} {
		var (
			mu      sync.Mutex
			started []string
			wg      sync.WaitGroup
		)
		for i := range 8 {
			s := []*Store{a, b}[i%2]
			wg.Go(func() {
				created, err := s.RunSchedules(t.Context(), []store.ScheduleRun{run(now)}, now)
				if err != nil {
					t.Errorf("run schedules: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, j := range created {
					started = append(started, j.ID)
				}
			})
		}
		wg.Wait()
		want := 1
		if round == 1 {
			want = 0 // the first run ended at t0+1s: not due before t0+61s
		}
		if len(started) != want {
			t.Fatalf("round %d: 8 ticks on two stores started %v, want %d run", round, started, want)
		}
		if len(started) == 1 {
			if _, err := b.UpdateJob(t.Context(), started[0], func(j *jobtype.Job) error {
				j.State, j.FinishedAt = jobtype.Succeeded, now.Add(time.Second)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An update whose job another writer changes between every read and its
// write stops trying without a lock after optimisticUpdates tries and
// then locks the row for its read, so it commits however busy the job.
func TestUpdateOfAJobThatKeepsChangingLocksItAndCommits(t *testing.T) {
	s, other := openTwo(t)
	mustCreate(t, s, job("job-1", "default", 0))
	calls := 0
	got, err := s.UpdateJob(t.Context(), "job-1", func(j *jobtype.Job) error {
		calls++
		// Another replica writes the job after each read but the locked
		// one, whose lock that write would wait for.
		if calls <= optimisticUpdates {
			if _, err := other.UpdateJob(t.Context(), "job-1", func(j *jobtype.Job) error { j.Step = fmt.Sprint(calls); return nil }); err != nil {
				return err
			}
		}
		j.Percent = 50
		return nil
	})
	if err != nil || calls != optimisticUpdates+1 {
		t.Fatalf("update: %v after %d calls, want success after %d", err, calls, optimisticUpdates+1)
	}
	stored, _ := s.GetJob(t.Context(), "job-1")
	want := fmt.Sprint(optimisticUpdates)
	if got.Percent != 50 || got.Step != want || got.Version != optimisticUpdates+2 || fmt.Sprint(stored) != fmt.Sprint(got) {
		t.Errorf("update returned percent %d step %q version %d, stored %+v; want 50, %q (the other's last write) and %d",
			got.Percent, got.Step, got.Version, stored, want, optimisticUpdates+2)
	}
}
