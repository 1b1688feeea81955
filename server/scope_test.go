package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// wholeReads is the real store, counting, per job id, the reads that
// brought back the job's payload and result (or could have: an update
// and a lease write read the whole row). A read scoped to another tenant
// or a summary brings back neither (store/storetest proves it through
// allocations on every backend), so it is not counted.
type wholeReads struct {
	store.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *wholeReads) note(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reads == nil {
		s.reads = map[string]int{}
	}
	s.reads[id]++
}

func (s *wholeReads) of(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[id]
}

func (s *wholeReads) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	s.note(id)
	return s.Store.GetJob(ctx, id)
}

func (s *wholeReads) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	j, err := s.Store.ReadJob(ctx, id, r)
	if err == nil && !r.Summary {
		s.note(id)
	}
	return j, err
}

func (s *wholeReads) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	s.note(id)
	return s.Store.UpdateJob(ctx, id, update)
}

func (s *wholeReads) WriteLeases(ctx context.Context, ws []store.LeaseWrite, r store.LeaseRules) ([]store.LeaseResult, error) {
	for _, w := range ws {
		s.note(w.JobID)
	}
	return s.Store.WriteLeases(ctx, ws, r)
}

// largePayload is a payload of about 255 KB, the size of the probe's.
func largePayload(t *testing.T) *structpb.Value {
	t.Helper()
	v, err := structpb.NewValue(map[string]any{"pad": strings.Repeat("x", 255_000)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sameNotFound fails unless theirs and missing are the same not_found:
// code and message.
func sameNotFound(t *testing.T, theirs error, id string, missing error) {
	t.Helper()
	var a, b *connect.Error
	if !errors.As(theirs, &a) || !errors.As(missing, &b) {
		t.Fatalf("errors %v and %v, want connect errors", theirs, missing)
	}
	// Each names the id asked for, and says nothing else of the job.
	if a.Code() != connect.CodeNotFound || b.Code() != connect.CodeNotFound ||
		a.Message() != id+": job not found" || b.Message() != missingJobID+": job not found" {
		t.Errorf("a job it may not touch: %v; a job that does not exist: %v; want the same not_found, each naming its id", a, b)
	}
}

// TestAnotherTenantsJobIsNotReadBeforeTheTenantCheck: a client asking
// for another tenant's large job by id gets not_found, as for an id that
// does not exist, and the server never reads that job's payload or
// result to decide it: the tenant check comes first (in the read's
// WHERE), so the answer's cost does not depend on the other tenant's
// payload. Its own jobs it gets whole.
func TestAnotherTenantsJobIsNotReadBeforeTheTenantCheck(t *testing.T) {
	rec := &wholeReads{}
	ts := startServer(t, serverOptions{
		config: server.Config{Tokens: testTokens(t)},
		wrapStore: func(s store.Store) store.Store {
			rec.Store = s
			return rec
		},
	})
	calls := []struct {
		name string
		call func(ctx context.Context, c clients, id string) error
	}{
		{"GetJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
			return err
		}},
		{"WaitJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: id})
			return err
		}},
		{"WatchJob", func(ctx context.Context, c clients, id string) error {
			return firstMessage(c.jobs.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id}))
		}},
		{"CancelJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: id})
			return err
		}},
		{"StartJob", func(ctx context.Context, c clients, id string) error {
			_, err := c.jobs.StartJob(ctx, &jobwatchv1.StartJobRequest{JobId: id})
			return err
		}},
	}
	for _, p := range authProtocols[:2] {
		admin, acme, globex := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, globexToken)
		for _, c := range calls {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				held := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "secret", Hold: true, Payload: largePayload(t)})
				before := rec.of(held.GetId())
				theirs := c.call(ctxTimeout(t, 5*time.Second), globex, held.GetId())
				missing := c.call(ctxTimeout(t, 5*time.Second), globex, missingJobID)
				sameNotFound(t, theirs, held.GetId(), missing)
				if n := rec.of(held.GetId()) - before; n != 0 {
					t.Errorf("%s of another tenant's job read its payload %d times before answering not_found", c.name, n)
				}
				resp, err := admin.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: held.GetId()})
				if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_PENDING || resp.GetJob().GetVersion() != held.GetVersion() {
					t.Errorf("the job changed: %v, %v", resp.GetJob(), err)
				}
			})
		}
		t.Run(p.name+"/GetJob of its own job", func(t *testing.T) {
			mine := submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "mine", Payload: largePayload(t)})
			resp, err := acme.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: mine.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetJob().GetPayload().GetStructValue().GetFields()["pad"].GetStringValue(); len(got) != 255_000 {
				t.Errorf("its own job came with a payload of %d bytes, want 255000", len(got))
			}
			if n := rec.of(mine.GetId()); n != 1 {
				t.Errorf("GetJob of its own job read it whole %d times, want once", n)
			}
		})
	}
}

