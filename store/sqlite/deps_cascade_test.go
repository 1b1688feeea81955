package sqlite

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// heard collects the changes a store announces marked Released.
type heard struct {
	mu       sync.Mutex
	released []store.Change
}

func listenHeard(t *testing.T, s *Store) *heard {
	t.Helper()
	h := &heard{}
	err := s.Listen(t.Context(), func(cs []store.Change, _ bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range cs {
			if c.Released {
				h.released = append(h.released, c)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// settle makes a release of a job of its own and waits until it is
// heard: changes reach a listener in commit order, so every change
// committed before it has been heard too. It returns what was heard
// before the sentinel's.
func (h *heard) settle(t *testing.T, s *Store, name string) []store.Change {
	t.Helper()
	createAll(t, s, []jobtype.Job{depsRunning(name + "-sentinel"), depsWaiting(name+"-sentinel-after", []string{name + "-sentinel"})})
	if err := completeOne(s, name+"-sentinel", depsStart.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.mu.Lock()
		for i, c := range h.released {
			if c.JobID == name+"-sentinel-after" {
				out := slices.Clone(h.released[:i])
				h.released = h.released[i+1:]
				h.mu.Unlock()
				return out
			}
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel's release was not heard within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// depsRows lists job_deps as "after>job" pairs, in order.
func depsRows(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.read.Query("SELECT after_id || '>' || job_id FROM job_deps ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scratchEmpty fails t unless the tables a run of jobs_dependency_ended
// fills are empty, as they are between batches.
func scratchEmpty(t *testing.T, s *Store) {
	t.Helper()
	for _, table := range []string{"job_releases", "job_cascade"} {
		var n int
		if err := s.read.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s holds %d rows (%v) after the write, want none", table, n, err)
		}
	}
}

// depRow is what a job's end may change in a job after it.
type depRow struct {
	State                        string
	Version, ChangeSeq           int64
	UpdatedAt, FinishedAt, RunAt int64
	ErrorType, ErrorMessage      string
}

func depRows(t *testing.T, s *Store) map[string]depRow {
	t.Helper()
	rows, err := s.read.Query(`SELECT id, state, version, change_seq, updated_at, finished_at, run_at,
		coalesce(error_type, ''), coalesce(error_message, '') FROM jobs`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]depRow{}
	for rows.Next() {
		var id string
		var r depRow
		if err := rows.Scan(&id, &r.State, &r.Version, &r.ChangeSeq, &r.UpdatedAt, &r.FinishedAt, &r.RunAt, &r.ErrorType, &r.ErrorMessage); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var namedDependency = regexp.MustCompile(`^job (\S+), which it runs after, ended ([A-Z]+)$`)

// TestCascadeCancelsAGraphOfLevelsAtOnce: the probe's graph, each job
// after every job of the level before. Cancelling one job of the first
// level cancels every job below it in the one write, each once, naming a
// dependency it waits for that the cascade ended; every one is announced
// at its new version, and no other; the job_deps rows of every job that
// ended go, and those of the jobs still held stay.
func TestCascadeCancelsAGraphOfLevelsAtOnce(t *testing.T) {
	const width, levels = 5, 8
	s, _ := openListened(t)
	h := listenHeard(t, s)
	graph := seedGraph(t, s, width, levels)
	before := depRows(t, s)
	at := depsStart.Add(time.Minute)
	if err := cancelOne(s, graph[0][0], at); err != nil {
		t.Fatal(err)
	}
	scratchEmpty(t, s)
	after := depRows(t, s)
	change := after[graph[0][0]].ChangeSeq
	for l := 1; l < levels; l++ {
		for _, id := range graph[l] {
			got := after[id]
			want := depRow{State: "cancelled", Version: before[id].Version + 1, ChangeSeq: change,
				UpdatedAt: toMicro(at), FinishedAt: toMicro(at), RunAt: before[id].RunAt, ErrorType: "DependencyFailed",
				// The root for the jobs that wait for it; below, the
				// first by id of the jobs cancelled that it waits for.
				ErrorMessage: store.DependencyFailedMessage(graph[l-1][0], jobtype.Cancelled)}
			if got != want {
				t.Errorf("%s after the cancel:\n got %+v\nwant %+v", id, got, want)
			}
		}
	}
	for _, id := range graph[0][1:] {
		if after[id] != before[id] {
			t.Errorf("held job %s changed: %+v, was %+v", id, after[id], before[id])
		}
	}
	var wantDeps []string
	for _, p := range graph[0][1:] {
		for _, id := range graph[1] {
			wantDeps = append(wantDeps, p+">"+id)
		}
	}
	slices.Sort(wantDeps)
	if got := depsRows(t, s); !slices.Equal(got, wantDeps) {
		t.Errorf("job_deps after the cancel: %d rows, want the %d of the held jobs: %v", len(got), len(wantDeps), got)
	}
	heard := h.settle(t, s, "levels")
	var ids []string
	for _, c := range heard {
		ids = append(ids, c.JobID)
		if c.State != jobtype.Cancelled || c.Version != after[c.JobID].Version {
			t.Errorf("announced %s %s at version %d, want CANCELLED at %d", c.JobID, c.State, c.Version, after[c.JobID].Version)
		}
	}
	slices.Sort(ids)
	want := slices.Concat(graph[1:]...)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("announced as released: %v, want the %d jobs cancelled", ids, len(want))
	}

	// The other held jobs end: nothing is left to release, or announce.
	for i, id := range graph[0][1:] {
		if err := cancelOne(s, id, at.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if heard := h.settle(t, s, "held"); len(heard) != 0 {
		t.Errorf("the ends of the held jobs announced %d released jobs, want none: %v", len(heard), heard)
	}
	if got := depsRows(t, s); len(got) != 0 {
		t.Errorf("job_deps once every held job ended: %v, want empty", got)
	}
}

// TestCompletionsAnnounceOnlyTheJobsTheyRelease: each of parents
// completions before the last releases none of the k jobs that wait for
// all of them, so the writer drains nothing from job_releases and
// announces nothing; the last releases (and announces) the k, once each.
// Before migration 26 every completion noted all k, which the writer then
// read, after lists and all, and announced at the versions they had.
func TestCompletionsAnnounceOnlyTheJobsTheyRelease(t *testing.T) {
	const parents, k = 50, 7
	s, _ := openListened(t)
	h := listenHeard(t, s)
	ids := seedWaiters(t, s, parents, k)
	for i, id := range ids[:parents-1] {
		if err := completeOne(s, id, depsStart.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	scratchEmpty(t, s)
	if heard := h.settle(t, s, "before-last"); len(heard) != 0 {
		t.Fatalf("%d completions that released nothing announced %d released jobs, want none", parents-1, len(heard))
	}
	last := depsStart.Add(time.Hour)
	if err := completeOne(s, ids[parents-1], last); err != nil {
		t.Fatal(err)
	}
	heard := h.settle(t, s, "last")
	if len(heard) != k {
		t.Errorf("the last completion announced %d released jobs, want the %d waiting", len(heard), k)
	}
	for _, c := range heard {
		if c.State != jobtype.Queued || c.Version != 2 || !c.RunAt.Equal(last) {
			t.Errorf("announced %s %s at version %d, run_at %v; want QUEUED at 2 from %v", c.JobID, c.State, c.Version, c.RunAt, last)
		}
	}
	if got := depsRows(t, s); len(got) != 0 {
		t.Errorf("job_deps once every dependency ended: %d rows, want none", len(got))
	}
}

// A job that 33,000 jobs wait for, more than one SQLite statement may
// name (32,766 variables), releases them all when it ends, announced.
// The batch read the jobs it released by naming each, and failed: the
// job could not be completed, cancelled or expired, and the sweep tried
// again every second.
func TestAJobWithMoreJobsAfterItThanAStatementTakesVariablesReleasesThemAll(t *testing.T) {
	const after = 33000
	s, _ := openListened(t)
	h := listenHeard(t, s)
	jobs := []jobtype.Job{depsRunning("root")}
	for i := range after {
		jobs = append(jobs, depsWaiting(fmt.Sprintf("after-%05d", i), []string{"root"}))
	}
	createAll(t, s, jobs)
	if err := completeOne(s, "root", depsStart.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if heard := h.settle(t, s, "root"); len(heard) != after {
		t.Errorf("the completion announced %d released jobs, want the %d waiting", len(heard), after)
	}
	counts, err := s.CountByState(t.Context())
	if err != nil || counts[jobtype.Queued] != after+1 || counts[jobtype.Waiting] != 0 { // and settle's sentinel
		t.Errorf("after root succeeded: %d QUEUED, %d WAITING (%v), want all %d and settle's QUEUED", counts[jobtype.Queued], counts[jobtype.Waiting], err, after)
	}
}

// TestCascadeRunsTheTriggerOneDeep: the cancel of the head of a chain
// as deep as allowed, through jobs also held back by other jobs and
// jobs that run anyway, ends under SQLite's bound on nested triggers set
// to 2 (a run of jobs_dependency_ended and the triggers its writes
// fire): its cost does not grow with the depth of the graph. The
// nested runs of migration 24, each holding open cursors that every
// write of the runs within them walked, need the depth of the chain.
func TestCascadeRunsTheTriggerOneDeep(t *testing.T) {
	for _, c := range []struct {
		name    string
		trigger string // "" for the schema's own
		fails   bool
	}{
		{"the trigger of migration 26", "", false},
		{"the trigger of migration 24", migrations[23], true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			s := openTemp(t, path)
			jobs := []jobtype.Job{depsJob("head"), depsRunning("other")}
			jobs[0].State = jobtype.Pending
			prev := "head"
			for i := range jobtype.MaxDependencyDepth {
				id := fmt.Sprintf("link-%03d", i)
				after := []string{prev}
				if i%10 == 0 {
					after = append(after, "other")
				}
				jobs = append(jobs, depsWaiting(id, after))
				run := depsWaiting(id+"-run", []string{prev})
				run.OnDependencyFailure = jobtype.RunOnDependencyFailure
				jobs = append(jobs, run)
				prev = id
			}
			createAll(t, s, jobs)
			if c.trigger != "" {
				if _, err := s.write.Exec(c.trigger); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()

			db := rawDB(t, path)
			conn, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = conn.Raw(func(dc any) error {
				dc.(*sqlite3.SQLiteConn).SetLimit(sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 2)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(t.Context(), "PRAGMA recursive_triggers = ON"); err != nil {
				t.Fatal(err)
			}
			_, err = conn.ExecContext(t.Context(), "UPDATE jobs SET state = 'cancelled', version = version + 1 WHERE id = 'head'")
			if c.fails {
				if err == nil || !strings.Contains(err.Error(), "triggers nested too deep") {
					t.Fatalf("the cancel = %v, want triggers nested too deep", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("the cancel: %v", err)
			}
			var cancelled, queued int
			if err := conn.QueryRowContext(t.Context(), `SELECT count(*) FILTER (WHERE state = 'cancelled'),
				count(*) FILTER (WHERE state = 'queued') FROM jobs`).Scan(&cancelled, &queued); err != nil {
				t.Fatal(err)
			}
			if want := 1 + jobtype.MaxDependencyDepth; cancelled != want || queued != jobtype.MaxDependencyDepth {
				t.Errorf("after the cancel: %d cancelled, %d queued; want %d and %d", cancelled, queued, want, jobtype.MaxDependencyDepth)
			}
		})
	}
}

// TestCascadesEndAsMigration24sNestedRunsDid ends the jobs of random
// graphs one write at a time, in two stores: one with the schema's
// trigger, one with migration 24's. After every write both hold the same
// jobs (states, versions, times, change_seq, errors) and job_deps rows;
// each job cancelled names a dependency it waits for that ended as it
// says. Migration 24's nested runs named whichever such dependency they
// reached it through last, so the names may differ; and they cancelled
// a job again for each path the cascade reached it by, raising its
// version each time, where it is now cancelled once, as on PostgreSQL. The new store
// announces as released exactly the jobs whose version a trigger raised.
func TestCascadesEndAsMigration24sNestedRunsDid(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 26))
			now, old := openTemp(t, tempPath(t)), openTemp(t, tempPath(t))
			defer now.Close()
			defer old.Close()
			if _, err := old.write.Exec(migrations[23]); err != nil {
				t.Fatal(err)
			}
			h := listenHeard(t, now)
			var (
				ids     []string
				running []string
				jobs    []jobtype.Job
			)
			for i := range 60 {
				id := fmt.Sprintf("j%03d", i)
				if i < 10 || rng.IntN(6) == 0 {
					jobs, running = append(jobs, depsRunning(id)), append(running, id)
				} else {
					var after []string
					for range 1 + rng.IntN(4) {
						after = append(after, ids[rng.IntN(len(ids))])
					}
					j := depsWaiting(id, after)
					if rng.IntN(4) == 0 {
						j.OnDependencyFailure = jobtype.RunOnDependencyFailure
					}
					jobs = append(jobs, j)
				}
				ids = append(ids, id)
			}
			for _, s := range []*Store{now, old} {
				for _, j := range jobs {
					createAll(t, s, []jobtype.Job{j}) // one at a time: each sees the ones before
				}
			}
			rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
			want := map[[2]any]bool{}
			for step := 0; len(running) > 0; step++ {
				at := depsStart.Add(time.Duration(step+1) * time.Second)
				before, oldBefore := depRows(t, now), depRows(t, old)
				var wrote []string
				switch {
				case len(running) >= 2 && rng.IntN(3) == 0:
					// Two ends in one statement: the trigger runs for each.
					ws := []store.LeaseWrite{
						{Op: store.Complete, JobID: running[0], LeaseID: "lease-" + running[0], Result: []byte(`{}`)},
						{Op: store.Fail, JobID: running[1], LeaseID: "lease-" + running[1], Error: &jobtype.JobError{Type: "E", Message: "e"}},
					}
					for _, s := range []*Store{now, old} {
						if _, err := s.WriteLeases(t.Context(), ws, store.LeaseRules{Now: at, Lease: time.Hour}); err != nil {
							t.Fatal(err)
						}
					}
					wrote, running = running[:2], running[2:]
				default:
					// A cancel, or an end of another kind, of one job,
					// now and then of one still WAITING.
					id := running[0]
					if w := ids[rng.IntN(len(ids))]; before[w].State == "waiting" && rng.IntN(4) == 0 {
						id = w
					} else {
						running = running[1:]
					}
					state := []jobtype.State{jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost}[rng.IntN(4)]
					for _, s := range []*Store{now, old} {
						_, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
							j.State, j.FinishedAt, j.UpdatedAt = state, at, at
							return nil
						})
						if err != nil {
							t.Fatal(err)
						}
					}
					wrote = []string{id}
				}
				scratchEmpty(t, now)
				got, was := depRows(t, now), depRows(t, old)
				for id, g := range got {
					w := was[id]
					if g.ErrorType == "DependencyFailed" {
						if g.ErrorMessage != before[id].ErrorMessage {
							checkNamed(t, jobs, got, id)
						}
						g.ErrorMessage = w.ErrorMessage
					}
					// Migration 24's outer UPDATE cancelled again a job a
					// nested run had cancelled, raising its version once
					// more for each: a write raises each version at most
					// once now, and whenever the old trigger raised it.
					raised, oldRaised := g.Version-before[id].Version, w.Version-oldBefore[id].Version
					if raised > 1 || (raised == 1) != (oldRaised >= 1) {
						t.Fatalf("step %d: %s went from version %d to %d; with migration 24's trigger %d to %d",
							step, id, before[id].Version, g.Version, oldBefore[id].Version, w.Version)
					}
					g.Version, w.Version = 0, 0
					if g != w {
						t.Fatalf("step %d: %s is\n %+v\nwith migration 24's trigger\n %+v", step, id, got[id], was[id])
					}
					if raised == 1 && !slices.Contains(wrote, id) {
						want[[2]any{id, got[id].Version}] = true
					}
				}
				if a, b := depsRows(t, now), depsRows(t, old); !slices.Equal(a, b) {
					t.Fatalf("step %d: job_deps is %v\nwith migration 24's trigger %v", step, a, b)
				}
			}
			heard := map[[2]any]bool{}
			for _, c := range h.settle(t, now, "random") {
				heard[[2]any{c.JobID, c.Version}] = true
			}
			for k := range want {
				if !heard[k] {
					t.Errorf("%s at version %d was released but not announced", k[0], k[1])
				}
			}
			for k := range heard {
				if !want[k] {
					t.Errorf("%s at version %d was announced as released, but no trigger raised it to that", k[0], k[1])
				}
			}
		})
	}
}

// checkNamed fails t unless the error of cancelled job id names one of
// its dependencies, which ended in the state it says, not SUCCEEDED.
func checkNamed(t *testing.T, jobs []jobtype.Job, rows map[string]depRow, id string) {
	t.Helper()
	m := namedDependency.FindStringSubmatch(rows[id].ErrorMessage)
	if m == nil {
		t.Fatalf("%s ended with %q, which names no job", id, rows[id].ErrorMessage)
	}
	var after []string
	for _, j := range jobs {
		if j.ID == id {
			after = j.After
		}
	}
	dep, ok := rows[m[1]]
	if !slices.Contains(after, m[1]) || !ok || strings.ToUpper(dep.State) != m[2] || dep.State == "succeeded" {
		t.Fatalf("%s ended with %q; it runs after %v, and %s is %s", id, rows[id].ErrorMessage, after, m[1], dep.State)
	}
}

// TestDependencyTriggerReachesJobsByID: every statement of
// jobs_dependency_ended seeks jobs by id and job_deps by one of its keys;
// none walks either table or an index of jobs by state (which SQLite,
// without statistics, chose for "state = 'waiting'": every WAITING job
// of every tenant, on every run). Only job_cascade, which holds the one
// run's jobs, is walked. Each statement is explained as the run would
// make it, with NEW's columns as values.
func TestDependencyTriggerReachesJobsByID(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	var trigger string
	if err := s.read.QueryRow("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'jobs_dependency_ended'").Scan(&trigger); err != nil {
		t.Fatal(err)
	}
	body := trigger[strings.Index(trigger, "\nBEGIN\n")+len("\nBEGIN\n") : strings.LastIndex(trigger, "END")]
	body = regexp.MustCompile(`NEW\.\w+`).ReplaceAllString(body, "'x'")
	alias := regexp.MustCompile(`(?i)\b(?:FROM|JOIN|UPDATE|INTO)\s+(jobs|job_deps)\b(?:\s+AS\s+(\w+))?`)
	statements := 0
	for _, st := range strings.Split(body, ";\n") {
		if strings.TrimSpace(st) == "" {
			continue
		}
		statements++
		table := map[string]string{}
		for _, m := range alias.FindAllStringSubmatch(st, -1) {
			name := m[1]
			if m[2] != "" {
				name = m[2]
			}
			table[name] = m[1]
		}
		for _, line := range explain(t, s.read, st) {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch {
			case f[0] == "SCAN" && table[f[1]] != "":
				t.Errorf("%s\nwalks %s: %s", st, table[f[1]], line)
			case f[0] == "SEARCH" && table[f[1]] == "jobs" && !strings.Contains(line, "sqlite_autoindex_jobs_1 (id=?)"):
				t.Errorf("%s\nreaches jobs other than by id: %s", st, line)
			}
		}
	}
	if statements < 8 {
		t.Errorf("only %d statements found in the trigger; the parsing is wrong", statements)
	}
}
