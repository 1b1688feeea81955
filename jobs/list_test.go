package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// largePayload is about 200 KB of JSON, under every payload limit, so
// that a few of them fill MaxPageBytes.
func largePayload(i int) []byte {
	return mustJSON(map[string]any{"n": i, "pad": strings.Repeat("x", 200_000)})
}

func pageBytes(page []jobtype.Job) int {
	n := 0
	for i := range page {
		n += page[i].Size()
	}
	return n
}

func jobIDs(js []jobtype.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

func TestListOfNoTenantListsTheDefaultTenant(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	mine := submit(t, e, jobs.SubmitRequest{})
	submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	page, _, err := e.List(context.Background(), jobs.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := jobIDs(page); !slices.Equal(got, []string{mine.ID}) {
		t.Errorf("List with no tenant = %v, want only the default tenant's job %s", got, mine.ID)
	}
}

func TestListIsASummaryUnlessFull(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Payload: mustJSON(map[string]any{"album": "summer"})})
	ctx := context.Background()
	page, _, err := e.List(ctx, jobs.ListRequest{})
	if err != nil || len(page) != 1 {
		t.Fatalf("List = %v, %v; want the job", jobIDs(page), err)
	}
	if page[0].Payload != nil || page[0].Version != j.Version || page[0].Kind != j.Kind {
		t.Errorf("summary = %+v, want the job without its payload", page[0])
	}
	page, _, err = e.List(ctx, jobs.ListRequest{Full: true})
	if err != nil || len(page) != 1 || string(page[0].Payload) != string(j.Payload) {
		t.Fatalf("full List = %+v, %v; want the job with its payload", page, err)
	}
}

func TestListPagesEndAtMaxPageBytes(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	var want []string
	for i := range 12 {
		want = append([]string{submit(t, e, jobs.SubmitRequest{Payload: largePayload(i)}).ID}, want...)
	}
	ctx := context.Background()
	var got []string
	f := jobs.ListRequest{Full: true, Limit: jobs.MaxPageSize}
	for pages := 1; ; pages++ {
		page, next, err := e.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if size := pageBytes(page); size > jobs.MaxPageBytes {
			t.Fatalf("page %d: %d jobs of %d bytes, over MaxPageBytes %d", pages, len(page), size, jobs.MaxPageBytes)
		}
		got = append(got, jobIDs(page)...)
		if next == "" {
			if pages < 3 {
				t.Errorf("12 jobs of 200 KB came in %d pages, want at least 3 of at most %d bytes", pages, jobs.MaxPageBytes)
			}
			break
		}
		f.PageToken = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged ids = %v, want %v: every job once, newest first", got, want)
	}

	// A caller cannot raise the bound.
	page, _, err := e.List(ctx, jobs.ListRequest{Full: true, Limit: jobs.MaxPageSize, MaxBytes: 1 << 30})
	if err != nil || pageBytes(page) > jobs.MaxPageBytes {
		t.Errorf("List with MaxBytes 1 GiB = %d bytes, %v; want at most MaxPageBytes", pageBytes(page), err)
	}
}

func TestWatchTenantSendsLargeJobsInBatchesBoundedInBytes(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	for _, full := range []bool{true, false} {
		t.Run(fmt.Sprintf("full %v", full), func(t *testing.T) {
			tenant := fmt.Sprintf("full-%v", full)
			var recent []string
			for i := range 8 {
				recent = append([]string{submit(t, e, jobs.SubmitRequest{Tenant: tenant, Payload: largePayload(i)}).ID}, recent...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := newBatches()
			// The stream waits in its last send of the recent jobs until
			// the burst below is committed, so that it reads the burst in
			// one look.
			gate := make(chan struct{})
			waited := false // only the stream's goroutine touches it
			send := func(batch []jobtype.Job, deleted []string, token string) error {
				err := out.send(batch, deleted, token)
				if token != "" && !waited {
					waited = true
					<-gate
				}
				return err
			}
			done := async(func() (struct{}, error) {
				return struct{}{}, e.WatchTenant(ctx, tenant, jobs.TenantWatchOptions{Full: full, PageSize: jobs.MaxPageSize, Deadline: soon(), Send: send})
			})
			// batch waits for the next batch, checks its size and view, and
			// returns it with its token.
			batch := func() ([]jobtype.Job, string) {
				t.Helper()
				out.next(t)
				out.mu.Lock()
				defer out.mu.Unlock()
				b, token := out.got[out.read-1], out.tokens[out.read-1]
				if size := pageBytes(b); size > jobs.MaxPageBytes {
					t.Fatalf("batch of %d jobs of %d bytes, over MaxPageBytes %d", len(b), size, jobs.MaxPageBytes)
				}
				for _, j := range b {
					if full != (j.Payload != nil) {
						t.Fatalf("job %s has a payload of %d bytes in a view with full %v", j.ID, len(j.Payload), full)
					}
				}
				return b, token
			}

			// The recent jobs: only the last batch carries a token, so a
			// client that loses the stream before it starts over.
			var got []string
			var token string
			batches := 0
			for token == "" {
				b, tok := batch()
				got, token = append(got, jobIDs(b)...), tok
				batches++
			}
			if !slices.Equal(got, recent) {
				t.Fatalf("recent jobs = %v, want %v", got, recent)
			}
			if full && batches < 2 || !full && batches != 1 {
				t.Errorf("8 jobs of 200 KB came in %d batches with full %v", batches, full)
			}

			// A burst of changes read in one look: the batches before the
			// last keep the previous token, the last one advances it.
			burst := map[string]bool{}
			for i := range 8 {
				burst[submit(t, e, jobs.SubmitRequest{Tenant: tenant, Payload: largePayload(i)}).ID] = true
			}
			close(gate)
			seen := map[string]bool{}
			batches = 0
			for len(seen) < len(burst) {
				b, tok := batch()
				batches++
				for _, j := range b {
					if !burst[j.ID] || seen[j.ID] {
						t.Fatalf("job %s sent again or not of the burst", j.ID)
					}
					seen[j.ID] = true
				}
				last := len(seen) == len(burst)
				if !last && tok != token {
					t.Errorf("batch %d of a burst moved the token from %q to %q before the burst was all sent", batches, token, tok)
				}
				if last && tok == token {
					t.Errorf("the last batch of a burst kept the token %q", tok)
				}
			}
			if full && batches < 2 {
				t.Errorf("a burst of 8 jobs of 200 KB came in %d batch", batches)
			}
			cancel()
			await(t, done)
		})
	}
}
