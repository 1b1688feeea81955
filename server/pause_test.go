package server_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/server"
)

// queueRow is queue's row of ListQueues, or nil.
func queueRow(t *testing.T, c clients, queue string) *jobwatchv1.Queue {
	t.Helper()
	resp, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	for _, q := range resp.GetQueues() {
		if q.GetName() == queue {
			return q
		}
	}
	return nil
}

// pausedGauge reads jobwatch_queue_paused{queue} from the registry
// /metrics serves, and whether the series exists.
func pausedGauge(t *testing.T, ts *testServer, queue string) (float64, bool) {
	t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "jobwatch_queue_paused" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func TestAPausedQueueParksClaimsUntilResumedAndStaysPausedAcrossARestart(t *testing.T) {
	db := testdb.New(t)
	cfg := server.Config{Tokens: testTokens(t), ClaimCap: time.Minute}
	ts := startServer(t, serverOptions{dbPath: db, config: cfg})
	for _, p := range authProtocols {
		t.Run(p.name, func(t *testing.T) {
			admin, worker := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, workerToken)
			queue := "reports-" + strings.NewReplacer(" ", "-", "/", "-", ".", "-").Replace(p.name)
			first := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "report", Queue: queue})
			// ListQueues may answer from a read up to ten times as old as
			// that read took (listQueuesReuse), and the pause answers with
			// the queue's row: wait until a read has the job, as an operator
			// who sees it before pausing does.
			waitUntil(t, "ListQueues to count the job queued", func() bool {
				list, err := admin.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range list.GetQueues() {
					if q.GetName() == queue {
						return q.GetQueued() == 1
					}
				}
				return false
			})

			paused, err := admin.queues.PauseQueue(ctxTimeout(t, 5*time.Second), &jobwatchv1.PauseQueueRequest{Queue: queue})
			if err != nil {
				t.Fatalf("pause: %v", err)
			}
			row := paused.GetQueue()
			if !row.GetPaused() || row.GetPausedAt() == nil || !strings.HasSuffix(row.GetPausedBy(), "(admin)") || row.GetQueued() != 1 {
				t.Fatalf("pause answered %v, want the queue paused by an admin token, with its job queued", row)
			}

			// A worker's claim parks and gets nothing while the queue's
			// jobs wait, also when another is queued.
			type claimed struct {
				resp *jobwatchv1.ClaimJobResponse
				err  error
			}
			done := make(chan claimed, 1)
			go func() {
				resp, err := worker.workers.ClaimJob(ctxTimeout(t, 30*time.Second),
					&jobwatchv1.ClaimJobRequest{WorkerId: "w-" + queue, Queues: []string{queue}})
				done <- claimed{resp, err}
			}()
			ts.waitForGauge("jobwatch_parked_claims", 1)
			submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "report", Queue: queue})
			ts.waitForGauge("jobwatch_parked_claims", 1)
			select {
			case c := <-done:
				t.Fatalf("a claim on a paused queue returned %v, %v", c.resp.GetJob(), c.err)
			default:
			}

			got := queueRow(t, admin, queue)
			if !got.GetPaused() || !got.GetPausedAt().AsTime().Equal(row.GetPausedAt().AsTime()) || got.GetPausedBy() != row.GetPausedBy() {
				t.Errorf("ListQueues shows %v, want paused as the pause answered", got)
			}
			if v, ok := pausedGauge(t, ts, queue); !ok || v != 1 {
				t.Errorf("jobwatch_queue_paused of the queue = %v (series: %v), want 1", v, ok)
			}

			// The resume wakes the parked claim at once: the claim cap is
			// a minute.
			resumed, err := admin.queues.ResumeQueue(ctxTimeout(t, 5*time.Second), &jobwatchv1.ResumeQueueRequest{Queue: queue})
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if q := resumed.GetQueue(); q.GetPaused() || q.GetPausedAt() != nil || q.GetPausedBy() != "" {
				t.Errorf("resume answered %v, want the queue not paused", q)
			}
			select {
			case c := <-done:
				if c.err != nil || c.resp.GetJob().GetId() != first.GetId() {
					t.Fatalf("the claim woken by the resume got %v, %v; want the first job %s", c.resp.GetJob(), c.err, first.GetId())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the parked claim was not woken by the resume")
			}
			if v, _ := pausedGauge(t, ts, queue); v != 0 {
				t.Errorf("jobwatch_queue_paused of the queue after the resume = %v, want 0 or no series", v)
			}
		})
	}

	// A pause outlives a restart: the next server on the same database
	// shows it and hands out no claim from the queue.
	admin := ts.clientsWithToken(authProtocols[0], adminToken)
	submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "report", Queue: "kept"})
	before, err := admin.queues.PauseQueue(ctxTimeout(t, 5*time.Second), &jobwatchv1.PauseQueueRequest{Queue: "kept"})
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := ts.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cfg.ClaimCap = 300 * time.Millisecond
	again := startServer(t, serverOptions{dbPath: db, config: cfg})
	admin, worker := again.clientsWithToken(authProtocols[0], adminToken), again.clientsWithToken(authProtocols[0], workerToken)
	got := queueRow(t, admin, "kept")
	if !got.GetPaused() || !got.GetPausedAt().AsTime().Equal(before.GetQueue().GetPausedAt().AsTime()) ||
		got.GetPausedBy() != before.GetQueue().GetPausedBy() {
		t.Errorf("after a restart ListQueues shows %v, want it paused as before: %v", got, before.GetQueue())
	}
	resp, err := worker.workers.ClaimJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Queues: []string{"kept"}})
	if err != nil || resp.GetJob() != nil {
		t.Errorf("a claim on the paused queue after a restart got %v, %v; want nothing at its cap", resp.GetJob(), err)
	}
}

