package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var pauseCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a paused queue gives no claim, to any filter, with or without rules; other queues are unaffected", testPauseClaims},
	{"next ready passes over a paused queue's jobs", testPauseNextReady},
	{"a resumed queue gives claims again", testPauseResume},
	{"pausing a paused queue keeps the first pause; resuming one not paused changes nothing", testPauseIdempotent},
	{"a paused queue still takes new jobs and lets running ones complete", testPauseAcceptsAndCompletes},
	{"queue has jobs finds a queue's jobs in any state", testQueueHasJobs},
}

var sharedPauseCases = []struct {
	name string
	run  func(t *testing.T, a, b store.Store)
}{
	{"a pause made through one store holds for the other's claims", testPauseShared},
	{"a pause and a resume made through one store are heard by the other's listener", testPauseHeardShared},
	{"a worker's stop announced through one store is heard by the other's listener", testStopClaimingHeardShared},
}

// pauseJobs creates two ready jobs in queue "held" and two in "open",
// of kind email, and returns nothing: the ids are held-1, held-2, open-1,
// open-2, held first in claim order.
func pauseJobs(t *testing.T, s store.Store) {
	t.Helper()
	for i, id := range []string{"held-1", "held-2", "open-1", "open-2"} {
		j := newJob(id, at(i))
		j.Queue = id[:len(id)-2]
		create(t, s, j)
	}
}

func pause(t *testing.T, s store.Store, queue string, when time.Time, by string) store.QueuePause {
	t.Helper()
	p, err := s.PauseQueue(t.Context(), store.QueuePause{Queue: queue, PausedAt: when, PausedBy: by})
	if err != nil {
		t.Fatalf("pause %s: %v", queue, err)
	}
	return p
}

func resume(t *testing.T, s store.Store, queue string) bool {
	t.Helper()
	resumed, err := s.ResumeQueue(t.Context(), queue)
	if err != nil {
		t.Fatalf("resume %s: %v", queue, err)
	}
	return resumed
}

func pauses(t *testing.T, s store.Store) []store.QueuePause {
	t.Helper()
	ps, err := s.QueuePauses(t.Context())
	if err != nil {
		t.Fatalf("queue pauses: %v", err)
	}
	return ps
}

// pauseFilters are the claim filters every pick shape is reached by: no
// filter, kinds only, queues only, both, and each under queue rules.
func pauseFilters() map[string]store.ClaimFilter {
	rules := map[string]store.QueueLimit{"held": {MaxRunning: 5}, "open": {MaxRunning: 5}}
	out := map[string]store.ClaimFilter{}
	for name, f := range map[string]store.ClaimFilter{
		"no filter":          {},
		"kinds":              {Kinds: []string{"email", "sms"}},
		"one kind":           {Kinds: []string{"email"}},
		"queues":             {Queues: []string{"held", "open"}},
		"the paused queue":   {Queues: []string{"held"}},
		"kinds and queues":   {Kinds: []string{"email"}, Queues: []string{"held", "open"}},
		"tenants":            {Tenants: []string{"acme"}},
		"several kinds, one": {Kinds: []string{"email", "sms"}, Queues: []string{"held"}},
	} {
		f.Now = at(100)
		out[name] = f
		f.Limits = rules
		out[name+", under rules"] = f
	}
	return out
}

func testPauseClaims(t *testing.T, s store.Store) {
	pauseJobs(t, s)
	pause(t, s, "held", at(50), "token ops (admin)")
	for name, f := range pauseFilters() {
		t.Run(name, func(t *testing.T) {
			got := claimAll(t, s, f)
			want := []string{"open-1", "open-2"}
			if slices.Equal(f.Queues, []string{"held"}) {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("claimed %v, want %v (held is paused)", got, want)
			}
			// Put them back for the next filter.
			for _, id := range got {
				if _, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
					j.State, j.LeaseID, j.WorkerID = jobtype.Queued, "", ""
					return nil
				}); err != nil {
					t.Fatalf("requeue %s: %v", id, err)
				}
			}
		})
	}
	for _, id := range []string{"held-1", "held-2"} {
		if j := get(t, s, id); j.State != jobtype.Queued {
			t.Errorf("%s is %s, want it still queued", id, j.State)
		}
	}
}

