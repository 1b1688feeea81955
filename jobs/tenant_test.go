package jobs_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// batches is a TenantWatchOptions.Send that keeps what it was sent.
type batches struct {
	mu      sync.Mutex
	got     [][]jobtype.Job
	deleted [][]string
	tokens  []string
	read    int // batches next has returned
	sent    chan struct{}
}

func newBatches() *batches { return &batches{sent: make(chan struct{}, 1000)} }

func (b *batches) send(jobs []jobtype.Job, deleted []string, token string) error {
	b.mu.Lock()
	b.got = append(b.got, jobs)
	b.deleted = append(b.deleted, deleted)
	b.tokens = append(b.tokens, token)
	b.mu.Unlock()
	b.sent <- struct{}{}
	return nil
}

// next waits for the next batch and returns its ids and versions.
func (b *batches) next(t *testing.T) (map[string]int64, string) {
	t.Helper()
	select {
	case <-b.sent:
	case <-time.After(5 * time.Second):
		t.Fatal("no batch within 5s")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.read
	b.read++
	m := map[string]int64{}
	for _, j := range b.got[i] {
		m[j.ID] = j.Version
	}
	return m, b.tokens[i]
}

func TestWatchTenantSendsRecentJobsThenChanges(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	b := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	c := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	submit(t, e, jobs.SubmitRequest{Tenant: "other"})

	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{PageSize: 2, Deadline: soon(), Send: out.send})
	})
	first, token := out.next(t)
	if len(first) != 2 || first[b.ID] != 1 || first[c.ID] != 1 || token == "" {
		t.Fatalf("first batch %v (token %q); want the 2 most recent jobs b and c", first, token)
	}

	submit(t, e, jobs.SubmitRequest{Tenant: "other"}) // not acme's: no batch
	if _, err := e.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	changed, _ := out.next(t)
	if len(changed) != 1 || changed[a.ID] != 2 {
		t.Fatalf("batch after cancel %v; want only a at v2", changed)
	}

	cancel()
	await(t, done)
}

func TestWatchTenantResumesFromItsToken(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	a := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})

	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: out.send})
	})
	_, token := out.next(t)
	cancel() // the client disconnects
	await(t, done)

	b := submit(t, e, jobs.SubmitRequest{Tenant: "acme"}) // while it was away
	resumed := newBatches()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done = async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx2, "acme", jobs.TenantWatchOptions{ResumeToken: token, Deadline: soon(), Send: resumed.send})
	})
	caughtUp, _ := resumed.next(t)
	if caughtUp[b.ID] != 1 {
		t.Fatalf("resumed batch %v; want the job submitted while away", caughtUp)
	}
	if v, ok := caughtUp[a.ID]; ok && v != 1 {
		t.Errorf("resumed batch repeats a at v%d", v)
	}
	if _, err := e.Cancel(ctx2, b.ID); err != nil {
		t.Fatal(err)
	}
	changed, _ := resumed.next(t)
	if len(changed) != 1 || changed[b.ID] != 2 {
		t.Fatalf("batch after cancel %v; want only b at v2", changed)
	}
	cancel2()
	await(t, done)
}

// nextDeleted waits for the next batch and returns the ids of deleted
// jobs it carried, and its token.
func (b *batches) nextDeleted(t *testing.T) ([]string, string) {
	t.Helper()
	_, token := b.next(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deleted[b.read-1], token
}

func TestWatchTenantAnnouncesDeletedJobsAndResumesWithThem(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	a := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	b := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	for _, j := range []jobtype.Job{a, b} {
		if _, err := e.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}

	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: out.send})
	})
	_, token := out.next(t) // the recent jobs
	if err := e.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	deleted, after := out.nextDeleted(t)
	if !slices.Equal(deleted, []string{a.ID}) || after == token {
		t.Fatalf("batch after a delete: deleted %v, token changed %v; want [%s] and a new token", deleted, after != token, a.ID)
	}
	cancel() // the client disconnects
	await(t, done)

	if err := e.Delete(context.Background(), b.ID); err != nil { // while it was away
		t.Fatal(err)
	}
	resumed := newBatches()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done = async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx2, "acme", jobs.TenantWatchOptions{ResumeToken: token, Deadline: soon(), Send: resumed.send})
	})
	var all []string
	for !slices.Contains(all, b.ID) {
		ids, _ := resumed.nextDeleted(t)
		all = append(all, ids...)
	}
	if !slices.Contains(all, a.ID) {
		t.Errorf("a stream resumed from before both deletions announced %v; want both %s and %s", all, a.ID, b.ID)
	}
	cancel2()
	await(t, done)
}

