package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A QUEUED job says why it is not running where the page knows (the
// queues panel's answer, which an admin's page, or one of a server
// without tokens, reads): its queue is paused, since when and by whom,
// held by its rate until when, running its most jobs at once, running its
// most of the job's tenant's, or serial with a job of the tenant running
// or an older one of the tenant queued ahead of it; and says no more once
// that has changed.
func TestAQueuedJobSaysWhyItIsNotRunning(t *testing.T) {
	ctx, base, srv := startLiveWithRules(t, 3*time.Minute, jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"metered": {Rate: jobtype.Rate{Limit: 1, Per: time.Hour}},
		"render":  {MaxRunning: 1},
		"bulk":    {MaxRunningPerTenant: 1},
		"deploy":  {Serial: true},
		"ser":     {Serial: true},
	}})

	p := &page{t: t, ctx: newTab(t, ctx)}
	why := "#detail .wait-reason"

	t.Run("a paused queue: since when and by whom, gone once resumed", func(t *testing.T) {
		p.t = t
		if _, err := srv.engine.Pause(ctx, "default", "token ops (admin)"); err != nil {
			t.Fatal(err)
		}
		job := submit(t, ctx, srv.engine, "mail.send", `{}`)
		p.do("open the page on the job", chromedp.Navigate(base+"/?job="+job.ID))
		p.waitFor("why it waits", detailShows(job.ID, "queued")+" && "+textHas(why, "Not running: queue default is paused since ")+" && "+
			textHas(why, " by token ops (admin), under a minute.")+` && !document.querySelector("#detail .wait-reason").hidden`)
		if _, err := srv.engine.Resume(ctx, "default", "token ops (admin)"); err != nil {
			t.Fatal(err)
		}
		p.waitFor("no reason once the queue runs again", `document.querySelector("#detail .wait-reason").hidden`)
		w := claim(t, ctx, srv.engine, "mail.send")
		p.waitFor("the job running", detailShows(w.job.ID, "running"))
	})

	t.Run("a queue held by its rate: until when", func(t *testing.T) {
		p.t = t
		for range 2 {
			if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "call", Queue: "metered"}); err != nil {
				t.Fatal(err)
			}
		}
		first, err := srv.engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "e2e-worker", Queues: []string{"metered"}}, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held, _, err := srv.engine.List(ctx, jobs.ListRequest{Queue: "metered", States: []jobtype.State{jobtype.Queued}})
		if err != nil || len(held) != 1 {
			t.Fatalf("the queued job of metered: %v, %v", held, err)
		}
		p.click("open the held job", row(held[0].ID))
		p.waitFor("why it waits", detailShows(held[0].ID, "queued")+" && "+textHas(why, "Not running: queue metered is held by its rate until ")+" && "+textHas(why, "(1/1h)."))
		p.click("open the running one", row(first.ID))
		p.waitFor("no reason for a running job", detailShows(first.ID, "running")+` && document.querySelector("#detail .wait-reason").hidden`)
	})

	// heldBehind submits two jobs to queue, claims one, and opens the
	// other: what the page says of it, and once the claimed one has
	// ended, that it says no more.
	heldBehind := func(t *testing.T, queue, want string) {
		p.t = t
		for range 2 {
			if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "build", Queue: queue}); err != nil {
				t.Fatal(err)
			}
		}
		running, err := srv.engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "e2e-worker", Queues: []string{queue}}, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held, _, err := srv.engine.List(ctx, jobs.ListRequest{Queue: queue, States: []jobtype.State{jobtype.Queued}})
		if err != nil || len(held) != 1 {
			t.Fatalf("the queued job of %s: %v, %v", queue, held, err)
		}
		p.click("open the held job", row(held[0].ID))
		p.waitFor("why it waits", detailShows(held[0].ID, "queued")+" && "+textIs(why, want)+` && !document.querySelector("#detail .wait-reason").hidden`)
		w := &worker{t: t, ctx: ctx, e: srv.engine, job: running}
		w.complete(`{}`)
		p.waitFor("no reason once the running one ended", detailShows(held[0].ID, "queued")+` && document.querySelector("#detail .wait-reason").hidden`)
	}
	t.Run("a queue at its max_running", func(t *testing.T) {
		heldBehind(t, "render", "Not running: queue render runs at most 1 job at once, and 1 is running.")
	})
	t.Run("a tenant at its max_running_per_tenant", func(t *testing.T) {
		heldBehind(t, "bulk", "Not running: queue bulk runs at most 1 job of a tenant at once, and 1 of tenant default's is running.")
	})
	t.Run("a serial queue running a job of the tenant", func(t *testing.T) {
		heldBehind(t, "deploy", "Waits its turn: queue deploy is serial, and a job of tenant default is running.")
	})
	t.Run("a serial queue with an older job of the tenant queued, of a kind no worker runs", func(t *testing.T) {
		p.t = t
		head, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "nobody.runs", Queue: "ser", RunAt: time.Now().Add(-5 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		later, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "build", Queue: "ser"})
		if err != nil {
			t.Fatal(err)
		}
		p.click("open the later job", row(later.ID))
		p.waitFor("why it waits", detailShows(later.ID, "queued")+" && "+
			textHas(why, "Waits its turn: queue ser is serial, and an older job of tenant default is queued ahead of it (waiting 5m ")+" && "+
			textHas(why, "): it runs first; a job no worker takes holds the tenant's later ones (cancel it, or run a worker of its kind).")+
			` && !document.querySelector("#detail .wait-reason").hidden`)
		p.click("open the older job", row(head.ID))
		p.waitFor("no reason for the oldest", detailShows(head.ID, "queued")+` && document.querySelector("#detail .wait-reason").hidden`)
		if _, err := srv.engine.Cancel(ctx, head.ID); err != nil {
			t.Fatal(err)
		}
		p.click("open the later job again", row(later.ID))
		p.waitFor("no reason once the one ahead is cancelled", detailShows(later.ID, "queued")+` && document.querySelector("#detail .wait-reason").hidden`)
	})
}
