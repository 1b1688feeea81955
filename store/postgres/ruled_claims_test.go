package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// holdQueueLock takes the advisory lock of queue's claims on a
// connection of s's pool, as another replica's claim holds it, and
// returns its release.
func holdQueueLock(t *testing.T, s *Store, queue string) (release func()) {
	t.Helper()
	return holdLock(t, s, lockKey(s.schema, "queue", queue))
}

// holdLock takes the advisory lock key on a connection of s's pool and
// returns its release.
func holdLock(t *testing.T, s *Store, key int64) (release func()) {
	t.Helper()
	conn, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key); err != nil {
			t.Error(err)
		}
		conn.Release()
	}
}

// advisoryWaiters counts the backends of s's database waiting for an
// advisory lock.
func advisoryWaiters(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A ruled claim that waited for its queue's lock behind another
// replica's claim leases its job from when it took effect: a lease
// counted from before the wait had the job LOST as its worker started
// it (an outside probe: a 3 s lease, a 4 s wait).
func TestARuledClaimThatWaitedForTheLockLeasesFromWhenItTookEffect(t *testing.T) {
	s, _ := openTwo(t)
	mustCreate(t, s, job("ruled-1", "ruled", 0))
	release := holdQueueLock(t, s, "ruled")
	now := t0.Add(time.Minute)
	f := store.ClaimFilter{Now: now, Limits: map[string]store.QueueLimit{"ruled": {MaxRunning: 5, Rate: jobtype.Rate{Limit: 10, Per: time.Minute}}}}
	type claimed struct {
		got []store.Claimed
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		got, err := s.ClaimJobs(t.Context(), f, store.Claim{WorkerID: "w", LeaseIDs: []string{"l"}, Now: now,
			Clock: func() time.Time { return now }, Lease: 3 * time.Second})
		done <- claimed{got, err}
	}()
	waitUntil(t, 30*time.Second, "the claim waiting for the queue's lock", func() bool { return advisoryWaiters(t, s) == 1 })
	const held = 500 * time.Millisecond
	time.Sleep(held) // the other replica's claim, holding the lock
	release()
	c := <-done
	if c.err != nil || len(c.got) != 1 {
		t.Fatalf("claim: %v, %v", c.got, c.err)
	}
	j := c.got[0].Job
	if j.StartedAt.Before(now.Add(held)) || !j.UpdatedAt.Equal(j.StartedAt) || !j.LeaseExpiresAt.Equal(j.StartedAt.Add(3*time.Second)) {
		t.Errorf("started %v, updated %v, lease until %v; want started at least %v after the claim's %v, the lease 3s from it",
			j.StartedAt, j.UpdatedAt, j.LeaseExpiresAt, held, now)
	}
	var at time.Time
	if err := s.pool.QueryRow(t.Context(), "SELECT at FROM queue_starts WHERE queue = 'ruled'").Scan(&at); err != nil || !at.Equal(j.StartedAt) {
		t.Errorf("the rate recorded the start at %v (%v), want %v", at, err, j.StartedAt)
	}
}

// A fair claim of a ruled queue takes its jobs one statement at a time,
// yet they all took effect at once: they share one start, after any wait
// for the queue's lock, and the rate records them all at it. Each counted
// the time its statement ran, so a rate's window saw them start apart,
// and a claim a window later found room for one of them only (the
// engine test of a rate per tenant, on a loaded machine); and the turns
// after a guarded claim that waited for the lock counted from before
// that wait.
func TestTheJobsOfAFairClaimThatWaitedShareOneStart(t *testing.T) {
	for _, held := range []string{"queue", "fair"} {
		t.Run("the "+held+" lock held", func(t *testing.T) {
			s, _ := openTwo(t)
			for i, tenant := range []string{"a", "a", "b", "b"} {
				j := job(fmt.Sprintf("fair-%d", i), "ruled", i)
				j.Tenant = tenant
				mustCreate(t, s, j)
			}
			release := holdLock(t, s, lockKey(s.schema, held, "ruled"))
			now := t0.Add(time.Minute)
			f := store.ClaimFilter{Now: now, Limits: map[string]store.QueueLimit{"ruled": {Rate: jobtype.Rate{Limit: 2, Per: time.Minute, PerTenant: true}}}}
			type claimed struct {
				got []store.Claimed
				err error
			}
			done := make(chan claimed, 1)
			begin := time.Now()
			go func() {
				got, err := s.ClaimJobs(t.Context(), f, store.Claim{WorkerID: "w", LeaseIDs: []string{"l1", "l2", "l3", "l4"}, Now: now,
					Clock: func() time.Time { return now.Add(time.Since(begin)) }, Lease: time.Minute})
				done <- claimed{got, err}
			}()
			waitUntil(t, 30*time.Second, "the claim waiting for the lock", func() bool { return advisoryWaiters(t, s) == 1 })
			const wait = 300 * time.Millisecond
			time.Sleep(wait) // another replica's claim, holding the lock
			release()
			c := <-done
			if c.err != nil || len(c.got) != 4 {
				t.Fatalf("claim: %d jobs, %v; want 4", len(c.got), c.err)
			}
			start := c.got[0].Job.StartedAt
			if held == "queue" && start.Before(now.Add(wait)) {
				t.Errorf("started %v, want at least %v after the claim's %v", start, wait, now)
			}
			for _, cl := range c.got {
				if j := cl.Job; !j.StartedAt.Equal(start) || !j.LeaseExpiresAt.Equal(start.Add(time.Minute)) {
					t.Errorf("job %s of tenant %s started %v, lease until %v; want all started at %v", j.ID, j.Tenant, j.StartedAt, j.LeaseExpiresAt, start)
				}
			}
			rows, err := s.pool.Query(t.Context(), "SELECT at FROM queue_starts WHERE queue = 'ruled'")
			if err != nil {
				t.Fatal(err)
			}
			ats, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
			if err != nil || len(ats) != 4 {
				t.Fatalf("the rate recorded %v (%v), want 4 starts", ats, err)
			}
			for _, at := range ats {
				if !at.Equal(start) {
					t.Errorf("the rate recorded a start at %v, want %v", at, start)
				}
			}
		})
	}
}

// Claims of one Store on a ruled queue whose lock another replica holds
// wait for it on one connection, the others in the Store, and read
// their time when their turn comes: twenty of them no longer hold every
// connection of the pool, so the Store's other writes go on.
func TestRuledClaimsWaitForTheLockOnOneConnection(t *testing.T) {
	s, _ := openTwo(t)
	const claims = 20
	for i := range claims {
		mustCreate(t, s, job(fmt.Sprintf("ruled-%02d", i), "ruled", i))
	}
	release := holdQueueLock(t, s, "ruled")
	now := t0.Add(time.Minute)
	f := store.ClaimFilter{Now: now, Limits: map[string]store.QueueLimit{"ruled": {MaxRunning: claims}}}
	errs := make(chan error, claims)
	for i := range claims {
		go func() {
			_, err := s.ClaimJobs(t.Context(), f, store.Claim{WorkerID: "w", LeaseIDs: []string{fmt.Sprint("l", i)}, Now: now,
				Clock: func() time.Time { return now }, Lease: time.Minute})
			errs <- err
		}()
	}
	waitUntil(t, 30*time.Second, "one claim waiting for the lock, the others for their turn", func() bool {
		return advisoryWaiters(t, s) == 1 && s.ruledTurns.waiting.Load() == claims-1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := s.CreateJob(ctx, job("other-1", "default", 0)); err != nil {
		t.Fatalf("a write while the claims wait: %v", err)
	}
	release()
	for range claims {
		if err := <-errs; err != nil {
			t.Errorf("claim: %v", err)
		}
	}
}
