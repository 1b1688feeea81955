package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// slack is how much later than its bound a write may answer on a loaded
// machine; it only fails a build whose bound is broken (the old code
// waited for the lock's holder, however long).
const slack = 1500 * time.Millisecond

// holdWriteLock takes the file's write lock on a second connection, as
// another process would, and returns its release.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	lock, err := rawDB(t, path).Begin() // BEGIN IMMEDIATE
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { lock.Rollback() }) }
	t.Cleanup(release)
	return release
}

func TestAWriteUnderAHeldLockAnswersUnavailableInBoundedTime(t *testing.T) {
	const lockTimeout = 500 * time.Millisecond
	path := tempPath(t)
	s, err := OpenWith(path, Config{LockTimeout: lockTimeout, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// slow is a store on the same file whose writes wait a minute for the
	// lock: a store of its own, since s's Config must not change under
	// the goroutine that probes s's refused writes.
	slow, err := OpenWith(path, Config{LockTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	holdWriteLock(t, path)

	t.Run("writes with no deadline of their own, queued in this process, each give up after the lock timeout", func(t *testing.T) {
		// Eight at once: they queue on the one writer connection, and that
		// wait counts against the same bound.
		const writers = 8
		elapsed := make([]time.Duration, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				start := time.Now()
				_, errs[i] = s.CreateJob(context.Background(), testJob(fmt.Sprintf("queued-%d", i)))
				elapsed[i] = time.Since(start)
			})
		}
		wg.Wait()
		for i := range writers {
			if !errors.Is(errs[i], jobtype.ErrUnavailable) {
				t.Errorf("write %d: err = %v, want ErrUnavailable", i, errs[i])
			}
			if elapsed[i] > lockTimeout+slack {
				t.Errorf("write %d answered after %v, want about the lock timeout %v", i, elapsed[i], lockTimeout)
			}
		}
		t.Logf("lock timeout %v: %d queued writes answered unavailable after %v", lockTimeout, writers, elapsed)
	})

	t.Run("a write whose caller has a shorter deadline answers deadline exceeded before it, no store failure", func(t *testing.T) {
		const timeout = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		_, err := slow.CreateJob(ctx, testJob("with-deadline"))
		elapsed := time.Since(start)
		// The deadline was the caller's to set: it says nothing of the
		// database, so the write is no store failure.
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jobtype.ErrUnavailable) {
			t.Errorf("err = %v, want context.DeadlineExceeded only", err)
		}
		if elapsed > timeout+slack {
			t.Errorf("answered after %v, want by the caller's deadline %v", elapsed, timeout)
		}
		t.Logf("caller deadline %v, lock timeout 1m: answered after %v: %v", timeout, elapsed, err)
	})

	t.Run("a caller that leaves while waiting hears its own cancellation, not a store failure", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := slow.CreateJob(ctx, testJob("left"))
		if !errors.Is(err, context.Canceled) || errors.Is(err, jobtype.ErrUnavailable) {
			t.Errorf("err = %v, want context.Canceled only", err)
		}
	})

	for _, id := range []string{"queued-0", "with-deadline", "left"} {
		if _, err := s.GetJob(t.Context(), id); !errors.Is(err, jobtype.ErrNotFound) {
			t.Errorf("job %s after a refused write: %v, want ErrNotFound", id, err)
		}
	}
}