func TestWatchTenantRefusesBadInput(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	send := func([]jobtype.Job, []string, string) error { return nil }
	ctx := context.Background()
	if err := e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{ResumeToken: "nonsense", Send: send}); !isInvalid(err, "resume_token") {
		t.Errorf("bad token: %v", err)
	}
	if err := e.WatchTenant(ctx, "a b", jobs.TenantWatchOptions{Send: send}); !isInvalid(err, "tenant") {
		t.Errorf("bad tenant: %v", err)
	}
	// A token from within a window made up, or with its parts made up
	// around this server's cursor.
	var token string
	got := func(_ []jobtype.Job, _ []string, tok string) error {
		token = tok
		return errors.New("enough")
	}
	if err := e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Send: got}); err == nil || token == "" {
		t.Fatalf("a stream's first token: %q, %v", token, err)
	}
	cursor := strings.TrimPrefix(token, "t2.")
	for _, tok := range []string{"t3.", "t3.a~b", "t3.x~y~z", "t3." + cursor + "~" + cursor + "~not-a-page", "t3." + cursor + "~" + cursor + "~~"} {
		if err := e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{ResumeToken: tok, Deadline: soon(), Send: send}); !isInvalid(err, "resume_token") {
			t.Errorf("token %q: %v, want resume_token invalid", tok, err)
		}
	}
	// Every tenant ("*") is a list's or a bulk action's, and the refusal
	// says so rather than quote the rule of names.
	err := e.WatchTenant(ctx, jobs.AllTenants, jobs.TenantWatchOptions{Send: send})
	if !isInvalid(err, "tenant") || !strings.Contains(err.Error(), "name one tenant") {
		t.Errorf("every tenant: %v; want invalid_argument saying to name one tenant", err)
	}
}

func TestWatchTenantSendsKeepalivesAndEndsAtItsDeadline(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	out := newBatches()
	// A second's lifetime: the first batch's reads took most of 200 ms
	// on a loaded machine against PostgreSQL, leaving room for one
	// keepalive.
	err := e.WatchTenant(context.Background(), "acme", jobs.TenantWatchOptions{
		Deadline:  time.Now().Add(time.Second),
		Keepalive: 30 * time.Millisecond,
		Send:      out.send,
	})
	if err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.got) < 3 {
		t.Fatalf("%d batches, want the (empty) first one and at least 2 keepalives", len(out.got))
	}
	for i, b := range out.got {
		if len(b) != 0 || out.tokens[i] == "" {
			t.Errorf("batch %d: %d jobs, token %q; want empty with a token", i, len(b), out.tokens[i])
		}
	}
}

// listHook runs hook once right after the first ListJobs has read the
// store and before the engine sees the result.
type listHook struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *listHook) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	jobs, next, err := s.Store.ListJobs(ctx, f)
	if s.hook != nil {
		s.once.Do(s.hook)
	}
	return jobs, next, err
}

func TestWatchTenantSeesAChangeBetweenItsFirstReadAndItsPark(t *testing.T) {
	hs := &listHook{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	hs.hook = func() {
		if _, err := e.Cancel(ctx, j.ID); err != nil {
			t.Error(err)
		}
	}
	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: out.send})
	})
	if first, _ := out.next(t); first[j.ID] != 1 {
		t.Fatalf("first batch %v, want the job at v1", first)
	}
	if changed, _ := out.next(t); changed[j.ID] != 2 {
		t.Fatalf("second batch %v, want the cancel (v2)", changed)
	}
	cancel()
	await(t, done)
}

