package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// benchWriters are the numbers of concurrent writers the write benchmarks
// run with. 2 and 32 are the cases of the first baseline (GOMAXPROCS 2
// and 16 times that), so benchstat can compare them across versions.
var benchWriters = []int{1, 2, 8, 32, 128}

// BenchmarkWrite measures the store's write path: one CreateJob per op,
// by a number of concurrent writers, with full durability
// (synchronous=FULL: a write returns after the fsync of its commit).
// With one commit per write more writers get no more done; with group
// commit (docs/DESIGN-NOTES.md) concurrent writes share commits. Compare with
// benchstat:
//
//	go test ./store/sqlite/ -run '^$' -bench 'BenchmarkWrite' -count 6
func BenchmarkWrite(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openBench(b)
			var n atomic.Int64
			cpu := runWriters(b, writers, func() error {
				_, err := s.CreateJob(context.Background(), benchJob(n.Add(1)))
				return err
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/write")
		})
	}
}

// BenchmarkWriteCycle measures a job's three writes: one op is a submit
// (CreateJob), a claim (ClaimJob, of whichever job is first) and a
// completion (UpdateJob of the claimed job), by a number of concurrent
// writers, as in-process workers and submitters would make them.
func BenchmarkWriteCycle(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openBench(b)
			ctx := context.Background()
			var n atomic.Int64
			at := benchJob(0).CreatedAt
			cpu := runWriters(b, writers, func() error {
				if _, err := s.CreateJob(ctx, benchJob(n.Add(1))); err != nil {
					return err
				}
				j, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: at}, store.Claim{WorkerID: "w", LeaseID: "lease", Now: at, Lease: time.Minute})
				if err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				_, err = s.UpdateJob(ctx, j.ID, func(j *jobtype.Job) error {
					if j.State != jobtype.Running {
						return errors.New("not running")
					}
					j.State, j.Result, j.FinishedAt, j.LeaseID = jobtype.Succeeded, []byte(`"ok"`), at, ""
					return nil
				})
				return err
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(3*float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
		})
	}
}

