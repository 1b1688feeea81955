package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobtype"
)

// The batches scenario (issue 21) measures SubmitJobs and WaitJobs beside
// the one-job calls they replace, against fresh serve processes of
// jobwatch (the floor and --before have no such calls):
//
//   - submit: --batch-calls SubmitJobs of --batch-jobs no-op jobs, one
//     call at a time, each followed by a round of as many SubmitJob calls
//     from submitMany's 8 goroutines, so that the machine's noise falls on
//     both alike; on SQLite, and with --postgres on PostgreSQL too;
//   - memory: --batch-waits WaitJobs of --batch-jobs queued jobs each,
//     parked in one process, and one WaitJob for each of those jobs parked
//     in another, both fresh on one database that a third process filled:
//     the growth of RSS, heap and goroutines over each process's own
//     baseline, per job waited for (RSS as the parked scenario reads it);
//   - wake: --batch-wakes times, a WaitJobs (ALL) of --batch-jobs jobs of
//     which all but one have ended, then the last completed, and a WaitJob
//     of one job measured as the parked scenario measures it (wakeOne),
//     turn about: when each call answered, less when the worker had its
//     CompleteJob reply.

// Kinds of the scenario's jobs: a claim names its kind, and the bulk
// cancel of the wake part touches no job of another part.
const (
	batchSubmitKind = "batch-submit"
	batchParkedKind = "batch-parked"
	batchWakeKind   = "batch-wake"
)

// batchParkSettle is how long a wake-up lets a WaitJobs park once the
// server counts it: from the handler's entry it still subscribes to every
// job and reads them all in one store read. A call that was not parked
// yet when its job ended is measured again (see woken), so this only
// saves time.
const batchParkSettle = 20 * time.Millisecond

// checkBatchJobs refuses a --batch-jobs that no SubmitJobs or WaitJobs
// takes (it is positive already).
func (c CLI) checkBatchJobs(n int) error {
	if n > jobtype.MaxBatchJobs {
		return c.usageError(fmt.Sprintf("--batch-jobs: at most %d (as many as one SubmitJobs or WaitJobs takes), got %d", jobtype.MaxBatchJobs, n))
	}
	return nil
}

// batchesFigures are the batches scenario's figures (jobwatch only).
type batchesFigures struct {
	Jobs  int `json:"jobs"`  // in each SubmitJobs and each WaitJobs
	Calls int `json:"calls"` // SubmitJobs timed, and rounds of SubmitJob
	Waits int `json:"waits"` // WaitJobs parked in the memory part
	Wakes int `json:"wakes"` // wake-ups timed of each call
	// Submit: on SQLite; SubmitPostgres: with --postgres, on one replica.
	Submit         batchSubmitFigures  `json:"submit"`
	SubmitPostgres *batchSubmitFigures `json:"submit_postgres,omitempty"`
	// The server with Waits WaitJobs parked, and, in another process on
	// the same jobs, with Waits × Jobs WaitJob parked.
	WaitJobsParked batchParkedFigures `json:"wait_jobs_parked"`
	WaitJobParked  batchParkedFigures `json:"wait_job_parked"`
	Wake           batchWakeFigures   `json:"wake"`
}

// batchSubmitFigures: Calls SubmitJobs of Jobs jobs, one at a time, and
// Calls rounds of Jobs SubmitJob calls from 8 goroutines; jobs/s is the
// jobs over the time of the calls (or rounds) measured.
type batchSubmitFigures struct {
	BatchP50MS  float64 `json:"submit_jobs_p50_ms"`
	BatchP99MS  float64 `json:"submit_jobs_p99_ms"`
	BatchPerS   float64 `json:"submit_jobs_per_s"`
	SingleP50MS float64 `json:"submit_job_round_p50_ms"`
	SingleP99MS float64 `json:"submit_job_round_p99_ms"`
	SinglePerS  float64 `json:"submit_job_per_s"`
}