// slowCreate holds CreateJob of jobs of kind "slow" until release is
// closed, telling blocked once it holds one: a submission stamped long
// before it commits (queued behind other writes, or waiting for another
// process's write lock).
type slowCreate struct {
	store.Store
	blocked chan struct{}
	release chan struct{}
}

func (s *slowCreate) CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	if j.Kind == "slow" {
		close(s.blocked)
		<-s.release
	}
	return s.Store.CreateJob(ctx, j)
}

func TestWatchTenantSeesAJobThatCommitsLongAfterItsStamp(t *testing.T) {
	clock := newFakeClock()
	hs := &slowCreate{Store: openStore(t), blocked: make(chan struct{}), release: make(chan struct{})}
	// No Deadline: it would be read by the fake clock. ctx ends the watch.
	e := newEngineOver(t, hs, jobs.Config{Now: clock.Now})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Send: out.send})
	})
	out.next(t) // the (empty) first batch

	slow := async(func() (jobtype.Job, error) {
		return e.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "slow"})
	})
	<-hs.blocked // stamped, not committed
	clock.Advance(time.Minute)
	fast := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	got, tokenWhileInFlight := out.next(t)
	if got[fast.ID] != 1 {
		t.Fatalf("batch %v; want the fast job", got)
	}

	close(hs.release)
	s, err := await(t, slow)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := out.next(t); got[s.ID] != 1 {
		t.Fatalf("batch %v; want the job that committed late", got)
	}
	cancel()
	await(t, done)

	// A client that disconnected while the slow job was in flight
	// resumes with the token it had then, and still gets the job.
	resumed := newBatches()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done = async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx2, "acme", jobs.TenantWatchOptions{ResumeToken: tokenWhileInFlight, Send: resumed.send})
	})
	if got, _ := resumed.next(t); got[s.ID] != 1 {
		t.Fatalf("resumed batch %v; want the job that committed late", got)
	}
	cancel2()
	await(t, done)
}

func TestWatchTenantResumedWithATokenFromAClockAheadMissesNothing(t *testing.T) {
	st := openStore(t)
	clock := newFakeClock()
	// Replica a's clock runs an hour ahead of replica b's.
	a := newEngineOver(t, st, jobs.Config{Now: func() time.Time { return clock.Now().Add(time.Hour) }})
	b := newEngineOver(t, st, jobs.Config{Now: clock.Now})

	ctx, cancel := context.WithCancel(context.Background())
	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, a.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Send: out.send})
	})
	_, token := out.next(t)
	cancel() // the client disconnects from a ...
	await(t, done)

	j := submit(t, b, jobs.SubmitRequest{Tenant: "acme"}) // ... a job is submitted on b ...

	resumed := newBatches() // ... and the client resumes on b
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done = async(func() (struct{}, error) {
		return struct{}{}, b.WatchTenant(ctx2, "acme", jobs.TenantWatchOptions{ResumeToken: token, Send: resumed.send})
	})
	if got, _ := resumed.next(t); got[j.ID] != 1 {
		t.Fatalf("resumed batch %v; want the job submitted on b", got)
	}
	clock.Advance(time.Second)
	if _, err := b.Cancel(ctx2, j.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := resumed.next(t); got[j.ID] != 2 {
		t.Fatalf("batch after cancel %v; want the job at v2", got)
	}
	cancel2()
	await(t, done)
}