func openBench(b *testing.B) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchJob(i int64) jobtype.Job {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return jobtype.Job{ID: fmt.Sprintf("job-%09d", i), Tenant: "t", Kind: "k", Queue: "q",
		State: jobtype.Queued, Version: 1, MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
}

// runWriters runs op b.N times in all, from writers goroutines at once,
// and returns the CPU time the process used meanwhile: the cost of the
// writes whatever else runs on the machine (the writer's share, the
// callers', the runtime's).
func runWriters(b *testing.B, writers int, op func() error) time.Duration {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := cpuTime()
	for range writers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return cpuTime() - start
}

// BenchmarkLeaseCycleWithHistory times a job's lease writes when its
// History already holds entries: one op claims batch jobs (one
// ClaimJobs), heartbeats them and completes them (one WriteLeases each),
// from a backlog of 2,000 queued jobs of history entries each, put back
// untimed with their history as seeded. A claim and a heartbeat leave
// the history as it was; a completion appends an entry (and drops the
// oldest of a full one). Batch 1 writes each row with its own UPDATE
// (updateChanged), batch 100 all rows with one (writeJobs):
//
//	go test ./store/sqlite/ -run '^$' -bench LeaseCycleWithHistory -benchtime 200x -count 5
func BenchmarkLeaseCycleWithHistory(b *testing.B) {
	for _, entries := range []int{0, 2, jobtype.MaxHistory} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("history=%d/batch=%d", entries, batch), func(b *testing.B) {
				d := seedDepth(b, 2_000)
				history := toHistory(benchHistory(entries))
				// requeue puts the jobs in state back at the end of the
				// queue with the seeded history and attempt.
				requeue := func(state jobtype.State) {
					at := toMicro(d.now())
					zero := toMicro(time.Time{})
					err := d.s.writeTx(context.Background(), "requeue", func(ctx context.Context, tx *sql.Tx) error {
						_, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'queued', run_at = ?, updated_at = ?,
							lease_id = '', lease_expires_at = ?, finished_at = ?, result = NULL, percent = 0, step = '',
							history = ?, attempt = ? WHERE state = ?`,
							at, at, zero, zero, history, entries, string(state))
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				requeue(jobtype.Queued)
				if _, err := d.s.write.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var cpu time.Duration
				for b.Loop() {
					start := cpuTime()
					jobs, err := d.claimed(batch)
					if err != nil {
						b.Fatal(err)
					}
					beats := make([]store.LeaseWrite, len(jobs))
					for i, j := range jobs {
						beats[i] = store.LeaseWrite{Op: store.Heartbeat, JobID: j.ID, LeaseID: j.LeaseID, Percent: 50, Step: "half"}
					}
					results, err := d.s.WriteLeases(ctx, beats, store.LeaseRules{Now: d.now(), Lease: time.Hour})
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range results {
						if !r.Held || len(r.Job.History) != entries {
							b.Fatalf("heartbeat of %s: held %v, %d history entries, want %d", r.Job.ID, r.Held, len(r.Job.History), entries)
						}
					}
					if err := d.complete(jobs, true); err != nil {
						b.Fatal(err)
					}
					cpu += cpuTime() - start
					b.StopTimer()
					requeue(jobtype.Succeeded)
					b.StartTimer()
				}
				reportJobs(b, batch, cpu)
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/job")
			})
		}
	}
}

// benchHistory is n entries of failed attempts, as a job that failed
// and was retried n times has them.
func benchHistory(n int) []jobtype.HistoryEntry {
	h := make([]jobtype.HistoryEntry, n)
	for i := range h {
		at := depthStart.Add(time.Duration(i) * time.Minute)
		h[i] = jobtype.HistoryEntry{Attempt: int32(i + 1), WorkerID: "worker-7f3a", StartedAt: at,
			FinishedAt: at.Add(1500 * time.Millisecond), State: jobtype.Queued,
			Error: &jobtype.JobError{Type: "upstream", Message: "POST /v1/charges: 503 Service Unavailable after 1.5s"}}
	}
	return h
}

// TestWritesNormalizeAndStoreHistoryAsTheJSONTrip pins what the
// benchmark above measures the saving of: a write over a job as read
// back returns the History that encoding and decoding the whole of it
// gives (normalize), and sets the history column exactly when its
// encoding changed, to that encoding, with the same statement as when
// every column was encoded and compared.
func TestWritesNormalizeAndStoreHistoryAsTheJSONTrip(t *testing.T) {
	full := benchHistory(jobtype.MaxHistory)
	at := depthStart.Add(time.Hour)
	local := time.FixedZone("here", 3600)
	entry := jobtype.HistoryEntry{Attempt: 21, WorkerID: "w", StartedAt: at.Add(time.Nanosecond),
		FinishedAt: at.Add(1500 * time.Microsecond).In(local), State: jobtype.Failed,
		Error: &jobtype.JobError{Type: "t", Message: "m"}}
	edited := slices.Clone(full)
	edited[3].Error = &jobtype.JobError{Type: "upstream", Message: "another message"}
	retimed := slices.Clone(full)
	retimed[5].StartedAt = retimed[5].StartedAt.Add(time.Microsecond)
	subMicro := slices.Clone(full)
	subMicro[5].StartedAt = subMicro[5].StartedAt.Add(999 * time.Nanosecond).In(local)
	invalid := entry
	invalid.WorkerID = "w\xff\xfe"
	zero := entry
	zero.StartedAt, zero.FinishedAt, zero.Error = time.Time{}, time.Time{}, nil
	cases := []struct {
		name      string
		old, next []jobtype.HistoryEntry
	}{
		{"no history", nil, nil},
		{"the first entry", nil, []jobtype.HistoryEntry{entry}},
		{"two entries kept", full[:2], full[:2]},
		{"an entry appended to two", full[:2], append(slices.Clone(full[:2]), entry)},
		{"a full history kept", full, full},
		{"a full history kept with times in another zone and below the microsecond", full, subMicro},
		{"an entry appended to a full history, the oldest dropped", full, append(slices.Clone(full[1:]), entry)},
		{"an entry's error changed", full, edited},
		{"an entry's time changed", full, retimed},
		{"the history emptied", full, nil},
		{"the history reversed", full[:3], []jobtype.HistoryEntry{full[2], full[1], full[0]}},
		{"an entry with invalid UTF-8 appended", full[:1], []jobtype.HistoryEntry{full[0], invalid}},
		{"an entry with invalid UTF-8 kept", []jobtype.HistoryEntry{invalid}, []jobtype.HistoryEntry{invalid}},
		{"an entry with zero times appended", full[:1], []jobtype.HistoryEntry{full[0], zero}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := normalize(benchJob(1))
			old.History = fromHistory(toHistory(c.old)) // as read back
			next := old.Clone()
			next.State, next.Percent = jobtype.Running, 50
			next.History = slices.Clone(c.next)
			got, want := versioned(old, next), store.Versioned(old, normalize(next))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("versioned history\n%+v\nwant\n%+v", got.History, want.History)
			}
			for i := range got.History {
				if e := got.History[i].Error; e != nil && i < len(old.History) && e == old.History[i].Error {
					t.Fatalf("entry %d shares its error with the job as read", i)
				}
			}
			query, args := updateChanged(1, old, got, 7)
			wantQuery, wantArgs := updateChangedEncodingAll(1, old, got, 7)
			if query != wantQuery || !reflect.DeepEqual(args, wantArgs) {
				t.Fatalf("update %q %v\nwant %q %v", query, args, wantQuery, wantArgs)
			}
		})
	}
}

// updateChangedEncodingAll is updateChanged as it was before writeValues:
// History encoded for both jobs and compared as text.
func updateChangedEncodingAll(seq int64, old, next jobtype.Job, change int64) (string, []any) {
	was, now := values(old), values(next)
	var q strings.Builder
	q.WriteString("UPDATE jobs SET ")
	var args []any
	for i, v := range now {
		if v == was[i] {
			continue
		}
		if len(args) > 0 {
			q.WriteString(", ")
		}
		q.WriteString(valueColumns[i] + " = ?")
		args = append(args, v)
	}
	if len(args) == 0 {
		return "", nil
	}
	if next.Version != old.Version {
		q.WriteString(", change_seq = ?")
		args = append(args, change)
	}
	q.WriteString(" WHERE seq = ?")
	return q.String(), append(args, seq)
}

// One UPDATE of many rows sets history in every row once any row's
// changes, so a heartbeat beside a completion keeps its job's history.
func TestLeaseWritesKeepTheHistoryOfRowsBesideOnesThatChangeIt(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	ctx := t.Context()
	at := depthStart.Add(time.Hour)
	var jobs []jobtype.Job
	for i, n := range []int{jobtype.MaxHistory, 2, jobtype.MaxHistory} {
		j := benchJob(int64(i))
		j.State, j.Attempt, j.WorkerID, j.LeaseID = jobtype.Running, int32(n+1), "w", fmt.Sprintf("lease-%d", i)
		j.History = benchHistory(n)
		created, err := s.CreateJob(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, created)
	}
	results, err := s.WriteLeases(ctx, []store.LeaseWrite{
		{Op: store.Heartbeat, JobID: jobs[0].ID, LeaseID: jobs[0].LeaseID, Percent: 50},
		{Op: store.Complete, JobID: jobs[1].ID, LeaseID: jobs[1].LeaseID},
		{Op: store.Heartbeat, JobID: jobs[2].ID, LeaseID: jobs[2].LeaseID, Percent: 70},
	}, store.LeaseRules{Now: at, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if !r.Held {
			t.Fatalf("write %d did not hold", i)
		}
		got, err := s.GetJob(ctx, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := jobs[i].History
		if i == 1 {
			want = append(slices.Clone(want), jobtype.HistoryEntry{Attempt: 3, WorkerID: "w", FinishedAt: at, State: jobtype.Succeeded})
		}
		if !reflect.DeepEqual(got.History, want) || !reflect.DeepEqual(r.Job.History, want) {
			t.Errorf("job %d's history\nstored   %+v\nreturned %+v\nwant     %+v", i, got.History, r.Job.History, want)
		}
	}
}
