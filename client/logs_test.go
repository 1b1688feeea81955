package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

// logWorker runs a worker with cfg over the remote backend of a fresh
// server (wrapped by wrap, if set) and returns the server and a client.
func logWorker(t *testing.T, cfg client.WorkerConfig, wrap func(client.WorkerBackend) client.WorkerBackend,
	setup func(w *client.Worker)) (*testServer, *client.Client) {
	t.Helper()
	s := startServer(t, serverOptions{engine: jobs.Config{LeaseTimeout: time.Minute}})
	c := fastClient(t, s.URL)
	var b client.WorkerBackend = c.WorkerBackend()
	if inprocLogs {
		b = inproc.WorkerBackend(s.Engine, time.Second)
	}
	if wrap != nil {
		b = wrap(b)
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 50 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	w := client.NewWorker(b, cfg)
	setup(w)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop")
		}
	})
	return s, c
}

// allLogs pages through the job's whole log.
func allLogs(t *testing.T, c *client.Client, id string) []*jobwatchv1.LogLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lines []*jobwatchv1.LogLine
	var after int64
	for {
		page, err := c.Logs(ctx, id, after, 0)
		if err != nil {
			t.Fatalf("logs of %s: %v", id, err)
		}
		lines = append(lines, page.GetLines()...)
		if n := len(page.GetLines()); n > 0 {
			after = page.GetLines()[n-1].GetSeq()
		}
		if !page.GetMore() {
			return lines
		}
	}
}

func texts(lines []*jobwatchv1.LogLine) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.GetText()
	}
	return out
}

// inprocLogs makes logWorker's worker run in process (jobs/inproc)
// instead of over RPC.
var inprocLogs bool

// Everything a handler logs, through Logf and through its writers, is in
// the job's log, in order and tagged with its stream, by the time the job
// has ended: the worker sends it before the outcome, the last line of a
// writer without its newline included.
func TestWorkerLogsEveryLineBeforeTheOutcome(t *testing.T) {
	t.Run("remote", testWorkerLogsEveryLineBeforeTheOutcome)
	t.Run("in process", func(t *testing.T) {
		inprocLogs = true
		defer func() { inprocLogs = false }()
		testWorkerLogsEveryLineBeforeTheOutcome(t)
	})
}

func testWorkerLogsEveryLineBeforeTheOutcome(t *testing.T) {
	_, c := logWorker(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("chatty", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p.Logf("starting %s", j.GetId())
			p.Logf("two\nlines\n")
			fmt.Fprint(p.Log(), "written ")
			fmt.Fprintln(p.Log(), "in parts")
			fmt.Fprint(p.LogTo(jobwatchv1.LogStream_LOG_STREAM_STDERR), "an error line\r\nno newline at the end")
			p(50, "half")
			return "done", nil
		})
	})
	job := submit(t, c, "chatty")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if j, err := c.WaitForJob(ctx, job.GetId()); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("wait: %v, %v; want SUCCEEDED", j.GetState(), err)
	}
	lines := allLogs(t, c, job.GetId())
	want := []string{"starting " + job.GetId(), "two", "lines", "written in parts", "an error line", "no newline at the end"}
	if got := texts(lines); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the log is %q, want %q", got, want)
	}
	for i, l := range lines {
		wantStream := jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED
		if i >= 4 {
			wantStream = jobwatchv1.LogStream_LOG_STREAM_STDERR
		}
		if l.GetSeq() != int64(i+1) || l.GetStream() != wantStream || l.GetAttempt() != 1 || l.GetTime() == nil {
			t.Errorf("line %d: seq %d stream %v attempt %d time %v; want seq %d stream %v attempt 1 and a time",
				i, l.GetSeq(), l.GetStream(), l.GetAttempt(), l.GetTime(), i+1, wantStream)
		}
	}
}

// A line reaches a watcher while the handler still runs: the worker sends
// lines on its own within LogFlushInterval, not only at the end.
func TestWorkerSendsLogLinesWhileTheHandlerRuns(t *testing.T) {
	release := make(chan struct{})
	_, c := logWorker(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("slow", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p.Logf("working")
			<-release
			p.Logf("finished")
			return nil, nil
		})
	})
	job := submit(t, c, "slow")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for msg, err := range c.WatchLogs(ctx, job.GetId(), 0) {
		if err != nil {
			t.Fatalf("watch logs: %v (after %q)", err, got)
		}
		got = append(got, texts(msg.GetLines())...)
		if len(got) == 1 {
			close(release) // the first line came while the handler waited
		}
	}
	if strings.Join(got, "|") != "working|finished" {
		t.Fatalf("the watcher saw %q, want working and finished, then the end", got)
	}
}

