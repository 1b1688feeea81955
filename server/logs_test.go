package server_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

func appendLines(t *testing.T, c clients, lease *jobwatchv1.ClaimJobResponse, texts ...string) *jobwatchv1.AppendJobLogsResponse {
	t.Helper()
	req := &jobwatchv1.AppendJobLogsRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId()}
	for i, text := range texts {
		req.Lines = append(req.Lines, &jobwatchv1.AppendLogLine{Text: text, Stream: jobwatchv1.LogStream(i % 3)})
	}
	resp, err := c.workers.AppendJobLogs(ctxTimeout(t, callBound), req)
	if err != nil {
		t.Fatalf("append job logs: %v", err)
	}
	return resp
}

// A worker's lines reach a watcher that was there before them and one
// that comes after, in every protocol, and the watch ends OK once the
// job has ended and its last line is sent.
func TestJobLogsReachWatchersAndEndWithTheJob(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, p := range authProtocols {
		t.Run(p.name, func(t *testing.T) {
			c := ts.clients(p.hc(ts), p.opts...)
			kind := "logs-" + strings.ReplaceAll(p.name, " ", "-")
			submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind})
			lease := claim(t, c, kind)
			id := lease.GetJob().GetId()

			early, err := c.jobs.WatchJobLogs(ctxTimeout(t, 30*time.Second), &jobwatchv1.WatchJobLogsRequest{JobId: id})
			if err != nil {
				t.Fatal(err)
			}
			if resp := appendLines(t, c, lease, "one", "two"); resp.GetLastSeq() != 2 || resp.GetCancelled() {
				t.Fatalf("append: last seq %d cancelled %v; want 2, false", resp.GetLastSeq(), resp.GetCancelled())
			}
			var got []string
			for len(got) < 2 && early.Receive() {
				for _, l := range early.Msg().GetLines() {
					got = append(got, fmt.Sprintf("%d:%s", l.GetSeq(), l.GetText()))
				}
			}
			if strings.Join(got, " ") != "1:one 2:two" {
				t.Fatalf("the early watcher got %v (%v); want 1:one 2:two", got, early.Err())
			}
			appendLines(t, c, lease, "three")
			complete(t, c, lease, nil)
			var ended []bool // job_ended of each message after the first two lines
			for early.Receive() {
				ended = append(ended, early.Msg().GetJobEnded())
				for _, l := range early.Msg().GetLines() {
					got = append(got, fmt.Sprintf("%d:%s", l.GetSeq(), l.GetText()))
				}
			}
			if err := early.Err(); err != nil || strings.Join(got, " ") != "1:one 2:two 3:three" {
				t.Fatalf("the early watcher ended with %v after %v; want OK after all three", err, got)
			}
			if len(ended) < 2 || !ended[len(ended)-1] || slices.Contains(ended[:len(ended)-1], true) {
				t.Errorf("job_ended of the messages after line 2: %v; want it on the last message alone", ended)
			}

			late, err := c.jobs.WatchJobLogs(ctxTimeout(t, 30*time.Second), &jobwatchv1.WatchJobLogsRequest{JobId: id, AfterSeq: 1})
			if err != nil {
				t.Fatal(err)
			}
			got, lateEnded := nil, false
			for late.Receive() {
				lateEnded = late.Msg().GetJobEnded()
				for _, l := range late.Msg().GetLines() {
					got = append(got, l.GetText())
				}
			}
			if err := late.Err(); err != nil || strings.Join(got, " ") != "two three" || !lateEnded {
				t.Fatalf("a watcher after the end from seq 1: %v, %v, job_ended last %v; want two three, OK, true", got, err, lateEnded)
			}

			page, err := c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id, Limit: 2})
			if err != nil || len(page.GetLines()) != 2 || !page.GetMore() || !page.GetJobEnded() {
				t.Fatalf("a page of 2: %v, %v; want 2 lines, more, job ended", page, err)
			}
			if l := page.GetLines()[1]; l.GetStream() != jobwatchv1.LogStream_LOG_STREAM_STDOUT || l.GetAttempt() != 1 || l.GetTime() == nil {
				t.Errorf("line 2: stream %v attempt %d time %v; want STDOUT, 1, a time", l.GetStream(), l.GetAttempt(), l.GetTime())
			}
		})
	}
}