func testPauseNextReady(t *testing.T, s store.Store) {
	pauseJobs(t, s)
	pause(t, s, "held", at(50), "by")
	for name, f := range pauseFilters() {
		t.Run(name, func(t *testing.T) {
			runAt, ok, err := s.NextReady(t.Context(), f)
			if err != nil {
				t.Fatalf("next ready: %v", err)
			}
			if slices.Equal(f.Queues, []string{"held"}) {
				if ok {
					t.Errorf("next ready of the paused queue alone = %v, want none", runAt)
				}
				return
			}
			if !ok || !runAt.Equal(at(2)) {
				t.Errorf("next ready = %v, %v; want open-1's run_at %v (held's come first but it is paused)", runAt, ok, at(2))
			}
		})
	}
}

func testPauseResume(t *testing.T, s store.Store) {
	pauseJobs(t, s)
	pause(t, s, "held", at(50), "by")
	f := store.ClaimFilter{Queues: []string{"held"}, Now: at(100)}
	if got := claimAll(t, s, f); len(got) != 0 {
		t.Fatalf("claimed %v from the paused queue", got)
	}
	if !resume(t, s, "held") {
		t.Errorf("resume of a paused queue said it was not paused")
	}
	if ps := pauses(t, s); len(ps) != 0 {
		t.Errorf("pauses after resume: %v, want none", ps)
	}
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"held-1", "held-2"}) {
		t.Errorf("claimed %v after resume, want held-1, held-2", got)
	}
}

func testPauseIdempotent(t *testing.T, s store.Store) {
	first := pause(t, s, "held", at(50), "token a (admin)")
	want := store.QueuePause{Queue: "held", PausedAt: at(50), PausedBy: "token a (admin)"}
	if !first.PausedAt.Equal(want.PausedAt) || first.PausedBy != want.PausedBy || first.Queue != want.Queue {
		t.Errorf("pause = %+v, want %+v", first, want)
	}
	again := pause(t, s, "held", at(60), "token b (admin)")
	if !again.PausedAt.Equal(want.PausedAt) || again.PausedBy != want.PausedBy {
		t.Errorf("second pause = %+v, want the first kept: %+v", again, want)
	}
	pause(t, s, "another", at(70), "token c (admin)")
	ps := pauses(t, s)
	if len(ps) != 2 || ps[0].Queue != "another" || ps[1].Queue != "held" || !ps[1].PausedAt.Equal(at(50)) ||
		ps[1].PausedAt.Location() != time.UTC || ps[1].PausedBy != "token a (admin)" {
		t.Errorf("pauses = %+v, want another then held as first paused, in UTC", ps)
	}
	if resume(t, s, "never-paused") {
		t.Errorf("resume of a queue not paused said it was paused")
	}
	if len(pauses(t, s)) != 2 {
		t.Errorf("resume of a queue not paused changed the pauses")
	}
}

func testPauseAcceptsAndCompletes(t *testing.T, s store.Store) {
	running := newJob("running-1", at(1))
	running.Queue, running.State, running.LeaseID, running.LeaseExpiresAt = "held", jobtype.Running, "lease-r", at(1000)
	create(t, s, running)
	pause(t, s, "held", at(50), "by")
	j := newJob("new-1", at(60))
	j.Queue = "held"
	create(t, s, j)
	if got := get(t, s, "new-1"); got.State != jobtype.Queued {
		t.Errorf("a job created in a paused queue is %s, want queued", got.State)
	}
	res, err := s.WriteLeases(t.Context(), []store.LeaseWrite{{Op: store.Complete, JobID: "running-1", LeaseID: "lease-r"}},
		store.LeaseRules{Now: at(70), Lease: time.Minute})
	if err != nil || len(res) != 1 || !res[0].Held || res[0].Job.State != jobtype.Succeeded {
		t.Errorf("complete a running job of a paused queue: %+v, %v; want it held and succeeded", res, err)
	}
}