// countingBackend counts the AppendLogs calls of the remote backend it
// wraps and the most lines and bytes one carried; block, if not nil,
// holds the first call until it closes.
type countingBackend struct {
	client.WorkerBackend
	calls, maxLines, maxBytes atomic.Int64
	block                     chan struct{}
	blocked                   chan struct{} // closed when the first call is held
	once                      sync.Once
}

func (b *countingBackend) AppendLogs(ctx context.Context, l *client.Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	if b.block != nil && b.calls.Load() == 0 {
		b.once.Do(func() { close(b.blocked) })
		<-b.block
	}
	b.calls.Add(1)
	size := 0
	for _, l := range lines {
		size += len(l.GetText())
	}
	for _, m := range []struct {
		v *atomic.Int64
		n int64
	}{{&b.maxLines, int64(len(lines))}, {&b.maxBytes, int64(size)}} {
		for cur := m.v.Load(); m.n > cur && !m.v.CompareAndSwap(cur, m.n); cur = m.v.Load() {
		}
	}
	return b.WorkerBackend.(client.LogAppender).AppendLogs(ctx, l, lines)
}

// lostAppendBackend loses the answer to the first AppendLogs call, after
// the server took its lines, as a server restarted between its commit
// and its answer would.
type lostAppendBackend struct {
	client.WorkerBackend
	lost atomic.Bool
}

func (b *lostAppendBackend) AppendLogs(ctx context.Context, l *client.Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	cancelled, err := b.WorkerBackend.(client.LogAppender).AppendLogs(ctx, l, lines)
	if err == nil && b.lost.CompareAndSwap(false, true) {
		return false, connect.NewError(connect.CodeUnavailable, errors.New("connection reset by peer"))
	}
	return cancelled, err
}

// Lines whose append got no answer are sent again as they were, alone,
// and the server, which had taken them, keeps them once: the log holds
// every line once, in order, a line logged meanwhile included. They used
// to be kept twice.
func TestLogLinesSentAgainAfterALostAnswerAreKeptOnce(t *testing.T) {
	for _, inproc := range []bool{false, true} {
		t.Run(map[bool]string{false: "remote", true: "inproc"}[inproc], func(t *testing.T) {
			inprocLogs = inproc
			t.Cleanup(func() { inprocLogs = false })
			lossy := &lostAppendBackend{}
			_, c := logWorker(t, client.WorkerConfig{Backoff: client.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}},
				func(b client.WorkerBackend) client.WorkerBackend {
					lossy.WorkerBackend = b
					return lossy
				}, func(w *client.Worker) {
					w.Handle("talk", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
						p.Logf("one")
						p.Logf("two")
						for !lossy.lost.Load() {
							select {
							case <-ctx.Done():
								return nil, ctx.Err()
							case <-time.After(5 * time.Millisecond):
							}
						}
						p.Logf("three") // while one and two wait to be sent again
						return nil, nil
					})
				})
			job := submit(t, c, "talk")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if j, err := c.WaitForJob(ctx, job.GetId()); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("the job = %v, %v; want SUCCEEDED", j.GetState(), err)
			}
			if got := strings.Join(texts(allLogs(t, c, job.GetId())), "|"); got != "one|two|three" {
				t.Fatalf("the log holds %q, want one|two|three", got)
			}
		})
	}
}

// awayBackend refuses every AppendLogs, as a server away would, until
// back is closed; its claims' leases say they last ttl.
type awayBackend struct {
	client.WorkerBackend
	ttl     time.Duration
	back    chan struct{}
	refused atomic.Int64
}

func (b *awayBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	l, err := b.WorkerBackend.Claim(ctx, workerID, kinds, queues)
	if l != nil {
		l.TTL = b.ttl
	}
	return l, err
}

func (b *awayBackend) AppendLogs(ctx context.Context, l *client.Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	select {
	case <-b.back:
		return b.WorkerBackend.(client.LogAppender).AppendLogs(ctx, l, lines)
	default:
		b.refused.Add(1)
		return false, connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	}
}

