package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// The logs scenario's shape, from issue 21: one job writes 1,000 lines a
// second for logsSeconds, in appends of logsBatch lines, while
// logsWatchers WatchJobLogs streams follow it; then a new watcher reads
// a backlog of logsBacklog lines; then as many watchers that never read
// sit on the job while it writes, and the server's RSS is read before
// and after.
const (
	logsWatchers = 100
	logsRate     = 1000 // lines a second
	logsBatch    = 10   // lines an append: one append every 10 ms
	logsBacklog  = 10_000
)

// The scenario's lengths, shorter in its tests.
var (
	logsSeconds = 5
	logsStalled = 100_000 // lines to the watchers that never read: 8 MB each
)

// logsFigures are the logs scenario's figures.
type logsFigures struct {
	Watchers int `json:"watchers"`
	Lines    int `json:"lines"`
	// Behind*: how long after its append's reply each watcher had each
	// line (0 when a watcher had it first).
	BehindP50MS float64 `json:"behind_append_p50_ms"`
	BehindP99MS float64 `json:"behind_append_p99_ms"`
	AppendP50MS float64 `json:"append_reply_p50_ms"`
	// BacklogMS: a new watcher's time to its logsBacklog-th line.
	BacklogMS float64 `json:"backlog_ms"`
	// RSS of the server with logsWatchers watchers that never read:
	// before any line, after logsStalled/10 lines and after logsStalled
	// (each watcher's share past what HTTP/2 lets a stream take unread).
	StalledRSSBeforeMiB float64 `json:"stalled_rss_before_mib"`
	StalledRSSTenthMiB  float64 `json:"stalled_rss_tenth_mib"`
	StalledRSSAfterMiB  float64 `json:"stalled_rss_after_mib"`
}

// logs runs the logs scenario against a fresh srv process.
func (b *benchRun) logs(ctx context.Context, srv benchServer) (*logsFigures, error) {
	p, err := startServer(ctx, srv, b.dir, b.serverOptions("logs"))
	if err != nil {
		return nil, err
	}
	defer p.stop()
	c := b.newClient(p.base, 8)
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx) // ends the jobs' heartbeats
	defer cancel()
	f, err := b.logsOver(ctx, c, p)
	if err != nil {
		return nil, errors.Join(err, p.alive())
	}
	return f, nil
}

// logsJob submits and claims a job that the scenario writes lines to.
func logsJob(ctx context.Context, c *client.Client, kind string) (*jobwatchv1.ClaimJobResponse, error) {
	if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: kind}); err != nil {
		return nil, err
	}
	claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{kind}})
	if err != nil {
		return nil, err
	}
	if claim.GetJob() == nil {
		return nil, errors.New("the claim found no job")
	}
	go keepLease(ctx, c, claim)
	return claim, nil
}

// keepLease heartbeats claim's job every few seconds until ctx ends, as
// a worker would, so that a slow machine never lets its lease run out.
func keepLease(ctx context.Context, c *client.Client, claim *jobwatchv1.ClaimJobResponse) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = c.WorkerService().Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: claim.GetJob().GetId(), LeaseId: claim.GetLeaseId()})
		}
	}
}

// appendLines appends n lines to claim's job, each with its time as the
// Go and TypeScript workers send it, and returns the reply's time.
func appendLines(ctx context.Context, c *client.Client, claim *jobwatchv1.ClaimJobResponse, first, n int) (time.Time, error) {
	req := &jobwatchv1.AppendJobLogsRequest{JobId: claim.GetJob().GetId(), LeaseId: claim.GetLeaseId()}
	now := timestamppb.Now()
	for i := range n {
		req.Lines = append(req.Lines, &jobwatchv1.AppendLogLine{Text: fmt.Sprintf("line %d: the bench writes about eighty bytes of text in each line", first+i), Time: now})
	}
	_, err := c.WorkerService().AppendJobLogs(ctx, req)
	return time.Now(), err
}