// batchParkedFigures: a server with Calls calls parked on Jobs distinct
// queued jobs, read --settle after the last parked, against the same
// process before the first. Per job: the growth over Jobs.
type batchParkedFigures struct {
	Calls            int     `json:"calls"`
	Jobs             int     `json:"jobs"`
	RSSBeforeKiB     float64 `json:"rss_before_kib"`
	RSSKiB           float64 `json:"rss_kib"`
	HeapBeforeKiB    float64 `json:"heap_inuse_before_kib"`
	HeapKiB          float64 `json:"heap_inuse_kib"`
	GoroutinesBefore float64 `json:"goroutines_before"`
	Goroutines       float64 `json:"goroutines"`
	RSSPerJobKiB     float64 `json:"rss_per_job_kib"`
	HeapPerJobKiB    float64 `json:"heap_inuse_per_job_kib"`
	GoroutinesPerJob float64 `json:"goroutines_per_job"`
}

// batchWakeFigures: when a parked call had the finished jobs, less when
// the worker had its CompleteJob reply (negative: the caller knew first).
type batchWakeFigures struct {
	WaitJobsP50MS float64 `json:"wait_jobs_behind_reply_p50_ms"`
	WaitJobsP99MS float64 `json:"wait_jobs_behind_reply_p99_ms"`
	// WaitJobsArrived*: the same, to the moment the answer's last byte
	// reached the caller, before its client decoded it.
	WaitJobsArrivedP50MS float64 `json:"wait_jobs_arrived_behind_reply_p50_ms"`
	WaitJobsArrivedP99MS float64 `json:"wait_jobs_arrived_behind_reply_p99_ms"`
	WaitJobP50MS         float64 `json:"wait_job_behind_reply_p50_ms"`
	WaitJobP99MS         float64 `json:"wait_job_behind_reply_p99_ms"`
	// The worker's CompleteJob round trip, for scale.
	CompleteP50MS float64 `json:"complete_call_p50_ms"`
	// Answer*: the round trip of the same WaitJobs, and of a WaitJob of
	// one of its jobs, once every job has ended: what an answer costs
	// that needs no wait (a WaitJobs answer carries every ended job).
	AnswerWaitJobsP50MS float64 `json:"wait_jobs_answer_p50_ms"`
	AnswerWaitJobP50MS  float64 `json:"wait_job_answer_p50_ms"`
	// Redone: wake-ups measured again because the call read its job
	// ended before it parked, so answered without a wake-up.
	Redone int `json:"redone"`
}

// batches runs the batches scenario against srv.
func (b *benchRun) batches(ctx context.Context, srv benchServer) (*batchesFigures, error) {
	f := &batchesFigures{Jobs: b.o.batchJobs, Calls: b.o.batchCalls, Waits: b.o.batchWaits, Wakes: b.o.batchWakes}
	var err error
	b.progress("batches: %d SubmitJobs of %d jobs, and as many rounds of SubmitJob, on SQLite", f.Calls, f.Jobs)
	if f.Submit, err = b.batchSubmitSQLite(ctx, srv); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	if b.o.postgres != "" {
		b.progress("batches: the same on PostgreSQL")
		s, err := b.batchSubmitPostgres(ctx, srv)
		if err != nil {
			return nil, fmt.Errorf("submit, PostgreSQL: %w", err)
		}
		f.SubmitPostgres = &s
	}
	b.progress("batches: %d WaitJobs of %d jobs parked, then %d WaitJob", f.Waits, f.Jobs, f.Waits*f.Jobs)
	if f.WaitJobsParked, f.WaitJobParked, err = b.batchMemory(ctx, srv); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	b.progress("batches: %d wake-ups of a WaitJobs of %d jobs and of a WaitJob", f.Wakes, f.Jobs)
	if f.Wake, err = b.batchWakes(ctx, srv); err != nil {
		return nil, fmt.Errorf("wake: %w", err)
	}
	return f, nil
}

func (b *benchRun) batchSubmitSQLite(ctx context.Context, srv benchServer) (batchSubmitFigures, error) {
	p, err := startServer(ctx, srv, b.dir, serverOptions{db: "batches-submit", parked: 1000})
	if err != nil {
		return batchSubmitFigures{}, err
	}
	defer p.stop()
	f, err := b.batchSubmits(ctx, p)
	return f, errors.Join(err, p.alive())
}

