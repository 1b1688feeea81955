package jobs_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// BenchmarkWaitManyAnyAnswersAtOnce is one call of a WaitJobs (ANY) loop
// over 1,000 jobs of which one has ended: the call answers at once. It is
// what each turn of the loop costs the server's engine.
//
//	go test ./jobs/ -run '^$' -bench BenchmarkWaitManyAnyAnswersAtOnce -benchtime 200x -count 5
func BenchmarkWaitManyAnyAnswersAtOnce(b *testing.B) {
	e, ids := waitManyBench(b, 1)
	far := time.Now().Add(time.Minute)
	for b.Loop() {
		res, err := e.WaitMany(b.Context(), jobs.WaitManyRequest{IDs: ids, Any: true}, far)
		if err != nil || len(res.Ended) != 1 {
			b.Fatalf("WaitMany: %v, %d ended", err, len(res.Ended))
		}
	}
}

// BenchmarkWaitManyAllEndedAnswersAtOnce is a WaitJobs (ALL) of 1,000
// jobs that have all ended: it answers at once with every one.
func BenchmarkWaitManyAllEndedAnswersAtOnce(b *testing.B) {
	e, ids := waitManyBench(b, 1000)
	far := time.Now().Add(time.Minute)
	for b.Loop() {
		res, err := e.WaitMany(b.Context(), jobs.WaitManyRequest{IDs: ids}, far)
		if err != nil || len(res.Ended) != len(ids) {
			b.Fatalf("WaitMany: %v, %d ended", err, len(res.Ended))
		}
	}
}

// waitManyBench returns an engine on a SQLite file holding 1,000 queued
// jobs, of which ended are cancelled (every 1000/ended-th from the
// 500th), and their ids.
func waitManyBench(b *testing.B, ended int) (*jobs.Engine, []string) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	b.Cleanup(e.Shutdown)
	ctx := context.Background()
	rs := make([]jobs.SubmitRequest, 1000)
	for i := range rs {
		rs[i] = jobs.SubmitRequest{Kind: "many", Payload: []byte(`{"n":1}`)}
	}
	submitted, err := e.SubmitMany(ctx, rs)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, len(submitted))
	for i, j := range submitted {
		ids[i] = j.ID
	}
	for i := 0; i < ended; i++ {
		if _, err := e.Cancel(ctx, ids[(500+i*len(ids)/ended)%len(ids)]); err != nil {
			b.Fatal(err)
		}
	}
	return e, ids
}