func (b *benchRun) logsOver(ctx context.Context, c *client.Client, p *serverProc) (*logsFigures, error) {
	f := &logsFigures{Watchers: logsWatchers, Lines: logsRate * logsSeconds}

	// Followed: every watcher notes when it had each line.
	claim, err := logsJob(ctx, c, "bench-logs")
	if err != nil {
		return nil, err
	}
	claimedAt := time.Now()
	id := claim.GetJob().GetId()
	got := make([][]time.Time, logsWatchers) // watcher, seq-1
	var started, ended sync.WaitGroup
	errs := make(chan error, logsWatchers)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for w := range logsWatchers {
		got[w] = make([]time.Time, f.Lines)
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			stream, err := c.JobService().WatchJobLogs(wctx, &jobwatchv1.WatchJobLogsRequest{JobId: id})
			started.Done()
			if err != nil {
				errs <- err
				return
			}
			defer stream.Close()
			for seen := 0; seen < f.Lines && stream.Receive(); {
				now := time.Now()
				for _, l := range stream.Msg().GetLines() {
					if s := l.GetSeq(); s >= 1 && int(s) <= f.Lines {
						got[w][s-1] = now
						seen++
					}
				}
			}
			if err := stream.Err(); err != nil && wctx.Err() == nil {
				errs <- err
			}
		}()
	}
	started.Wait()
	if err := p.awaitMetric(ctx, "jobwatch_open_watches", logsWatchers); err != nil {
		return nil, err
	}
	acked := make([]time.Time, f.Lines)
	var replies []time.Duration
	tick := time.NewTicker(time.Second * logsBatch / logsRate)
	for first := 0; first < f.Lines; first += logsBatch {
		<-tick.C
		sent := time.Now()
		at, err := appendLines(ctx, c, claim, first, logsBatch)
		if err != nil {
			tick.Stop()
			return nil, fmt.Errorf("append of lines %d to %d, %v after the claim: %w", first+1, first+logsBatch, time.Since(claimedAt).Round(time.Millisecond), err)
		}
		replies = append(replies, at.Sub(sent))
		for i := range logsBatch {
			acked[first+i] = at
		}
	}
	tick.Stop()
	done := make(chan struct{})
	go func() { ended.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		stop()
		return nil, errors.New("the watchers did not have every line within a minute")
	case err := <-errs:
		return nil, fmt.Errorf("a watcher: %w", err)
	}
	var behind []time.Duration
	for w := range got {
		for i, t := range got[w] {
			if t.IsZero() {
				return nil, fmt.Errorf("watcher %d never had line %d", w, i+1)
			}
			behind = append(behind, max(t.Sub(acked[i]), 0))
		}
	}
	slices.Sort(behind)
	slices.Sort(replies)
	f.BehindP50MS, f.BehindP99MS = ms(quantile(behind, 0.5)), ms(quantile(behind, 0.99))
	f.AppendP50MS = ms(quantile(replies, 0.5))

	// Backlog: logsBacklog lines, then a new watcher.
	claim, err = logsJob(ctx, c, "bench-logs-backlog")
	if err != nil {
		return nil, err
	}
	for first := 0; first < logsBacklog; first += 1000 {
		if _, err := appendLines(ctx, c, claim, first, 1000); err != nil {
			return nil, fmt.Errorf("append the backlog: %w", err)
		}
	}
	began := time.Now()
	stream, err := c.JobService().WatchJobLogs(ctx, &jobwatchv1.WatchJobLogsRequest{JobId: claim.GetJob().GetId()})
	if err != nil {
		return nil, err
	}
	for last := int64(0); last < logsBacklog; {
		if !stream.Receive() {
			stream.Close()
			return nil, fmt.Errorf("the backlog's watcher ended at line %d: %v", last, stream.Err())
		}
		if ls := stream.Msg().GetLines(); len(ls) > 0 {
			last = ls[len(ls)-1].GetSeq()
		}
	}
	f.BacklogMS = ms(time.Since(began))
	stream.Close()

	// Stalled: watchers that open a stream and never read it.
	claim, err = logsJob(ctx, c, "bench-logs-stalled")
	if err != nil {
		return nil, err
	}
	sctx, stopStalled := context.WithCancel(ctx)
	defer stopStalled()
	for range logsWatchers {
		s, err := c.JobService().WatchJobLogs(sctx, &jobwatchv1.WatchJobLogsRequest{JobId: claim.GetJob().GetId()})
		if err != nil {
			return nil, err
		}
		defer s.Close()
	}
	if err := p.awaitMetric(ctx, "jobwatch_open_watches", logsWatchers); err != nil {
		return nil, err
	}
	rss, err := p.rssKiB()
	if err != nil {
		return nil, err
	}
	f.StalledRSSBeforeMiB = rss / 1024
	for first := 0; first < logsStalled; first += 1000 {
		if first == logsStalled/10 {
			if rss, err = p.rssKiB(); err != nil {
				return nil, err
			}
			f.StalledRSSTenthMiB = rss / 1024
		}
		if _, err := appendLines(ctx, c, claim, first, 1000); err != nil {
			return nil, fmt.Errorf("append to the stalled watchers: %w", err)
		}
	}
	if rss, err = p.rssKiB(); err != nil {
		return nil, err
	}
	f.StalledRSSAfterMiB = rss / 1024
	return f, nil
}