func (b *benchRun) batchSubmitPostgres(ctx context.Context, srv benchServer) (f batchSubmitFigures, err error) {
	procs, stop, err := b.startReplicas(ctx, srv, "batches", 1)
	if err != nil {
		return f, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	f, err = b.batchSubmits(ctx, procs[0])
	return f, errors.Join(err, procs[0].alive())
}

// batchSubmits times --batch-calls SubmitJobs on p, each followed by a
// round of as many SubmitJob calls; one of each goes first, unmeasured,
// to open the connections.
func (b *benchRun) batchSubmits(ctx context.Context, p *serverProc) (batchSubmitFigures, error) {
	c := b.newClient(p.base, 1)
	defer c.Close()
	n := b.o.batchJobs
	req := &jobwatchv1.SubmitJobsRequest{Jobs: make([]*jobwatchv1.SubmitJobRequest, n)}
	for i := range req.Jobs {
		req.Jobs[i] = &jobwatchv1.SubmitJobRequest{Kind: batchSubmitKind}
	}
	var batch, single []time.Duration
	for i := range b.o.batchCalls + 1 {
		t := time.Now()
		resp, err := c.JobService().SubmitJobs(ctx, req)
		if err != nil {
			return batchSubmitFigures{}, fmt.Errorf("SubmitJobs: %w", err)
		}
		d := time.Since(t)
		if got := len(resp.GetJobs()); got != n {
			return batchSubmitFigures{}, fmt.Errorf("SubmitJobs of %d jobs returned %d", n, got)
		}
		t = time.Now()
		if _, err := submitMany(ctx, c, n, batchSubmitKind); err != nil {
			return batchSubmitFigures{}, err
		}
		if i > 0 {
			batch, single = append(batch, d), append(single, time.Since(t))
		}
	}
	perS := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(n*len(ds)) / sum.Seconds()
	}
	f := batchSubmitFigures{BatchPerS: perS(batch), SinglePerS: perS(single)}
	slices.Sort(batch)
	slices.Sort(single)
	f.BatchP50MS, f.BatchP99MS = ms(quantile(batch, 0.5)), ms(quantile(batch, 0.99))
	f.SingleP50MS, f.SingleP99MS = ms(quantile(single, 0.5)), ms(quantile(single, 0.99))
	b.progress("  SubmitJobs of %d: p50 %.1f ms, %.0f jobs/s; %d SubmitJob: p50 %.1f ms, %.0f jobs/s",
		n, f.BatchP50MS, f.BatchPerS, n, f.SingleP50MS, f.SinglePerS)
	return f, nil
}

// batchMemory fills a database with --batch-waits × --batch-jobs queued
// jobs in a process of its own, then parks WaitJobs on them in a fresh
// process, and WaitJob in another: neither measured process has done the
// inserts, and each is read against its own baseline (RSS does not shrink
// back when calls end).
func (b *benchRun) batchMemory(ctx context.Context, srv benchServer) (many, one batchParkedFigures, err error) {
	total := b.o.batchWaits * b.o.batchJobs
	opts := serverOptions{db: "batches-parked", parked: total + 1000}
	ids, err := b.fillBatches(ctx, srv, opts, total)
	if err != nil {
		return many, one, fmt.Errorf("fill: %w", err)
	}
	if many, err = b.batchParked(ctx, srv, opts, ids, true); err != nil {
		return many, one, fmt.Errorf("WaitJobs: %w", err)
	}
	if one, err = b.batchParked(ctx, srv, opts, ids, false); err != nil {
		return many, one, fmt.Errorf("WaitJob: %w", err)
	}
	return many, one, nil
}