// Lines a handler logged just before it returned, while the server was
// away, go once it is back, as long as the lease has room left for the
// outcome: here a lease of 6 s, and a server back 2.4 s after the
// handler returned, past the third of the lease that the lines were
// given before (an outside probe saw a job's last lines lost to a
// restart of 3 s under a lease of 6 s, its outcome reported).
func TestLogLinesHeldThroughAnOutageGoBeforeTheOutcome(t *testing.T) {
	away := &awayBackend{ttl: 6 * time.Second, back: make(chan struct{})}
	returned := make(chan struct{})
	_, c := logWorker(t, client.WorkerConfig{Backoff: client.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}},
		func(b client.WorkerBackend) client.WorkerBackend {
			away.WorkerBackend = b
			return away
		}, func(w *client.Worker) {
			w.Handle("talk", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
				p.Logf("one")
				p.Logf("two")
				close(returned)
				return "done", nil
			})
		})
	job := submit(t, c, "talk")
	<-returned
	time.Sleep(2400 * time.Millisecond) // the outage: the condition under test, not a wait for something
	if away.refused.Load() == 0 {
		t.Fatal("no append was refused during the outage")
	}
	close(away.back)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if j, err := c.WaitForJob(ctx, job.GetId()); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the job = %v, %v; want SUCCEEDED", j.GetState(), err)
	}
	if got := strings.Join(texts(allLogs(t, c, job.GetId())), "|"); got != "one|two" {
		t.Fatalf("the log holds %q, want one|two: the lines held through the outage", got)
	}
}

// A chatty handler costs few calls: 20,000 lines logged at once go in
// calls of at most 1,000 lines and 64 KiB, none lost.
func TestWorkerBatchesLogLines(t *testing.T) {
	counter := &countingBackend{}
	const n = 20000
	_, c := logWorker(t, client.WorkerConfig{LogBufferBytes: 64 << 20}, func(b client.WorkerBackend) client.WorkerBackend {
		counter.WorkerBackend = b
		return counter
	}, func(w *client.Worker) {
		w.Handle("chatty", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			for i := range n {
				p.Logf("line %05d %s", i, strings.Repeat("x", 40))
			}
			return nil, nil
		})
	})
	job := submit(t, c, "chatty")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitForJob(ctx, job.GetId()); err != nil {
		t.Fatal(err)
	}
	lines := allLogs(t, c, job.GetId())
	// The queue keeps 1 MiB of the job's log: the newest lines, in order.
	if len(lines) == 0 || lines[len(lines)-1].GetText() != fmt.Sprintf("line %05d %s", n-1, strings.Repeat("x", 40)) {
		t.Fatalf("the log ends with %q, want the last line logged", texts(lines[max(len(lines)-1, 0):]))
	}
	for i := 1; i < len(lines); i++ {
		if lines[i].GetSeq() != lines[i-1].GetSeq()+1 {
			t.Fatalf("the log skips from seq %d to %d", lines[i-1].GetSeq(), lines[i].GetSeq())
		}
	}
	if last := lines[len(lines)-1].GetSeq(); last != n {
		t.Errorf("the last line's seq is %d, want %d: every line was appended", last, n)
	}
	calls, maxLines, maxBytes := counter.calls.Load(), counter.maxLines.Load(), counter.maxBytes.Load()
	t.Logf("%d lines in %d calls, at most %d lines and %d bytes a call", n, calls, maxLines, maxBytes)
	if calls > 100 || maxLines > jobtype.MaxLogLinesPerAppend || maxBytes > client.LogFlushBytes {
		t.Errorf("%d calls, at most %d lines and %d bytes a call; want at most 100 calls of %d lines and %d bytes",
			calls, maxLines, maxBytes, jobtype.MaxLogLinesPerAppend, client.LogFlushBytes)
	}
}

