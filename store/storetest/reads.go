package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var readCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a read scoped to the job's tenant returns it as get does, whole or as a summary", testReadJobOwnTenant},
	{"a read scoped to another tenant is not found, in the words of a job that does not exist", testReadJobOtherTenant},
	{"a read scoped to another tenant, or a summary, reads nothing of the payload and result", testReadJobReadsNoPayload},
}

func testReadJobOwnTenant(t *testing.T, s store.Store) {
	j := newJob("job-1", at(0))
	j.Payload = json.RawMessage(`{"to":"a@example.com"}`)
	j.Result = json.RawMessage(`{"sent":true}`)
	j.Error = &jobtype.JobError{Type: "Timeout", Message: "earlier attempt"}
	create(t, s, j)
	want := get(t, s, j.ID)
	for _, r := range []store.JobRead{{}, {Tenant: j.Tenant}} {
		got, err := s.ReadJob(t.Context(), j.ID, r)
		if err != nil {
			t.Fatalf("read %+v: %v", r, err)
		}
		if d := diff(got, want); len(d) > 0 {
			t.Errorf("read %+v differs from get in %v", r, d)
		}
	}
	summary := want
	summary.Payload, summary.Result = nil, nil
	for _, r := range []store.JobRead{{Summary: true}, {Tenant: j.Tenant, Summary: true}} {
		got, err := s.ReadJob(t.Context(), j.ID, r)
		if err != nil {
			t.Fatalf("read %+v: %v", r, err)
		}
		if got.Payload != nil || got.Result != nil {
			t.Errorf("read %+v has payload %q and result %q, want neither", r, got.Payload, got.Result)
		}
		if d := diff(got, summary); len(d) > 0 {
			t.Errorf("read %+v differs from the job in %v", r, d)
		}
	}
}

func testReadJobOtherTenant(t *testing.T, s store.Store) {
	j := newJob("job-1", at(0))
	j.Payload = json.RawMessage(`{"secret":"of acme"}`)
	create(t, s, j)
	for _, summary := range []bool{false, true} {
		_, otherErr := s.ReadJob(t.Context(), "job-1", store.JobRead{Tenant: "globex", Summary: summary})
		_, missingErr := s.ReadJob(t.Context(), "job-2", store.JobRead{Tenant: "globex", Summary: summary})
		if !errors.Is(otherErr, jobtype.ErrNotFound) || !errors.Is(missingErr, jobtype.ErrNotFound) {
			t.Fatalf("summary %v: another tenant's job: %v; a missing job: %v; want ErrNotFound for both", summary, otherErr, missingErr)
		}
		// The message names the id asked for, and nothing else tells them
		// apart.
		other := strings.ReplaceAll(otherErr.Error(), "job-1", "ID")
		missing := strings.ReplaceAll(missingErr.Error(), "job-2", "ID")
		if other != missing {
			t.Errorf("summary %v: another tenant's job reads %q, a missing one %q: the words tell them apart", summary, other, missing)
		}
		if strings.Contains(otherErr.Error(), "acme") || strings.Contains(otherErr.Error(), "secret") {
			t.Errorf("summary %v: the error %q names what the caller may not see", summary, otherErr)
		}
	}
	// The job is still there for its own tenant.
	if _, err := s.ReadJob(t.Context(), "job-1", store.JobRead{Tenant: "acme"}); err != nil {
		t.Errorf("read by its own tenant: %v", err)
	}
}

// testReadJobReadsNoPayload proves through allocations, as
// testListReadsOnlyWhatItReturns does, that a read that does not return
// a job's payload and result does not read them: a driver copies every
// value it reads into memory.
func testReadJobReadsNoPayload(t *testing.T, s store.Store) {
	const each, reads = 1 << 20, 8
	j := newJob("job-1", at(0))
	j.Payload = json.RawMessage(fmt.Sprintf(`{"pad":%q}`, bytes2(each)))
	j.Result = json.RawMessage(fmt.Sprintf(`{"pad":%q}`, bytes2(each)))
	create(t, s, j)
	allocated := func(r store.JobRead) int {
		t.Helper()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range reads {
			got, err := s.ReadJob(t.Context(), j.ID, r)
			if r.Tenant == "globex" && !errors.Is(err, jobtype.ErrNotFound) || r.Tenant != "globex" && err != nil {
				t.Fatalf("read %+v: %v", r, err)
			}
			if got.Payload != nil && r.Summary {
				t.Fatalf("read %+v returned a payload", r)
			}
		}
		runtime.ReadMemStats(&after)
		return int(after.TotalAlloc-before.TotalAlloc) / reads
	}
	whole := allocated(store.JobRead{Tenant: "acme"})
	if whole < 2*each {
		t.Fatalf("a whole read allocated %d KiB of a job with %d KiB of payload and result: the measure does not work", whole>>10, 2*each>>10)
	}
	for _, r := range []store.JobRead{{Tenant: "globex"}, {Tenant: "globex", Summary: true}, {Summary: true}, {Tenant: "acme", Summary: true}} {
		if got := allocated(r); got > each/16 {
			t.Errorf("read %+v allocated %d KiB per read of a job with %d KiB of payload and result, want under %d KiB: it read what it does not return",
				r, got>>10, 2*each>>10, each/16>>10)
		} else {
			t.Logf("read %+v allocated %d KiB per read (a whole read: %d KiB)", r, got>>10, whole>>10)
		}
	}
}