// fillBatches submits total queued jobs, --batch-jobs a SubmitJobs, to a
// process of srv on opts' database, and returns their ids in order.
func (b *benchRun) fillBatches(ctx context.Context, srv benchServer, opts serverOptions, total int) ([]string, error) {
	p, err := startServer(ctx, srv, b.dir, opts)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	c := b.newClient(p.base, 1)
	defer c.Close()
	ids := make([]string, 0, total)
	for len(ids) < total {
		req := &jobwatchv1.SubmitJobsRequest{}
		for range min(b.o.batchJobs, total-len(ids)) {
			req.Jobs = append(req.Jobs, &jobwatchv1.SubmitJobRequest{Kind: batchParkedKind})
		}
		resp, err := c.JobService().SubmitJobs(ctx, req)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("SubmitJobs: %w", err), p.alive())
		}
		for _, j := range resp.GetJobs() {
			ids = append(ids, j.GetId())
		}
	}
	return ids, nil
}

// batchParked starts a process of srv on opts' database, reads it, parks
// a call on every one of ids (--batch-jobs ids a WaitJobs with many, one
// id a WaitJob without), waits until the server counts them all, lets
// them settle and reads it again.
func (b *benchRun) batchParked(ctx context.Context, srv benchServer, opts serverOptions, ids []string, many bool) (batchParkedFigures, error) {
	p, err := startServer(ctx, srv, b.dir, opts)
	if err != nil {
		return batchParkedFigures{}, err
	}
	defer p.stop()
	clients, closeClients := b.clients(p.base)
	defer closeClients()
	f := batchParkedFigures{Jobs: len(ids)}
	if f.RSSBeforeKiB, f.HeapBeforeKiB, f.GoroutinesBefore, err = memoryOf(p); err != nil {
		return f, err
	}
	pc := newParkedCalls(ctx)
	defer pc.stop()
	for i := 0; i < len(ids); f.Calls++ {
		c := clients[f.Calls%len(clients)]
		if !many {
			pc.park(waitCall, c, ids[i], nil)
			i++
			continue
		}
		chunk := ids[i:min(i+b.o.batchJobs, len(ids))]
		pc.parkAll(c, chunk, nil)
		i += len(chunk)
	}
	if err := awaitParked(ctx, p, pc, waitCall, f.Calls); err != nil {
		return f, errors.Join(err, p.alive())
	}
	time.Sleep(b.o.settle)
	if f.RSSKiB, f.HeapKiB, f.Goroutines, err = memoryOf(p); err != nil {
		return f, err
	}
	if err := pc.failed(); err != nil {
		return f, err
	}
	jobs := float64(len(ids))
	f.RSSPerJobKiB = (f.RSSKiB - f.RSSBeforeKiB) / jobs
	f.HeapPerJobKiB = (f.HeapKiB - f.HeapBeforeKiB) / jobs
	f.GoroutinesPerJob = (f.Goroutines - f.GoroutinesBefore) / jobs
	name := "WaitJob"
	if many {
		name = "WaitJobs"
	}
	b.progress("  %d %s parked on %d jobs: per job %.2f KiB RSS, %.2f KiB heap, %.3f goroutines",
		f.Calls, name, len(ids), f.RSSPerJobKiB, f.HeapPerJobKiB, f.GoroutinesPerJob)
	return f, nil
}

// memoryOf reads p's RSS, heap in use (KiB) and goroutines.
func memoryOf(p *serverProc) (rssKiB, heapKiB, goroutines float64, err error) {
	if rssKiB, err = p.rssKiB(); err != nil {
		return 0, 0, 0, err
	}
	m, err := p.metrics()
	if err != nil {
		return 0, 0, 0, err
	}
	heap, ok1 := m["go_memstats_heap_inuse_bytes"]
	goroutines, ok2 := m["go_goroutines"]
	if !ok1 || !ok2 {
		return 0, 0, 0, errors.New("/metrics has no go_memstats_heap_inuse_bytes or go_goroutines")
	}
	return rssKiB, heap / 1024, goroutines, nil
}

// parkAll starts one WaitJobs (ALL) of ids, as park starts a WaitJob;
// answered, if not nil, gets the time it had every job ended.
func (pc *parkedCalls) parkAll(c *client.Client, ids []string, answered *time.Time) {
	pc.wg.Go(func() {
		t, err := waitAll(pc.ctx, c, ids)
		if err != nil && pc.ctx.Err() == nil {
			pc.mu.Lock()
			if pc.err == nil {
				pc.err = fmt.Errorf("WaitJobs of %d jobs: %w", len(ids), err)
			}
			pc.mu.Unlock()
			return
		}
		if answered != nil {
			*answered = t
		}
	})
}