func TestAWriteQueuedWhileAnotherProcessHoldsTheLockGivesUpAtItsOwnDeadline(t *testing.T) {
	path := tempPath(t)
	s, err := OpenWith(path, Config{LockTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := holdWriteLock(t, path)

	patient := make(chan error, 1)
	go func() {
		_, err := s.CreateJob(context.Background(), testJob("patient"))
		patient <- err
	}()
	for !s.w.lockHeld.Load() { // the writer waits for the lock with the patient write
		time.Sleep(time.Millisecond)
	}

	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err = s.CreateJob(ctx, testJob("hasty"))
	elapsed := time.Since(start)
	// Its own deadline came before the lock timeout: the caller's, not a
	// store failure, though the message says what it waited for.
	switch {
	case !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jobtype.ErrUnavailable):
		t.Errorf("err = %v, want context.DeadlineExceeded only", err)
	case !strings.Contains(err.Error(), "another process holds the write lock"):
		t.Errorf("err = %v, want it to say another process holds the lock", err)
	}
	if elapsed > timeout+slack {
		t.Errorf("answered after %v, want by its deadline %v", elapsed, timeout)
	}
	t.Logf("queued behind a held lock with a %v deadline: answered after %v: %v", timeout, elapsed, err)

	release()
	if err := <-patient; err != nil {
		t.Errorf("the patient write, once the lock is free: %v", err)
	}
	if _, err := s.GetJob(t.Context(), "patient"); err != nil {
		t.Errorf("patient: %v", err)
	}
	if _, err := s.GetJob(t.Context(), "hasty"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("hasty: %v, want ErrNotFound", err)
	}
}

func TestAWriteWhoseCallerLeftBeforeTheCommitWritesNothing(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	if _, err := s.CreateJob(t.Context(), testJob("job-1")); err != nil {
		t.Fatal(err)
	}

	t.Run("the caller leaves after the change, before the commit", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := s.UpdateJob(ctx, "job-1", func(j *jobtype.Job) error {
			j.Percent = 50
			cancel() // the client hangs up while its write is in the transaction
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if strings.Contains(err.Error(), "already been committed or rolled back") {
			t.Errorf("err = %v: the outcome was left to database/sql's race", err)
		}
		got, err := s.GetJob(t.Context(), "job-1")
		if err != nil || got.Percent != 0 || got.Version != 1 {
			t.Errorf("job-1 = %+v, %v; want it unchanged at version 1", got, err)
		}
	})

	t.Run("the store writes on afterwards", func(t *testing.T) {
		got, err := s.UpdateJob(t.Context(), "job-1", func(j *jobtype.Job) error { j.Percent = 60; return nil })
		if err != nil || got.Percent != 60 || got.Version != 2 {
			t.Fatalf("update after a left caller = %+v, %v; want percent 60 at version 2", got, err)
		}
	})

	t.Run("a write that committed stays committed when its caller leaves afterwards", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		created, err := s.CreateJob(ctx, testJob("job-2"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetJob(t.Context(), "job-2"); err != nil || got.Version != created.Version {
			t.Errorf("job-2 = %+v, %v; want the acknowledged job", got, err)
		}
	})
}

// TestStoreFailuresAreLoggedOncePerEpisode makes the file refuse writes
// as a full disk or a read-only file would (SQLite's own limits on the
// writer connection produce the very errors), then lets it recover.
func TestStoreFailuresAreLoggedOncePerEpisode(t *testing.T) {
	tests := []struct {
		name, fail, recover, cause string
	}{
		{"a full disk", "PRAGMA max_page_count = 1", "PRAGMA max_page_count = 1073741823", "database or disk is full"},
		{"a read-only file", "PRAGMA query_only = 1", "PRAGMA query_only = 0", "readonly database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := openWithoutFreePages(t)
			if _, err := s.write.Exec(tt.fail); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if i == 2 {
					// A sweep with nothing to delete changes nothing, so it
					// commits (or fails) without ending the episode.
					if _, err := s.DeleteFinishedBefore(t.Context(), time.Now(), 1000); err != nil && !errors.Is(err, jobtype.ErrUnavailable) {
						t.Fatal(err)
					}
				}
				j := testJob(fmt.Sprintf("during-%d", i))
				j.Payload = []byte(`"` + strings.Repeat("x", 8192) + `"`) // needs new pages
				if _, err := s.CreateJob(t.Context(), j); !errors.Is(err, jobtype.ErrUnavailable) {
					t.Fatalf("write %d: err = %v, want ErrUnavailable", i, err)
				}
			}
			if _, err := s.write.Exec(tt.recover); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := s.CreateJob(t.Context(), testJob(fmt.Sprintf("after-%d", i))); err != nil {
					t.Fatal(err)
				}
			}

			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n != 1 {
				t.Errorf("%d warnings, want 1 for the episode:\n%s", n, out)
			}
			if !strings.Contains(out, tt.cause) {
				t.Errorf("the warning does not carry the cause %q:\n%s", tt.cause, out)
			}
			if n := strings.Count(out, "level=INFO"); n != 1 || !strings.Contains(out, "refused_writes=") {
				t.Errorf("want one info line for the recovery, counting the refused writes:\n%s", out)
			}
		})
	}

	t.Run("errors that are not store failures log nothing", func(t *testing.T) {
		var logs syncBuffer
		s, err := OpenWith(tempPath(t), Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.UpdateJob(t.Context(), "nosuchjob", func(*jobtype.Job) error { return nil }); !errors.Is(err, jobtype.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.CreateJob(ctx, testJob("left"))
		if logs.String() != "" {
			t.Errorf("logged %s", logs.String())
		}
	})
}

func TestAUniqueKeyConflict(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	first := testJob("job-1")
	first.UniqueKey = "nightly"
	if _, err := s.CreateJob(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second := testJob("job-2")
	second.UniqueKey = "nightly"

	t.Run("names the active job", func(t *testing.T) {
		_, err := s.CreateJob(t.Context(), second)
		var conflict *jobtype.ConflictError
		if !errors.As(err, &conflict) || conflict.ActiveID != "job-1" {
			t.Fatalf("err = %v, want a ConflictError naming job-1", err)
		}
	})

	t.Run("whose lookup fails reports the lookup's failure, not the bare violation", func(t *testing.T) {
		s.holderQuery = "SELECT id FROM no_such_table WHERE ? AND ? AND ?"
		defer func() { s.holderQuery = holderQuery }()
		_, err := s.CreateJob(t.Context(), second)
		if err == nil || !strings.Contains(err.Error(), "look up the active job") || !strings.Contains(err.Error(), "no_such_table") {
			t.Fatalf("err = %v, want the lookup's own error", err)
		}
		if _, err := s.GetJob(t.Context(), "job-2"); !errors.Is(err, jobtype.ErrNotFound) {
			t.Errorf("job-2: %v, want ErrNotFound", err)
		}
	})
}

// syncBuffer collects logs written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
