package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var batchCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"create jobs stores every job, in order, as given", testCreateJobs},
	{"create jobs whose one job holds an active unique key stores none", testCreateJobsConflict},
	{"create jobs whose one job has a taken id stores none", testCreateJobsDuplicateID},
	{"read jobs returns the jobs that exist, scoped by tenant, whole, summaries or states", testReadJobs},
	{"list keeps one batch's jobs, newest first and in a feed of changes", testListBatch},
}

func batchJobs(prefix, batch string, n int) []jobtype.Job {
	jobs := make([]jobtype.Job, n)
	for i := range jobs {
		j := newJob(fmt.Sprintf("%s-%03d", prefix, i), at(0))
		j.Batch = batch
		j.Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
		jobs[i] = j
	}
	return jobs
}

func testCreateJobs(t *testing.T, s store.Store) {
	in := batchJobs("b", "thumbs", 300)
	got, err := s.CreateJobs(t.Context(), in)
	if err != nil {
		t.Fatalf("create jobs: %v", err)
	}
	if len(got) != len(in) {
		t.Fatalf("create jobs returned %d jobs, want %d", len(got), len(in))
	}
	for i := range in {
		sameJob(t, "returned "+in[i].ID, got[i], in[i])
		sameJob(t, "stored "+in[i].ID, get(t, s, in[i].ID), in[i])
	}
}

func testCreateJobsConflict(t *testing.T, s store.Store) {
	holder := create(t, s, keyed("holder", at(0), "nightly", jobtype.Running))
	in := batchJobs("c", "", 5)
	in[3].UniqueKey = "nightly"
	_, err := s.CreateJobs(t.Context(), in)
	wantConflict(t, err, holder.ID, "nightly")
	for _, j := range in {
		mustBeGone(t, s, j.ID)
	}
}

func testCreateJobsDuplicateID(t *testing.T, s store.Store) {
	create(t, s, newJob("d-002", at(0)))
	in := batchJobs("d", "", 5)
	if _, err := s.CreateJobs(t.Context(), in); err == nil {
		t.Fatal("create jobs with a taken id succeeded")
	}
	for _, j := range in {
		if j.ID != "d-002" {
			mustBeGone(t, s, j.ID)
		}
	}
}

func testReadJobs(t *testing.T, s store.Store) {
	in := batchJobs("r", "", 4)
	in[3].Tenant = "globex"
	if _, err := s.CreateJobs(t.Context(), in[:3]); err != nil {
		t.Fatalf("create jobs: %v", err)
	}
	create(t, s, in[3])
	ids := []string{"r-000", "nope", "r-002", "r-003", "r-001"}
	byID := func(jobs []jobtype.Job) map[string]jobtype.Job {
		m := map[string]jobtype.Job{}
		for _, j := range jobs {
			m[j.ID] = j
		}
		return m
	}

	all, err := s.ReadJobs(t.Context(), ids, store.JobRead{})
	if err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	got := byID(all)
	if len(all) != 4 || len(got) != 4 {
		t.Fatalf("read jobs returned %v, want the 4 that exist once each", idsOf(all))
	}
	for _, j := range in {
		sameJob(t, "read "+j.ID, got[j.ID], j)
	}

	acme, err := s.ReadJobs(t.Context(), ids, store.JobRead{Tenant: "acme", Summary: true})
	if err != nil {
		t.Fatalf("read jobs of acme: %v", err)
	}
	got = byID(acme)
	if _, ok := got["r-003"]; ok || len(acme) != 3 {
		t.Errorf("read jobs of acme returned %v, want r-000, r-001 and r-002", idsOf(acme))
	}
	for _, j := range acme {
		if j.Payload != nil || j.Result != nil {
			t.Errorf("summary of %s has payload %s, result %s", j.ID, j.Payload, j.Result)
		}
	}

	states, err := s.ReadJobs(t.Context(), ids, store.JobRead{Tenant: "acme", States: true})
	if err != nil {
		t.Fatalf("read states of acme: %v", err)
	}
	got = byID(states)
	if _, ok := got["r-003"]; ok || len(states) != 3 {
		t.Errorf("read states of acme returned %v, want r-000, r-001 and r-002", idsOf(states))
	}
	for _, j := range all {
		if j.Tenant != "acme" {
			continue
		}
		want := jobtype.Job{ID: j.ID, State: j.State, Version: j.Version}
		if g := got[j.ID]; !reflect.DeepEqual(g, want) {
			t.Errorf("read state of %s = %+v, want only its id, state and version: %+v", j.ID, g, want)
		}
	}

	none, err := s.ReadJobs(t.Context(), nil, store.JobRead{})
	if err != nil || len(none) != 0 {
		t.Errorf("read of no ids = %v, %v; want none, nil", idsOf(none), err)
	}
}

func idsOf(jobs []jobtype.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	slices.Sort(out)
	return out
}

func testListBatch(t *testing.T, s store.Store) {
	cursor, err := s.ChangeCursor(t.Context())
	if err != nil {
		t.Fatalf("change cursor: %v", err)
	}
	thumbs := batchJobs("t", "thumbs", 7)
	for i := range thumbs {
		thumbs[i].CreatedAt = at(i)
	}
	other := batchJobs("o", "other", 3)
	loose := batchJobs("l", "", 3)
	elsewhere := batchJobs("e", "thumbs", 2)
	for i := range elsewhere {
		elsewhere[i].Tenant = "globex"
	}
	for _, group := range [][]jobtype.Job{thumbs, other, loose, elsewhere} {
		if _, err := s.CreateJobs(t.Context(), group); err != nil {
			t.Fatalf("create jobs: %v", err)
		}
	}
	want := make([]string, 0, len(thumbs))
	for i := len(thumbs) - 1; i >= 0; i-- {
		want = append(want, thumbs[i].ID)
	}
	if got := listAll(t, s, store.ListFilter{Tenant: "acme", Batch: "thumbs"}, 3); !slices.Equal(got, want) {
		t.Errorf("list of batch thumbs in pages of 3 = %v, want %v", got, want)
	}
	changed := listAll(t, s, store.ListFilter{Tenant: "acme", Batch: "thumbs", ChangedSince: cursor}, 100)
	slices.Sort(changed)
	slices.Sort(want)
	if !slices.Equal(changed, want) {
		t.Errorf("changes of batch thumbs = %v, want %v", changed, want)
	}
	if got, _ := list(t, s, store.ListFilter{Tenant: "acme", Batch: "none-such"}); len(got) != 0 {
		t.Errorf("list of a batch nobody used = %v, want none", idsOf(got))
	}
}
