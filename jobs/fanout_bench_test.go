package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// readCounter counts the GetJob calls that have returned: a Wait has
// subscribed and read its job (so it is as good as parked) once its read
// returns.
type readCounter struct {
	store.Store
	reads atomic.Int64
}

func (r *readCounter) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	defer r.reads.Add(1)
	return r.Store.GetJob(ctx, id)
}

// BenchmarkFanOutWait parks N engine Waits on one running job and
// publishes its completion once: one op is the time from the publish to
// the return of the last Wait (parking is not timed). It is the engine's
// share of answering N WaitJob calls of one job.
//
//	go test ./jobs/ -run '^$' -bench BenchmarkFanOutWait -benchtime 20x -count 10 | benchstat -
func BenchmarkFanOutWait(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			counted := &readCounter{Store: st}
			e := jobs.New(counted, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
			defer e.Shutdown()
			ctx := context.Background()
			b.ResetTimer()
			b.StopTimer()
			for range b.N {
				j, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "fan", Payload: []byte(`{"n":1}`)})
				if err != nil {
					b.Fatal(err)
				}
				end, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"fan"}}, time.Now().Add(time.Second))
				if err != nil {
					b.Fatal(err)
				}
				before := counted.reads.Load()
				var done sync.WaitGroup
				done.Add(n)
				far := time.Now().Add(time.Minute)
				for range n {
					go func() {
						defer done.Done()
						got, err := e.Wait(ctx, j.ID, far)
						if err != nil || !got.State.Terminal() {
							panic(fmt.Sprintf("wait: %v, state %s", err, got.State))
						}
					}()
				}
				for counted.reads.Load()-before < int64(n) {
					time.Sleep(time.Millisecond)
				}
				end.State, end.Version = jobtype.Succeeded, end.Version+1
				end.Result = []byte(`{"ok":true}`)
				end.FinishedAt = time.Now().UTC()
				b.StartTimer()
				e.Publish(end)
				done.Wait()
				b.StopTimer()
			}
		})
	}
}