// When the server takes lines slower than the handler logs them, the
// worker holds at most LogBufferBytes: the oldest lines not yet on their
// way are dropped, and a line says how many, where they were.
func TestWorkerDropsTheOldestLogLinesWhenTheServerIsSlow(t *testing.T) {
	counter := &countingBackend{block: make(chan struct{}), blocked: make(chan struct{})}
	const n = 3000 // 3,000 lines of 200 bytes: 600 KiB, over the 256 KiB held
	_, c := logWorker(t, client.WorkerConfig{LogBufferBytes: 256 << 10}, func(b client.WorkerBackend) client.WorkerBackend {
		counter.WorkerBackend = b
		return counter
	}, func(w *client.Worker) {
		w.Handle("flood", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p.Logf("first")
			<-counter.blocked // the first call is on its way, and held
			for i := range n {
				p.Logf("%05d %s", i, strings.Repeat("y", 194))
			}
			close(counter.block)
			return nil, nil
		})
	})
	job := submit(t, c, "flood")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitForJob(ctx, job.GetId()); err != nil {
		t.Fatal(err)
	}
	got := texts(allLogs(t, c, job.GetId()))
	if len(got) < 3 || got[0] != "first" {
		t.Fatalf("the log starts %q, want the line that was on its way first", got[:min(len(got), 3)])
	}
	m := regexp.MustCompile(`^(\d+) lines dropped by the worker$`).FindStringSubmatch(got[1])
	if m == nil {
		t.Fatalf("the second line is %q, want the marker of the dropped lines", got[1])
	}
	dropped, _ := strconv.Atoi(m[1])
	kept := got[2:]
	if dropped+len(kept) != n || kept[0] != fmt.Sprintf("%05d %s", dropped, strings.Repeat("y", 194)) ||
		kept[len(kept)-1] != fmt.Sprintf("%05d %s", n-1, strings.Repeat("y", 194)) {
		t.Fatalf("%d dropped and %d kept (from %.5s to %.5s); want the newest %d of %d", dropped, len(kept),
			kept[0], kept[len(kept)-1], n-dropped, n)
	}
	if held := len(kept) * 210; held > 256<<10 {
		t.Errorf("the worker held %d bytes of lines, over its 256 KiB", held)
	}
}