// waitAll calls WaitJobs (ALL) on ids through c until every one has
// ended, as a caller's loop would: an answer at the cap is followed by a
// call for the jobs still unfinished. It returns when it had the last.
func waitAll(ctx context.Context, c *client.Client, ids []string) (time.Time, error) {
	for {
		resp, err := c.JobService().WaitJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: ids, Mode: jobwatchv1.WaitMode_WAIT_MODE_ALL})
		if err != nil {
			return time.Time{}, err
		}
		if len(resp.GetUnfinishedJobIds()) == 0 {
			return time.Now(), nil
		}
		ids = resp.GetUnfinishedJobIds()
	}
}

// batchWakes times --batch-wakes wake-ups of a WaitJobs of --batch-jobs
// jobs and as many of a WaitJob, turn about, on a fresh process of srv.
func (b *benchRun) batchWakes(ctx context.Context, srv benchServer) (batchWakeFigures, error) {
	var f batchWakeFigures
	p, err := startServer(ctx, srv, b.dir, serverOptions{db: "batches-wake", parked: 1000})
	if err != nil {
		return f, err
	}
	defer p.stop()
	ctl := b.newClient(p.base, 1)
	defer ctl.Close()
	// The waiters' own connection, which notes when each answer arrived.
	arrived := &arrivals{next: newH2CTransport()}
	probe := b.newClient(p.base, 1, client.WithLongCallHTTPClient(&http.Client{Transport: arrived}))
	defer probe.Close()

	var many, manyArrived, one, completes, answerMany, answerOne []time.Duration
	for i := range b.o.batchWakes {
		for _, isMany := range []bool{i%2 == 0, i%2 != 0} {
			var ids []string
			var arrival time.Duration // of the last run, the one measured
			wake, complete, redone, err := woken(ctx, p, func() (wake, complete time.Duration, err error) {
				if isMany {
					wake, arrival, complete, ids, err = wakeAll(ctx, p, ctl, probe, arrived, b.o.batchJobs)
					return wake, complete, err
				}
				return wakeOne(ctx, p, ctl, probe, waitCall, 0)
			})
			f.Redone += redone
			if err != nil {
				return f, errors.Join(err, p.alive())
			}
			if isMany {
				many, manyArrived = append(many, wake), append(manyArrived, arrival)
				m, o, err := answerAtOnce(ctx, probe, ids)
				if err != nil {
					return f, errors.Join(err, p.alive())
				}
				answerMany, answerOne = append(answerMany, m), append(answerOne, o)
			} else {
				one = append(one, wake)
			}
			completes = append(completes, complete)
		}
	}
	for _, ds := range [][]time.Duration{many, manyArrived, one, completes, answerMany, answerOne} {
		slices.Sort(ds)
	}
	f.AnswerWaitJobsP50MS, f.AnswerWaitJobP50MS = ms(quantile(answerMany, 0.5)), ms(quantile(answerOne, 0.5))
	f.WaitJobsP50MS, f.WaitJobsP99MS = ms(quantile(many, 0.5)), ms(quantile(many, 0.99))
	f.WaitJobsArrivedP50MS, f.WaitJobsArrivedP99MS = ms(quantile(manyArrived, 0.5)), ms(quantile(manyArrived, 0.99))
	f.WaitJobP50MS, f.WaitJobP99MS = ms(quantile(one, 0.5)), ms(quantile(one, 0.99))
	f.CompleteP50MS = ms(quantile(completes, 0.5))
	b.progress("  behind the reply, p50: WaitJobs of %d %.3f ms, WaitJob %.3f ms (%d measured again); answered at once: %.3f ms, %.3f ms",
		b.o.batchJobs, f.WaitJobsP50MS, f.WaitJobP50MS, f.Redone, f.AnswerWaitJobsP50MS, f.AnswerWaitJobP50MS)
	return f, nil
}

