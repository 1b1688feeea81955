package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobtype"
)

// gatedClaims holds a Worker's first claim until open is closed and
// records how many jobs each claim brought.
type gatedClaims struct {
	client.WorkerBackend
	open chan struct{}
	mu   sync.Mutex
	got  []int // jobs per claim call, undecodable ones included
}

func (g *gatedClaims) ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) ([]*client.Lease, []*client.UndecodableJobError, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	leases, undecodable, err := g.WorkerBackend.(client.BatchClaimer).ClaimJobs(ctx, workerID, kinds, queues, max)
	g.mu.Lock()
	g.got = append(g.got, len(leases)+len(undecodable))
	g.mu.Unlock()
	return leases, undecodable, err
}

func (g *gatedClaims) firstClaim() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.got) == 0 {
		return 0
	}
	return g.got[0]
}

func TestAWorkerWithFreeSlotsClaimsForAllOfThemInOneCall(t *testing.T) {
	var gate *gatedClaims // each backend's, set before its worker runs
	ran := make(chan string, 10)
	forEachBackend(t, client.WorkerConfig{Concurrency: 8},
		func(b client.WorkerBackend) client.WorkerBackend {
			gate = &gatedClaims{WorkerBackend: b, open: make(chan struct{})}
			return gate
		},
		func(w *client.Worker) {
			w.Handle("k", func(_ context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
				ran <- j.GetId()
				return "ok", nil
			})
		}, func(t *testing.T, env *workerEnv) {
			backend := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
			var ids []string
			for range 6 {
				ids = append(ids, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true}))
			}
			undecodable := ""
			if backend == "remote" || testdb.Backend() != "postgres" {
				// One of them the worker cannot decode (see
				// storeUndecodable): it fails that one and runs the rest.
				undecodable = ids[2]
				payload := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
				if backend == "in-process" {
					payload = `{"not json`
				}
				storeUndecodable(t, env.s, undecodable, payload)
			}
			for _, id := range ids {
				if id != undecodable {
					if _, err := env.c.Start(context.Background(), id); err != nil {
						t.Fatal(err)
					}
				}
			}
			close(gate.open)
			for _, id := range ids {
				// Through the engine: no client decodes the undecodable.
				// A generous bound: a loaded machine has taken over 10 s.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				j, err := env.s.Engine.Wait(ctx, id, time.Now().Add(time.Minute))
				cancel()
				want := jobtype.Succeeded
				if id == undecodable {
					want = jobtype.Failed
					if j.Error == nil || j.Error.Type != "UndecodableJob" {
						t.Errorf("undecodable job failed with %+v, want UndecodableJob", j.Error)
					}
				}
				if err != nil || j.State != want {
					t.Errorf("job %s: %s, %v; want %s", id, j.State, err, want)
				}
			}
			if got := gate.firstClaim(); got != 6 {
				t.Errorf("first claim brought %d jobs, want all 6 ready ones in one call", got)
			}
			if undecodable != "" && len(ran) != 5 {
				t.Errorf("handlers ran %d jobs, want the 5 decodable ones", len(ran))
			}
			for len(ran) > 0 {
				<-ran
			}
		})
}