// TestAWorkerTokenGetsNotFoundForAJobItMayNotTouch: a worker token bound
// to tenants (or kinds) that names a job outside them in Heartbeat,
// CompleteJob, FailJob or ReleaseJob gets not_found, with the code and message of a
// job that does not exist, whether it sends a made-up lease or the job's
// real one; the job is left as it was and its payload is never read. A
// worker bound to nothing still hears failed_precondition for a lease
// that does not hold, and a bound worker for a job of its own.
func TestAWorkerTokenGetsNotFoundForAJobItMayNotTouch(t *testing.T) {
	rec := &wholeReads{}
	ts := startServer(t, serverOptions{
		config: server.Config{Tokens: testTokens(t)},
		wrapStore: func(s store.Store) store.Store {
			rec.Store = s
			return rec
		},
	})
	calls := []struct {
		name string
		call func(ctx context.Context, c clients, id, lease string) error
	}{
		{"Heartbeat", func(ctx context.Context, c clients, id, lease string) error {
			_, err := c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: id, LeaseId: lease, Percent: 50})
			return err
		}},
		{"CompleteJob", func(ctx context.Context, c clients, id, lease string) error {
			_, err := c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: id, LeaseId: lease})
			return err
		}},
		{"FailJob", func(ctx context.Context, c clients, id, lease string) error {
			_, err := c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: id, LeaseId: lease,
				Error: &jobwatchv1.JobError{Type: "Boom"}})
			return err
		}},
		{"ReleaseJob", func(ctx context.Context, c clients, id, lease string) error {
			_, err := c.workers.ReleaseJob(ctx, &jobwatchv1.ReleaseJobRequest{JobId: id, LeaseId: lease})
			return err
		}},
	}
	const madeUpLease = "01JZZZZZZZZZZZZZZZZZZZZZZY"
	for _, p := range authProtocols {
		admin := ts.clientsWithToken(p, adminToken)
		scoped := []struct {
			name   string
			worker clients
			tenant string // of the job it may not touch
			kind   string
		}{
			{"a worker of tenant acme on a job of globex", ts.clientsWithToken(p, acmeWorker), "globex", "index"},
			{"a worker of kind enrich on a job of kind resize", ts.clientsWithToken(p, enrichToken), "acme", "resize"},
		}
		for _, w := range scoped {
			for _, c := range calls {
				t.Run(p.name+"/"+c.name+" by "+w.name, func(t *testing.T) {
					kind := fmt.Sprintf("%s-%d", w.kind, fixtureCounter.Add(1))
					if w.kind == "resize" {
						kind = "resize" // the enrich token's kinds are fixed
					}
					submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: w.tenant, Kind: kind, Payload: largePayload(t)})
					lease := claim(t, admin, kind)
					id := lease.GetJob().GetId()
					before := rec.of(id)
					for _, l := range []string{madeUpLease, lease.GetLeaseId()} {
						theirs := c.call(ctxTimeout(t, 5*time.Second), w.worker, id, l)
						missing := c.call(ctxTimeout(t, 5*time.Second), w.worker, missingJobID, l)
						sameNotFound(t, theirs, id, missing)
					}
					if n := rec.of(id) - before; n != 0 {
						t.Errorf("the job was read or written whole %d times before the answer", n)
					}
					got, err := admin.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id})
					if err != nil || got.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING ||
						got.GetJob().GetVersion() != lease.GetJob().GetVersion() || got.GetJob().GetPercent() != 0 {
						t.Errorf("the job changed: %v, %v", got.GetJob(), err)
					}
					// The lease still holds for the worker that has it.
					if err := c.call(ctxTimeout(t, 5*time.Second), admin, id, lease.GetLeaseId()); err != nil {
						t.Errorf("%s by the admin, under the lease: %v", c.name, err)
					}
				})
			}
		}
		t.Run(p.name+"/a stale lease of a job it may touch is failed_precondition", func(t *testing.T) {
			for _, token := range []string{workerToken, acmeWorker} {
				kind := fmt.Sprintf("own-%d", fixtureCounter.Add(1))
				submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: kind})
				lease := claim(t, admin, kind)
				_, err := ts.clientsWithToken(p, token).workers.Heartbeat(ctxTimeout(t, 5*time.Second),
					&jobwatchv1.HeartbeatRequest{JobId: lease.GetJob().GetId(), LeaseId: madeUpLease})
				wantCode(t, err, connect.CodeFailedPrecondition)
				_, err = ts.clientsWithToken(p, token).workers.CompleteJob(ctxTimeout(t, 5*time.Second),
					&jobwatchv1.CompleteJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId()})
				if err != nil {
					t.Errorf("%s completing a job of its own under its lease: %v", token, err)
				}
			}
		})
	}
}