func TestPauseAndResumeAnswerBadInputWithCodesThatNameTheQueue(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	ctx := ctxTimeout(t, 10*time.Second)

	_, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{})
	wantCode(t, err, connect.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "queue") {
		t.Errorf("pause of no queue says %q, want it to name the field", err)
	}
	for _, call := range []func() error{
		func() error {
			_, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: "no-such-queue"})
			return err
		},
		func() error {
			_, err := c.queues.ResumeQueue(ctx, &jobwatchv1.ResumeQueueRequest{Queue: "no-such-queue"})
			return err
		},
	} {
		err := call()
		wantCode(t, err, connect.CodeNotFound)
		if !strings.Contains(err.Error(), "no-such-queue") {
			t.Errorf("unknown queue says %q, want it to name the queue", err)
		}
	}

	// The default queue is always known; pausing twice keeps the first
	// pause; resuming twice is OK.
	first, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: "default"})
	if err != nil {
		t.Fatalf("pause default: %v", err)
	}
	if by := first.GetQueue().GetPausedBy(); by != "anonymous" {
		t.Errorf("paused_by without a tokens file = %q, want anonymous", by)
	}
	if line := metricLine(t, ts.url, `jobwatch_queue_paused{queue="default"}`); line != `jobwatch_queue_paused{queue="default"} 1` {
		t.Errorf("/metrics shows %q, want the default queue paused", line)
	}
	second, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: "default"})
	if err != nil || !second.GetQueue().GetPausedAt().AsTime().Equal(first.GetQueue().GetPausedAt().AsTime()) {
		t.Errorf("second pause: %v, %v; want the first pause kept", second.GetQueue(), err)
	}
	for range 2 {
		resp, err := c.queues.ResumeQueue(ctx, &jobwatchv1.ResumeQueueRequest{Queue: "default"})
		if err != nil || resp.GetQueue().GetPaused() {
			t.Errorf("resume: %v, %v; want OK and not paused", resp.GetQueue(), err)
		}
	}
	if strings.Count(ts.logs.String(), "queue paused") != 1 || strings.Count(ts.logs.String(), "queue resumed") != 1 {
		t.Errorf("logs hold %d pauses and %d resumes, want one of each:\n%s",
			strings.Count(ts.logs.String(), "queue paused"), strings.Count(ts.logs.String(), "queue resumed"), ts.logs.String())
	}

	// A queue paused with no job and no rule still has a row.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: "empty-later", Hold: true})
	if _, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: "empty-later"}); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if row := queueRow(t, c, "empty-later"); row == nil || !row.GetPaused() {
		t.Errorf("ListQueues row of a paused queue without unfinished jobs: %v, want it paused", row)
	}
}
