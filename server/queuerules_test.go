package server_test

import (
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

// Over the wire, as a remote worker sees it: a serial queue gives out its
// next job only once the running one ended, in submission order, and two
// queues sharing a pool of one unit never run two jobs at once. A claim
// that finds nothing it may run parks and ends empty at its deadline.
func TestClaimJobOverTheWireRespectsSerialQueuesAndPools(t *testing.T) {
	// The server's claim cap, not the caller's deadline, ends an empty
	// claim: a deadline's margin is too thin for a busy machine.
	ts := startServer(t, serverOptions{config: server.Config{ClaimCap: 500 * time.Millisecond}, engine: jobs.Config{Rules: jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{
			"index": {Serial: true, BlockOnFailure: true},
			"a":     {Uses: []string{"db"}},
			"b":     {Uses: []string{"db"}},
		},
		Pools: map[string]int{"db": 1},
	}}})
	c := ts.h2c()
	claimFrom := func(queue string) *jobwatchv1.ClaimJobResponse {
		t.Helper()
		// An empty answer, at the claim cap, is the expected one half
		// the time.
		resp, err := c.workers.ClaimJob(ctxTimeout(t, 20*time.Second), &jobwatchv1.ClaimJobRequest{
			WorkerId: "remote", Queues: []string{queue},
		})
		if err != nil {
			t.Fatalf("claim from %s: %v", queue, err)
		}
		return resp
	}

	var ids []string
	for range 3 {
		ids = append(ids, submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "idx", Queue: "index"}).GetId())
	}
	for i, id := range ids {
		got := claimFrom("index")
		if got.GetJob().GetId() != id {
			t.Fatalf("claim %d from the serial queue = %q, want %s", i+1, got.GetJob().GetId(), id)
		}
		if other := claimFrom("index"); other.GetJob() != nil {
			t.Fatalf("claimed %s while %s of the serial queue runs", other.GetJob().GetId(), id)
		}
		complete(t, c, got, nil)
	}

	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "q", Queue: "a"})
	bJob := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "q", Queue: "b"})
	held := claimFrom("a")
	if held.GetJob() == nil {
		t.Fatal("claim from a found nothing, want its job")
	}
	listed, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]*jobwatchv1.Queue{}
	for _, q := range listed.GetQueues() {
		rows[q.GetName()] = q
	}
	// Serial per tenant, with no max_running of its own: no bound
	// across tenants.
	if got := rows["index"]; got.GetMode() != jobwatchv1.QueueMode_QUEUE_MODE_SERIAL || got.GetMaxRunning() != 0 {
		t.Errorf("ListQueues says index is %v with max_running %d, want SERIAL with 0", got.GetMode(), got.GetMaxRunning())
	}
	if got := rows["default"].GetMode(); got != jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL {
		t.Errorf("ListQueues says default is %v, want PARALLEL", got)
	}
	for _, name := range []string{"a", "b"} {
		pools := rows[name].GetPools()
		if len(pools) != 1 || pools[0].GetName() != "db" || pools[0].GetUnits() != 1 || pools[0].GetInUse() != 1 {
			t.Errorf("ListQueues shows %s's pools as %v, want db with its 1 unit in use (a's running job)", name, pools)
		}
	}
	if got := claimFrom("b"); got.GetJob() != nil {
		t.Fatalf("claimed %s of b while a holds the pool's only unit", got.GetJob().GetId())
	}
	complete(t, c, held, nil)
	if got := claimFrom("b"); got.GetJob().GetId() != bJob.GetId() {
		t.Errorf("claim from b once a ended = %q, want %s", got.GetJob().GetId(), bJob.GetId())
	}
}