// wakeTries bounds the attempts at one wake-up whose call keeps finding
// its job ended before it parks.
const wakeTries = 10

// woken runs measure until the server counts a wake-up of a parked wait
// during it, so that every figure is a parked call woken, never a call
// that read its job ended on its way in; redone is how many runs were not.
func woken(ctx context.Context, p *serverProc, measure func() (wake, complete time.Duration, err error)) (wake, complete time.Duration, redone int, err error) {
	for range wakeTries {
		before, err := p.waitWakeUps(ctx)
		if err != nil {
			return 0, 0, redone, err
		}
		w, c, err := measure()
		if err != nil {
			return 0, 0, redone, err
		}
		after, err := p.waitWakeUps(ctx)
		if err != nil {
			return 0, 0, redone, err
		}
		if after > before {
			return w, c, redone, nil
		}
		redone++
	}
	return 0, 0, redone, fmt.Errorf("in %d tries the wait never parked before its job ended", wakeTries)
}

// wakeUpsSample is the count of wake-ups of parked waits (WaitJob and
// WaitJobs alike) in /metrics.
const wakeUpsSample = `jobwatch_wake_latency_seconds_count{kind="wait"}`

// waitWakeUps reads wakeUpsSample: 0 before the first wake-up, when the
// histogram has no such series yet.
func (p *serverProc) waitWakeUps(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), wakeUpsSample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, sc.Err()
}

// wakeAll submits n jobs in one SubmitJobs, claims one of them, cancels
// the others, parks a WaitJobs (ALL) of the n through probe, completes
// the claimed job and returns how long after the CompleteJob reply the
// WaitJobs had every job ended (its answer decoded) and had that
// answer's last byte (arrival, through arrived, which probe's long calls
// go through), the CompleteJob round trip and the jobs' ids: what
// wakeOne measures for a WaitJob, for the last job of a batch.
func wakeAll(ctx context.Context, p *serverProc, ctl, probe *client.Client, arrived *arrivals, n int) (wake, arrival, complete time.Duration, ids []string, err error) {
	req := &jobwatchv1.SubmitJobsRequest{Jobs: make([]*jobwatchv1.SubmitJobRequest, n)}
	for i := range req.Jobs {
		req.Jobs[i] = &jobwatchv1.SubmitJobRequest{Kind: batchWakeKind}
	}
	resp, err := ctl.JobService().SubmitJobs(ctx, req)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("SubmitJobs: %w", err)
	}
	ids = make([]string, 0, n)
	for _, j := range resp.GetJobs() {
		ids = append(ids, j.GetId())
	}
	claim, err := ctl.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{batchWakeKind}})
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("claim: %w", err)
	}
	if !slices.Contains(ids, claim.GetJob().GetId()) {
		return 0, 0, 0, nil, fmt.Errorf("claimed %q, not a job of the batch", claim.GetJob().GetId())
	}
	// Every other job of the kind is this batch's: the earlier ones have
	// all ended.
	cancelled, err := ctl.CancelJobs(ctx, &jobwatchv1.JobFilter{Kinds: []string{batchWakeKind},
		States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_QUEUED}}, nil)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("cancel the others: %w", err)
	}
	if cancelled.Changed != int64(n-1) {
		return 0, 0, 0, nil, fmt.Errorf("cancelled %d jobs of the batch, want %d", cancelled.Changed, n-1)
	}

	parked, err := p.metric(waitCall.metric)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var answered time.Time
	var callErr error
	done := make(chan struct{})
	arrived.take(jobwatchv1connect.JobServiceWaitJobsProcedure) // an earlier call's
	go func() {
		defer close(done)
		answered, callErr = waitAll(callCtx, probe, ids)
	}()
	if err := p.awaitMetric(callCtx, waitCall.metric, parked+1); err != nil {
		return 0, 0, 0, nil, err
	}
	time.Sleep(batchParkSettle)
	sent := time.Now()
	if _, err := ctl.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: claim.GetJob().GetId(), LeaseId: claim.GetLeaseId()}); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("complete: %w", err)
	}
	replied := time.Now()
	<-done
	if callErr != nil {
		return 0, 0, 0, nil, fmt.Errorf("WaitJobs: %w", callErr)
	}
	at := arrived.take(jobwatchv1connect.JobServiceWaitJobsProcedure)
	if at.IsZero() {
		return 0, 0, 0, nil, errors.New("WaitJobs: its answer was decoded without its body read to the end")
	}
	return answered.Sub(replied), at.Sub(replied), replied.Sub(sent), ids, nil
}

