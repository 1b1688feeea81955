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
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	defer e.Shutdown()
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
	if _, err := e.Cancel(ctx, ids[500]); err != nil {
		b.Fatal(err)
	}
	far := time.Now().Add(time.Minute)
	for b.Loop() {
		res, err := e.WaitMany(ctx, jobs.WaitManyRequest{IDs: ids, Any: true}, far)
		if err != nil || len(res.Ended) != 1 {
			b.Fatalf("WaitMany: %v, %d ended", err, len(res.Ended))
		}
	}
}