func testQueueHasJobs(t *testing.T, s store.Store) {
	for i, st := range []jobtype.State{jobtype.Queued, jobtype.Running, jobtype.Succeeded} {
		j := newJob("job-"+string(st), at(i))
		j.Queue, j.State = "q-"+string(st), st
		if st == jobtype.Running {
			j.LeaseID, j.LeaseExpiresAt = "lease", at(1000)
		}
		if st.Terminal() {
			j.FinishedAt = at(i)
		}
		create(t, s, j)
	}
	for _, q := range []string{"q-queued", "q-running", "q-succeeded", "nothing"} {
		has, err := s.QueueHasJobs(t.Context(), q)
		if err != nil {
			t.Fatalf("queue has jobs %s: %v", q, err)
		}
		if want := q != "nothing"; has != want {
			t.Errorf("queue has jobs %s = %v, want %v", q, has, want)
		}
	}
}

func testPauseShared(t *testing.T, a, b store.Store) {
	pauseJobs(t, a)
	pause(t, a, "held", at(50), "token ops (admin)")
	ps := pauses(t, b)
	if len(ps) != 1 || ps[0].Queue != "held" || !ps[0].PausedAt.Equal(at(50)) || ps[0].PausedBy != "token ops (admin)" {
		t.Errorf("b's pauses: %+v, want held as a paused it", ps)
	}
	if got := claimAll(t, b, store.ClaimFilter{Now: at(100)}); !slices.Equal(got, []string{"open-1", "open-2"}) {
		t.Errorf("b claimed %v, want only the open queue's", got)
	}
}

func testPauseHeardShared(t *testing.T, a, b store.Store) {
	h := listen(t, b)
	pause(t, a, "held", at(50), "by")
	if c := h.waitForQueue(t, "held"); !c.Paused || c.Local || c.JobID != "" {
		t.Errorf("b heard %+v, want a pause of held, not local", c)
	}
	resume(t, a, "held")
	if c := h.waitForQueue(t, "held"); c.Paused || c.Local {
		t.Errorf("b heard %+v, want a resume of held, not local", c)
	}
}

// waitForQueue returns the next queue change of queue heard.
func (h *heard) waitForQueue(t *testing.T, queue string) store.Change {
	t.Helper()
	return h.waitForMatch(t, "a pause or resume of "+queue, func(c store.Change) bool { return c.QueueChange && c.Queue == queue })
}

// testStopClaimingHeardShared: a stop is heard by the other store, not
// local, naming the worker, and is no job's change.
func testStopClaimingHeardShared(t *testing.T, a, b store.Store) {
	h := listen(t, b)
	for _, worker := range []string{"w-1", "stop"} {
		if err := a.AnnounceStopClaiming(t.Context(), worker, "token-"+worker); err != nil {
			t.Fatalf("announce stop of %s: %v", worker, err)
		}
		c := h.waitForMatch(t, "a stop of "+worker, func(c store.Change) bool { return c.StopClaiming })
		if c.Worker != worker || c.Caller != "token-"+worker || c.Local || c.JobID != "" || c.QueueChange || c.LogChange {
			t.Errorf("b heard %+v, want the stop of %s, not local", c, worker)
		}
	}
}

// waitForMatch returns the next change heard that match accepts.
func (h *heard) waitForMatch(t *testing.T, what string, match func(store.Change) bool) store.Change {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case batch := <-h.c:
			for _, c := range batch {
				if match(c) {
					return c
				}
			}
		case <-timeout:
			t.Fatalf("%s not heard", what)
		}
	}
}