// arrivals is a RoundTripper that notes, for each procedure, when the
// body of its last answer had wholly arrived: a unary answer's last byte,
// before the client decodes it.
type arrivals struct {
	next http.RoundTripper
	mu   sync.Mutex
	at   map[string]time.Time
}

func (a *arrivals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err == nil {
		resp.Body = &arrivingBody{ReadCloser: resp.Body, a: a, procedure: req.URL.Path}
	}
	return resp, err
}

// take returns when the last answer of procedure arrived (zero if none
// did since the last take) and forgets it.
func (a *arrivals) take(procedure string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.at[procedure]
	delete(a.at, procedure)
	return at
}

type arrivingBody struct {
	io.ReadCloser
	a         *arrivals
	procedure string
}

func (b *arrivingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		now := time.Now()
		b.a.mu.Lock()
		if b.a.at == nil {
			b.a.at = map[string]time.Time{}
		}
		b.a.at[b.procedure] = now
		b.a.mu.Unlock()
	}
	return n, err
}

// newH2CTransport is a transport of one connection that speaks HTTP/2
// with prior knowledge and takes frames of up to 1 MiB, as the client's
// own does for http:// URLs.
func newH2CTransport() *http.Transport {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &protocols, MaxConnsPerHost: 1, HTTP2: &http.HTTP2Config{MaxReadFrameSize: 1 << 20}}
}

// answerAtOnce times, through probe, a WaitJobs (ALL) of ids and a
// WaitJob of the first, every one of which has ended, so both answer
// without a wait.
func answerAtOnce(ctx context.Context, probe *client.Client, ids []string) (many, one time.Duration, err error) {
	t := time.Now()
	if _, err := waitAll(ctx, probe, ids); err != nil {
		return 0, 0, fmt.Errorf("WaitJobs of ended jobs: %w", err)
	}
	many = time.Since(t)
	t = time.Now()
	resp, err := probe.JobService().WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: ids[0]})
	if err != nil {
		return 0, 0, fmt.Errorf("WaitJob of an ended job: %w", err)
	}
	if !client.Terminal(resp.GetJob().GetState()) {
		return 0, 0, fmt.Errorf("WaitJob of %s answered %v, want it ended", ids[0], resp.GetJob().GetState())
	}
	return many, time.Since(t), nil
}

// batchRow is one figure of the batches table.
type batchRow struct {
	label string
	value float64
}