// A token later than the database's changes (one a caller made up, or
// one issued before the database was restored from a backup, here one of
// a busier database) starts the stream over, with the recent jobs, as no
// token does: it would otherwise read nothing until the database caught
// up with it, and the stream would be blind meanwhile.
func TestWatchTenantStartsOverFromATokenAheadOfTheDatabase(t *testing.T) {
	busy, _ := newEngine(t, jobs.Config{})
	for range 20 {
		submit(t, busy, jobs.SubmitRequest{Tenant: "acme"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, busy.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: out.send})
	})
	_, ahead := out.next(t)
	cancel()
	await(t, done)

	restored, _ := newEngine(t, jobs.Config{})
	old := submit(t, restored, jobs.SubmitRequest{Tenant: "acme"})
	resumed := newBatches()
	// The stream says it started over before its first batch, so that
	// its client knows to take what follows whatever the versions.
	var startedOver, startedBeforeFirst atomic.Int32
	send := func(js []jobtype.Job, deleted []string, token string) error {
		startedBeforeFirst.CompareAndSwap(0, startedOver.Load()+1)
		return resumed.send(js, deleted, token)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done = async(func() (struct{}, error) {
		return struct{}{}, restored.WatchTenant(ctx2, "acme", jobs.TenantWatchOptions{
			ResumeToken: ahead, Deadline: soon(), Send: send, StartedOver: func() { startedOver.Add(1) },
		})
	})
	recent, _ := resumed.next(t)
	if recent[old.ID] != 1 {
		t.Fatalf("a stream resumed from a token ahead of the database began with %v; want it started over with the recent job", recent)
	}
	if got := startedBeforeFirst.Load() - 1; got != 1 {
		t.Fatalf("StartedOver was called %d times before the first batch; want once", got)
	}
	fresh := submit(t, restored, jobs.SubmitRequest{Tenant: "acme"})
	changed, token := resumed.next(t)
	if changed[fresh.ID] != 1 {
		t.Fatalf("then %v; want the job submitted after", changed)
	}
	cancel2()
	await(t, done)
	if got := startedOver.Load(); got != 1 {
		t.Fatalf("StartedOver was called %d times in the stream; want once", got)
	}

	// A token the database can resume from does not start over.
	resumedAgain := newBatches()
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	done = async(func() (struct{}, error) {
		return struct{}{}, restored.WatchTenant(ctx3, "acme", jobs.TenantWatchOptions{
			ResumeToken: token, Deadline: soon(), Send: resumedAgain.send, StartedOver: func() { startedOver.Add(1) },
		})
	})
	later := submit(t, restored, jobs.SubmitRequest{Tenant: "acme"})
	// The job submitted after, and no job at a version the client had
	// not seen. A resume may repeat a job at a version the client has:
	// on PostgreSQL one whose transaction began after the oldest still
	// open anywhere on the server as the token was taken, which another
	// test's transaction can hold back past old's. Whether it started
	// over is what StartedOver says, below.
	for seen := false; !seen; {
		changed, _ := resumedAgain.next(t)
		for id, v := range changed {
			switch {
			case id == later.ID && v == 1:
				seen = true
			case (id == fresh.ID || id == old.ID) && v == 1:
			default:
				t.Fatalf("a stream resumed from its own token sent %v; want the job submitted after, and perhaps again jobs it had", changed)
			}
		}
	}
	cancel3()
	await(t, done)
	if got := startedOver.Load(); got != 1 {
		t.Fatalf("a stream resumed from a token of this database called StartedOver; calls %d, want still 1", got)
	}
}

// pageSizes is a store that records the Limit of every ListJobs.
type pageSizes struct {
	store.Store
	mu     sync.Mutex
	limits []int
}

func (p *pageSizes) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	p.mu.Lock()
	p.limits = append(p.limits, f.Limit)
	p.mu.Unlock()
	return p.Store.ListJobs(ctx, f)
}

