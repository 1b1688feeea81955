package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// wakeup is the one-at-a-time scenario: for --jobs jobs, one after
// another, a WaitJob, a WatchJob and a GetJob poll loop (--poll apart)
// observe the job while a worker completes it (see benchOne), against a
// fresh srv process.
func (b *benchRun) wakeup(ctx context.Context, srv benchServer) (*wakeupFigures, error) {
	p, err := startServer(ctx, srv, b.dir, b.serverOptions("wakeup"))
	if err != nil {
		return nil, err
	}
	defer p.stop()
	return b.wakeupOver(ctx, p, p)
}

// wakeupOver runs the wakeup scenario with the worker's calls (submit,
// claim, complete) on worker and the observers' on observer: the same
// process, or two replicas of one database.
func (b *benchRun) wakeupOver(ctx context.Context, worker, observer *serverProc) (*wakeupFigures, error) {
	wc := b.newClient(worker.base, 4)
	defer wc.Close()
	oc := wc
	if observer != worker {
		oc = b.newClient(observer.base, 4)
		defer oc.Close()
	}
	pollName := fmt.Sprintf("GetJob every %v", b.o.poll)
	// lat is each observer's latency from the commit; behind, the same
	// less the worker's own reply, per job: how much later than the worker
	// that finished the job the observer knew (negative: sooner).
	lat, behind := map[string][]time.Duration{}, map[string][]time.Duration{}
	for i := 0; i < b.o.jobs; i++ {
		r, err := benchOne(ctx, wc, oc, b.o.poll)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, errors.Join(err, worker.alive(), observer.alive()))
		}
		for k, d := range r {
			lat[k] = append(lat[k], d)
			behind[k] = append(behind[k], d-r[completeName])
		}
	}
	for _, ds := range behind {
		slices.Sort(ds)
	}
	reply := lat[completeName]
	slices.Sort(reply)
	return &wakeupFigures{
		Jobs:             b.o.jobs,
		ReplyP50MS:       ms(quantile(reply, 0.5)),
		WaitBehindP50MS:  ms(quantile(behind["WaitJob"], 0.5)),
		WaitBehindP99MS:  ms(quantile(behind["WaitJob"], 0.99)),
		WatchBehindP50MS: ms(quantile(behind["WatchJob"], 0.5)),
		WatchBehindP99MS: ms(quantile(behind["WatchJob"], 0.99)),
		PollBehindP50MS:  ms(quantile(behind[pollName], 0.5)),
		PollBehindP99MS:  ms(quantile(behind[pollName], 0.99)),
	}, nil
}

// completeName is the reference row: the worker's own CompleteJob reply,
// which carries the same commit (and its fsync) the observers wait for.
const completeName = "CompleteJob reply"

// benchOne runs one job, submitted, claimed and completed through w,
// past the three observers, which call through c, and returns how long
// each took to see it end.
func benchOne(ctx context.Context, w, c *client.Client, poll time.Duration) (map[string]time.Duration, error) {
	job, err := w.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "bench"})
	if err != nil {
		return nil, err
	}
	claim, err := w.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{"bench"}})
	if err != nil {
		return nil, err
	}
	if claim.GetJob().GetId() != job.GetId() {
		return nil, fmt.Errorf("claimed %q, want %q", claim.GetJob().GetId(), job.GetId())
	}

	// An observer that fails cancels the others with its error as the
	// cause; every way out waits for all three, so none outlives the call.
	seen := map[string]time.Time{}
	var mu sync.Mutex
	saw := func(who string) {
		mu.Lock()
		seen[who] = time.Now()
		mu.Unlock()
	}
	failed, fail := context.WithCancelCause(ctx)
	obsCtx, cancel := context.WithTimeoutCause(failed, time.Minute, errors.New("no observer saw the job end within a minute"))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		fail(nil)
		wg.Wait()
	}()
	observe := func(who string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && obsCtx.Err() == nil {
				fail(fmt.Errorf("%s: %w", who, err))
			}
		})
	}
	// ready: the wait's request is about to go out, and the watch holds
	// the claim's snapshot, so both are under way before the completion.
	ready := make(chan struct{}, 2)
	observe("WaitJob", func() error {
		ready <- struct{}{}
		if _, err := c.WaitForJob(obsCtx, job.GetId()); err != nil {
			return err
		}
		saw("WaitJob")
		return nil
	})
	observe("WatchJob", func() error {
		for j, err := range c.Watch(obsCtx, job.GetId()) {
			if err != nil {
				return err
			}
			if j.GetVersion() == job.GetVersion()+1 { // the claim's snapshot
				ready <- struct{}{}
			}
			if client.Terminal(j.GetState()) {
				saw("WatchJob")
				return nil
			}
		}
		return errors.New("the stream ended before the job did")
	})
	pollName := fmt.Sprintf("GetJob every %v", poll)
	observe(pollName, func() error {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			j, err := c.Get(obsCtx, job.GetId())
			if err != nil {
				return err
			}
			if client.Terminal(j.GetState()) {
				saw(pollName)
				return nil
			}
			select {
			case <-t.C:
			case <-obsCtx.Done():
				return context.Cause(obsCtx)
			}
		}
	})
	for range 2 {
		select {
		case <-ready:
		case <-obsCtx.Done():
			return nil, context.Cause(obsCtx)
		}
	}
	// The wait's request is on the wire once its goroutine runs; give it
	// time to park, and the poll loop a random phase, before completing.
	time.Sleep(20*time.Millisecond + time.Duration(time.Now().UnixNano()%int64(poll)))
	done, err := w.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: claim.GetLeaseId()})
	if err != nil {
		return nil, err
	}
	saw(completeName)
	wg.Wait()
	if obsCtx.Err() != nil { // an observer failed, or the minute passed
		return nil, context.Cause(obsCtx)
	}
	ended := done.GetJob().GetFinishedAt().AsTime()
	out := map[string]time.Duration{}
	for _, who := range []string{completeName, "WaitJob", "WatchJob", pollName} {
		t, ok := seen[who]
		if !ok {
			return nil, fmt.Errorf("%s never saw the job end", who)
		}
		out[who] = t.Sub(ended)
	}
	return out, nil
}

// quantile returns the q-quantile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