// Bad input to the log calls gets a clear error and changes nothing.
func TestJobLogsRefuseBadInput(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bad-logs"})
	lease := claim(t, c, "bad-logs")
	id := lease.GetJob().GetId()

	_, err := c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: "not-the-lease",
		Lines: []*jobwatchv1.AppendLogLine{{Text: "x"}}})
	wantCode(t, err, connect.CodeFailedPrecondition)
	tooMany := &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId()}
	for range jobtype.MaxLogLinesPerAppend + 1 {
		tooMany.Lines = append(tooMany.Lines, &jobwatchv1.AppendLogLine{Text: "x"})
	}
	_, err = c.workers.AppendJobLogs(ctxTimeout(t, callBound), tooMany)
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: "x", Stream: 7}}})
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id, AfterSeq: -1})
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: "j_nosuchjob"})
	wantCode(t, err, connect.CodeNotFound)
	// A bad argument is told as such whether or not the job exists.
	_, err = c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: "j_nosuchjob", AfterSeq: -1})
	wantCode(t, err, connect.CodeInvalidArgument)
	watch, err := c.jobs.WatchJobLogs(ctxTimeout(t, callBound), &jobwatchv1.WatchJobLogsRequest{JobId: "j_nosuchjob", AfterSeq: -1})
	if err == nil {
		for watch.Receive() {
		}
		err = watch.Err()
	}
	wantCode(t, err, connect.CodeInvalidArgument)
	// One text of 1,001 lines is 1,001 lines: the bound of a call holds.
	_, err = c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: strings.Repeat("x\n", jobtype.MaxLogLinesPerAppend) + "x"}}})
	wantCode(t, err, connect.CodeInvalidArgument)
	if ce := (*connect.Error)(nil); !errors.As(err, &ce) || !strings.Contains(ce.Message(), "the 1 given hold 1001") {
		t.Errorf("one text of 1,001 lines: %v; want it refused, counted", err)
	}

	_, err = c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: "x"}, {Text: "y", Time: timestamppb.New(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC))}}})
	wantCode(t, err, connect.CodeInvalidArgument)
	if ce := (*connect.Error)(nil); !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), "lines[1].time: must be within 100 years of now") {
		t.Errorf("a line from 1900: %v; want its time refused, named", err)
	}
	_, err = c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: "x", Time: timestamppb.New(time.Time{})}}})
	wantCode(t, err, connect.CodeInvalidArgument)
	if ce := (*connect.Error)(nil); !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), "lines[0].time: 0001-01-01T00:00:00Z is no time") {
		t.Errorf("a line at 0001-01-01T00:00:00Z: %v; want its time refused, as the docs say", err)
	}

	long := strings.Repeat("é", jobtype.MaxLogLineBytes) // twice the limit in bytes
	appendLines(t, c, lease, long)
	page, err := c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id})
	if err != nil || len(page.GetLines()) != 1 {
		t.Fatalf("after the refusals and one long line: %v, %v; want the long line alone", page, err)
	}

	if text := page.GetLines()[0].GetText(); len(text) > jobtype.MaxLogLineBytes || !strings.HasSuffix(text, "bytes cut]") {
		t.Errorf("a line of %d bytes came back as %d bytes ending %q; want it cut with a marker", len(long), len(text), text[len(text)-20:])
	}

	// Text holding newlines is the lines it holds, never one line that
	// reads as two (the second a forged line of its own).
	appendLines(t, c, lease, "fake\n2026-12-04T00:00:00.000 stderr injected\r\n", "last\n")
	page, err = c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id, AfterSeq: 1})
	var texts []string
	for _, l := range page.GetLines() {
		texts = append(texts, l.GetText())
	}
	if want := []string{"fake", "2026-12-04T00:00:00.000 stderr injected", "last"}; err != nil || !slices.Equal(texts, want) {
		t.Errorf("lines with newlines came back as %q (%v); want %q", texts, err, want)
	}

	complete(t, c, lease, nil)
	resp, err := c.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: "late"}}})
	if err == nil {
		t.Errorf("an append after the job ended answered %v; want failed_precondition", resp)
	}
	wantCode(t, err, connect.CodeFailedPrecondition)
	if ce := (*connect.Error)(nil); !errors.As(err, &ce) || !strings.Contains(ce.Message(), "the job has ended") {
		t.Errorf("an append after the job ended: %v; want the message to say why the lease may be gone", err)
	}

	// An after_seq past the job's last line (the largest there is; a
	// reader resuming on a database restored from an older copy) reads
	// as 0, as WatchJob's after_version does: every line kept, then the
	// end, never the lines appended up to it skipped without a word.
	page, err = c.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id, AfterSeq: math.MaxInt64})
	if err != nil || len(page.GetLines()) == 0 || page.GetLines()[0].GetSeq() != 1 || page.GetGap() != nil || !page.GetJobEnded() {
		t.Errorf("a page after seq MaxInt64: %v, %v; want every line from seq 1, no gap, job ended", page, err)
	}
	watch, err = c.jobs.WatchJobLogs(ctxTimeout(t, callBound), &jobwatchv1.WatchJobLogsRequest{JobId: id, AfterSeq: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for watch.Receive() {
		for _, l := range watch.Msg().GetLines() {
			seqs = append(seqs, l.GetSeq())
		}
	}
	if err := watch.Err(); err != nil || len(seqs) == 0 || seqs[0] != 1 || int(seqs[len(seqs)-1]) != len(seqs) {
		t.Errorf("a watch after seq MaxInt64 of an ended job sent seqs %v and ended with %v; want every line from 1, then OK", seqs, err)
	}
}

// Another tenant's job's logs are not_found, as the job is; a worker
// token may not read logs, a client token may not append.
func TestJobLogsKeepToTheTenant(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	p := authProtocols[1]
	admin, acme, globex, worker := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, acmeToken),
		ts.clientsWithToken(p, globexToken), ts.clientsWithToken(p, workerToken)
	submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "tenant-logs"})
	lease := claim(t, worker, "tenant-logs")
	appendLines(t, worker, lease, "secret")
	id := lease.GetJob().GetId()

	if page, err := acme.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id}); err != nil || len(page.GetLines()) != 1 {
		t.Errorf("acme reads its job's logs: %v, %v", page, err)
	}
	_, err := globex.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id})
	wantCode(t, err, connect.CodeNotFound)
	stream, err := globex.jobs.WatchJobLogs(ctxTimeout(t, callBound), &jobwatchv1.WatchJobLogsRequest{JobId: id})
	if err == nil {
		for stream.Receive() {
			t.Errorf("globex's watch of acme's job's logs sent %v", stream.Msg())
		}
		err = stream.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
	_, err = worker.jobs.GetJobLogs(ctxTimeout(t, callBound), &jobwatchv1.GetJobLogsRequest{JobId: id})
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = acme.workers.AppendJobLogs(ctxTimeout(t, callBound), &jobwatchv1.AppendJobLogsRequest{JobId: id, LeaseId: lease.GetLeaseId(),
		Lines: []*jobwatchv1.AppendLogLine{{Text: "forged"}}})
	wantCode(t, err, connect.CodePermissionDenied)
}

// A WatchJobLogs stream of a running job ends OK at the stream lifetime
// without job_ended, so a caller knows to open another.
func TestAWatchOfLogsEndedByItsLifetimeDoesNotSayTheJobEnded(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{StreamLifetime: 200 * time.Millisecond}})
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "logs-lifetime"})
	lease := claim(t, c, "logs-lifetime")
	appendLines(t, c, lease, "one")
	stream, err := c.jobs.WatchJobLogs(ctxTimeout(t, 30*time.Second), &jobwatchv1.WatchJobLogsRequest{JobId: lease.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for stream.Receive() {
		lines += len(stream.Msg().GetLines())
		if stream.Msg().GetJobEnded() {
			t.Fatal("a stream of a running job said job_ended")
		}
	}
	if err := stream.Err(); err != nil || lines != 1 {
		t.Fatalf("the stream ended with %v after %d lines; want OK after 1, at its lifetime", err, lines)
	}
}