// A stream reads the jobs it sends a page of its page size at a time, the
// recent ones it starts with and each window of changes, so that what it
// holds while its client reads is one batch: 1,200 jobs changed at once
// come in batches of at most 100, each job once, the window's last batch
// carrying its token. A burst once woke every stream of a tenant to read
// pages of 500 jobs and hold them, with a copy, while their clients read.
func TestWatchTenantReadsPagesOfItsPageSize(t *testing.T) {
	st := &pageSizes{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit(t, e, jobs.SubmitRequest{Tenant: "acme"})

	out := newBatches()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{PageSize: 100, Deadline: soon(), Send: out.send})
	})
	if recent, token := out.next(t); len(recent) != 1 || token == "" {
		t.Fatalf("first batch %v (token %q); want the one job and a token", recent, token)
	}

	const changed = 1200
	for i := 0; i < changed; i += jobtype.MaxBatchJobs {
		reqs := make([]jobs.SubmitRequest, min(jobtype.MaxBatchJobs, changed-i))
		for k := range reqs {
			reqs[k] = jobs.SubmitRequest{Tenant: "acme", Kind: "k"}
		}
		if _, err := e.SubmitMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token := ""
	for len(seen) < changed {
		var got map[string]int64
		got, token = out.next(t)
		for id := range got {
			if seen[id] {
				t.Fatalf("job %s sent twice", id)
			}
			seen[id] = true
		}
		if len(got) > 100 {
			t.Fatalf("a batch of %d jobs; want at most the page size, 100", len(got))
		}
	}
	if token == "" {
		t.Errorf("the batch with the last changed job carries no token; want the one that ends its window")
	}
	cancel()
	await(t, done)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.limits) < 1+changed/100 || slices.Max(st.limits) > 100 {
		t.Errorf("the stream read %d pages of up to %d jobs; want at least %d, of at most its page size, 100", len(st.limits), slices.Max(st.limits), 1+changed/100)
	}
}

// A stream whose end (its lifetime, or Shutdown) comes part way through a
// window of changes ends there, OK, with a last message whose token
// resumes the window where it stopped: a slow reader that ends at every
// lifetime still gets through a large burst, rather than read its start
// again each time (an outside probe's reader of 5,000 jobs, resumed with
// the token it had, got the same 3,350 jobs at every resume).
func TestAStreamEndedPartWayThroughAWindowResumesWhereItStopped(t *testing.T) {
	e, st := newEngine(t, jobs.Config{})
	const tenant = "slow"
	first := newBatches()
	var burst map[string]bool
	sent := 0
	done := async(func() (struct{}, error) {
		return struct{}{}, e.WatchTenant(context.Background(), tenant, jobs.TenantWatchOptions{PageSize: 4, Deadline: soon(),
			Send: func(js []jobtype.Job, deleted []string, token string) error {
				if len(js) > 0 {
					if sent++; sent == 2 {
						e.Shutdown() // the stream's end, after its second batch of the burst
					}
				}
				return first.send(js, deleted, token)
			}})
	})
	first.next(t) // the (no) recent jobs, and a token
	var reqs []jobs.SubmitRequest
	for range 20 {
		reqs = append(reqs, jobs.SubmitRequest{Tenant: tenant, Kind: "k"})
	}
	made, err := e.SubmitMany(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	burst = map[string]bool{}
	for _, j := range made {
		burst[j.ID] = true
	}
	if _, err := await(t, done); err != nil {
		t.Fatalf("the stream ended part way with %v, want OK", err)
	}
	seen := map[string]bool{}
	first.mu.Lock()
	for _, b := range first.got {
		for _, j := range b {
			seen[j.ID] = true
		}
	}
	token := first.tokens[len(first.tokens)-1]
	first.mu.Unlock()
	if len(seen) != 8 {
		t.Fatalf("the stream sent %d jobs of the burst before its end, want its two batches of 4", len(seen))
	}

	again := newEngineOver(t, st, jobs.Config{})
	rest := newBatches()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resumed := async(func() (struct{}, error) {
		return struct{}{}, again.WatchTenant(ctx, tenant, jobs.TenantWatchOptions{PageSize: 4, ResumeToken: token, Deadline: soon(), Send: rest.send})
	})
	for len(seen) < len(burst) {
		rest.next(t)
		rest.mu.Lock()
		for _, j := range rest.got[rest.read-1] {
			if !burst[j.ID] || seen[j.ID] {
				t.Errorf("the resumed stream sent job %s again, or one not of the burst", j.ID)
			}
			seen[j.ID] = true
		}
		rest.mu.Unlock()
	}
	cancel()
	await(t, resumed)
}