// rows are the batches table's rows: the submit figures (and on
// PostgreSQL), each kind of parked call's cost per job waited for and
// their ratio, and the wake-ups.
func (f *batchesFigures) rows() []batchRow {
	var rows []batchRow
	submit := func(where string, s batchSubmitFigures) {
		rows = append(rows,
			batchRow{fmt.Sprintf("SubmitJobs of %d jobs, %s: p50, ms", f.Jobs, where), s.BatchP50MS},
			batchRow{fmt.Sprintf("SubmitJobs of %d jobs, %s: p99, ms", f.Jobs, where), s.BatchP99MS},
			batchRow{fmt.Sprintf("SubmitJobs of %d jobs, %s: jobs/s", f.Jobs, where), s.BatchPerS},
			batchRow{fmt.Sprintf("%d SubmitJob from 8 goroutines, %s: p50, ms", f.Jobs, where), s.SingleP50MS},
			batchRow{fmt.Sprintf("%d SubmitJob from 8 goroutines, %s: p99, ms", f.Jobs, where), s.SingleP99MS},
			batchRow{fmt.Sprintf("%d SubmitJob from 8 goroutines, %s: jobs/s", f.Jobs, where), s.SinglePerS},
		)
	}
	submit("SQLite", f.Submit)
	if f.SubmitPostgres != nil {
		submit("PostgreSQL", *f.SubmitPostgres)
	}
	for _, x := range []struct {
		name string
		p    batchParkedFigures
	}{
		{fmt.Sprintf("%d WaitJobs of %d jobs", f.WaitJobsParked.Calls, f.Jobs), f.WaitJobsParked},
		{fmt.Sprintf("%d WaitJob", f.WaitJobParked.Calls), f.WaitJobParked},
	} {
		rows = append(rows,
			batchRow{x.name + " parked: server RSS, MiB, before", x.p.RSSBeforeKiB / 1024},
			batchRow{x.name + " parked: server RSS, MiB", x.p.RSSKiB / 1024},
			batchRow{x.name + " parked: RSS per job, KiB", x.p.RSSPerJobKiB},
			batchRow{x.name + " parked: heap in use per job, KiB", x.p.HeapPerJobKiB},
			batchRow{x.name + " parked: goroutines per job", x.p.GoroutinesPerJob},
		)
	}
	if one := f.WaitJobParked.RSSPerJobKiB; one > 0 {
		rows = append(rows, batchRow{"RSS per job: WaitJobs over WaitJob", f.WaitJobsParked.RSSPerJobKiB / one})
	}
	if one := f.WaitJobParked.HeapPerJobKiB; one > 0 {
		rows = append(rows, batchRow{"heap in use per job: WaitJobs over WaitJob", f.WaitJobsParked.HeapPerJobKiB / one})
	}
	rows = append(rows,
		batchRow{fmt.Sprintf("WaitJobs (ALL) of %d, the last completed: p50, ms behind the reply", f.Jobs), f.Wake.WaitJobsP50MS},
		batchRow{fmt.Sprintf("WaitJobs (ALL) of %d, the last completed: p99, ms behind the reply", f.Jobs), f.Wake.WaitJobsP99MS},
		batchRow{fmt.Sprintf("WaitJobs (ALL) of %d: answer arrived, before decoding: p50, ms behind the reply", f.Jobs), f.Wake.WaitJobsArrivedP50MS},
		batchRow{fmt.Sprintf("WaitJobs (ALL) of %d: answer arrived, before decoding: p99, ms behind the reply", f.Jobs), f.Wake.WaitJobsArrivedP99MS},
		batchRow{"WaitJob of one job: p50, ms behind the reply", f.Wake.WaitJobP50MS},
		batchRow{"WaitJob of one job: p99, ms behind the reply", f.Wake.WaitJobP99MS},
		batchRow{"CompleteJob reply p50, ms", f.Wake.CompleteP50MS},
		batchRow{fmt.Sprintf("WaitJobs of %d jobs all ended (answers at once): p50, ms", f.Jobs), f.Wake.AnswerWaitJobsP50MS},
		batchRow{"WaitJob of a job ended (answers at once): p50, ms", f.Wake.AnswerWaitJobP50MS},
	)
	return rows
}

// writeTable prints the batches figures as the bench's table does (a
// column for jobwatch alone), each label prefixed "batches: ".
func (f *batchesFigures) writeTable(w io.Writer) error {
	rows := f.rows()
	width := len("figure")
	for _, r := range rows {
		width = max(width, utf8.RuneCountInString("batches: "+r.label))
	}
	cells := make([]string, len(rows))
	cellWidth := len("jobwatch")
	for i, r := range rows {
		cells[i] = formatFigure(r.value)
		cellWidth = max(cellWidth, len(cells[i]))
	}
	var sb strings.Builder
	line := func(label, cell string) {
		sb.WriteString(label + strings.Repeat(" ", width-utf8.RuneCountInString(label)))
		sb.WriteString("  " + strings.Repeat(" ", cellWidth-len(cell)) + cell + "\n")
	}
	line("figure", "jobwatch")
	for i, r := range rows {
		line("batches: "+r.label, cells[i])
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// benchOutput is what --json prints: the bench's figures, and the
// batches scenario's beside them when it ran.
type benchOutput struct {
	*benchResult
	Batches *batchesFigures `json:"batches,omitempty"`
}