// An append the server answers with "cancelled" stops the handler as a
// heartbeat's answer does, even when no heartbeat is due.
func TestWorkerStopsTheHandlerWhenAnAppendSaysTheJobWasCancelled(t *testing.T) {
	causes := make(chan error, 1)
	logged := make(chan struct{})
	_, c := logWorker(t, client.WorkerConfig{HeartbeatInterval: time.Hour}, nil, func(w *client.Worker) {
		w.Handle("ticker", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p.Logf("tick")
			close(logged)
			for ctx.Err() == nil {
				p.Logf("tick")
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	})
	job := submit(t, c, "ticker")
	<-logged
	if _, err := c.Cancel(context.Background(), job.GetId()); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, client.ErrJobCancelled) {
			t.Fatalf("the handler's ctx ended with %v, want ErrJobCancelled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not stopped")
	}
}

// WatchLogs follows a job's log across the server's stream lifetime and
// dropped connections, yielding every line once and in order, and ends
// when the job has ended and its last line was yielded.
func TestWatchLogsResumesWithoutDuplicateOrGap(t *testing.T) {
	s := startServer(t, serverOptions{server: server.Config{StreamLifetime: 100 * time.Millisecond}})
	p := startProxy(t, s.Addr)
	c := fastClient(t, p.URL())
	job := submit(t, c, "lines")
	id, lease := claim(t, s.Engine, "lines")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make(chan *jobwatchv1.LogLine)
	watchErr := make(chan error, 1)
	go func() {
		defer close(seen)
		for msg, err := range c.WatchLogs(ctx, job.GetId(), 0) {
			if err != nil {
				watchErr <- err
				return
			}
			if msg.GetGap() != nil {
				watchErr <- fmt.Errorf("a gap %v where no line was dropped", msg.GetGap())
				return
			}
			for _, l := range msg.GetLines() {
				seen <- l
			}
		}
	}()
	// Lockstep, as TestWatchResumesWithoutDuplicateOrGap: each line waits
	// for the one before, so a repeat or a gap is the resume's fault.
	for i := 1; i <= 30; i++ {
		if i%7 == 0 {
			p.Drop()
		}
		if i%10 == 0 {
			time.Sleep(120 * time.Millisecond) // outlive the stream's lifetime
		}
		if _, _, err := s.Engine.AppendLogs(ctx, id, lease, []jobtype.LogLine{{Text: fmt.Sprint("line ", i)}}); err != nil {
			t.Fatal(err)
		}
		select {
		case l, ok := <-seen:
			if !ok {
				t.Fatalf("the watch ended after line %d: %v", i-1, <-watchErr)
			}
			if l.GetSeq() != int64(i) || l.GetText() != fmt.Sprint("line ", i) {
				t.Fatalf("after appending line %d the watcher saw %d %q", i, l.GetSeq(), l.GetText())
			}
		case <-ctx.Done():
			t.Fatalf("line %d did not arrive", i)
		}
	}
	complete(t, s.Engine, id, lease, "null")
	select {
	case l, ok := <-seen:
		if ok {
			t.Fatalf("after the job ended the watcher saw %d %q, want the end", l.GetSeq(), l.GetText())
		}
		select {
		case err := <-watchErr:
			t.Fatalf("the watch ended with %v, want no error", err)
		default:
		}
	case <-ctx.Done():
		t.Fatal("the watch did not end with the job")
	}
}

// A reader that resumes after a seq past the end of the server's log (it
// read the log from a database since restored from an older copy) gets
// the server's lines from the oldest kept, and then each new one: none
// is skipped as seen, though their seqs go back.
func TestWatchLogsAfterASeqPastTheServersLogYieldsItsLines(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	job := submit(t, c, "lines")
	id, lease := claim(t, s.Engine, "lines")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := s.Engine.AppendLogs(ctx, id, lease, []jobtype.LogLine{{Text: "one"}, {Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for msg, err := range c.WatchLogs(ctx, job.GetId(), 50) {
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range msg.GetLines() {
			got = append(got, fmt.Sprint(l.GetSeq(), " ", l.GetText()))
		}
		if len(got) == 2 {
			if _, _, err := s.Engine.AppendLogs(ctx, id, lease, []jobtype.LogLine{{Text: "three"}}); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == 3 {
			complete(t, s.Engine, id, lease, "null")
		}
	}
	if want := []string{"1 one", "2 two", "3 three"}; !slices.Equal(got, want) {
		t.Fatalf("a watch after seq 50 of a log of 2 lines yielded %q, want %q", got, want)
	}
}

// Lines dropped by the queue's bound reach a watcher as a gap; an unknown
// job is ErrJobNotFound for both Logs and WatchLogs.
func TestLogsReportGapsAndUnknownJobs(t *testing.T) {
	s := startServer(t, serverOptions{})
	if err := s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		jobtype.DefaultQueue: {MaxLogBytes: jobtype.MinMaxLogBytes},
	}}); err != nil {
		t.Fatal(err)
	}
	c := fastClient(t, s.URL)
	job := submit(t, c, "big")
	id, lease := claim(t, s.Engine, "big")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 { // 200 KiB, over the 64 KiB kept
		if _, _, err := s.Engine.AppendLogs(ctx, id, lease, []jobtype.LogLine{{Text: fmt.Sprintf("%03d %s", i, strings.Repeat("z", 1020))}}); err != nil {
			t.Fatal(err)
		}
	}
	complete(t, s.Engine, id, lease, "null")

	var gap *jobwatchv1.LogGap
	var got []*jobwatchv1.LogLine
	for msg, err := range c.WatchLogs(ctx, job.GetId(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		if msg.GetGap() != nil {
			gap = msg.GetGap()
		}
		got = append(got, msg.GetLines()...)
	}
	if gap == nil || len(got) == 0 || gap.GetResumeFrom() != got[0].GetSeq() || gap.GetSkipped() != got[0].GetSeq()-1 ||
		got[len(got)-1].GetSeq() != 200 {
		t.Fatalf("gap %v, then lines %d..%d; want a gap up to the first line kept, then every line to 200", gap,
			got[0].GetSeq(), got[len(got)-1].GetSeq())
	}

	// ErrJobNotFound, with the server's not_found behind it, as Get's.
	if _, err := c.Logs(ctx, "j_nosuchjob", 0, 0); !errors.Is(err, client.ErrJobNotFound) || connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Logs of an unknown job: %v (%v), want ErrJobNotFound", err, connect.CodeOf(err))
	}
	for _, err := range c.WatchLogs(ctx, "j_nosuchjob", 0) {
		if !errors.Is(err, client.ErrJobNotFound) || connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("WatchLogs of an unknown job: %v (%v), want ErrJobNotFound", err, connect.CodeOf(err))
		}
	}
}

var _ io.Writer = client.Progress(nil).Log()
