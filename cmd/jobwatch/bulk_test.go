package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// serveWithAcmeAndAdmin serves a SQLite file for the command line with
// two tokens: acme-secret, a client of tenant acme, and admin-secret.
func serveWithAcmeAndAdmin(t *testing.T) *cliServer {
	t.Helper()
	tokens, err := auth.ParseTokens("tokens.yaml", []byte("tokens:\n"+
		"  - {sha256: "+auth.Digest("acme-secret")+", role: client, tenant: acme}\n"+
		"  - {sha256: "+auth.Digest("admin-secret")+", role: admin}\n"))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "jobwatch.db")
	st, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	s := serveForCLI(t, db, st, jobs.Config{}, server.Config{Tokens: tokens})
	return s
}

// The question before a bulk action names the tenant it acts on when
// the command names none: a client token's own, "default" for an admin.
func TestTheBulkQuestionNamesTheTokensTenant(t *testing.T) {
	s := serveWithAcmeAndAdmin(t)
	stdin, stdinIsTerminal = strings.NewReader("n\n"), func() bool { return true }
	t.Cleanup(func() { stdinIsTerminal = func() bool { return false } })
	for token, tenant := range map[string]string{"acme-secret": "acme", "admin-secret": "default"} {
		stdin = strings.NewReader("n\n")
		code, _, stderr := runInProcess(t, "retry", "--server", s.URL, "--token", token, "--state", "failed")
		if want := "retry every job of tenant " + tenant + " with state FAILED? [y/N]"; code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("with the token of %s: exit %d, %q; want the question %q", tenant, code, stderr, want)
		}
	}
}

// "jobwatch cancel" with filter flags instead of an ID cancels every job
// they match; at a terminal it asks first, and no answer but yes does
// nothing; --yes skips the question, and --json says what it did.
func TestCancelWithAFilterCancelsEveryMatchAfterAsking(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	var ids []string
	for range 3 {
		ids = append(ids, s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cli", Queue: "nightly"}))
	}
	other := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cli", Queue: "daytime"})

	asked := func(answer string) {
		t.Helper()
		stdin, stdinIsTerminal = strings.NewReader(answer), func() bool { return true }
		t.Cleanup(func() { stdinIsTerminal = func() bool { return false } })
	}

	asked("n\n")
	code, stdout, stderr := runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly", "--state", "queued")
	if code != 1 || !strings.Contains(stderr, "cancel every job of tenant default with queue nightly, state QUEUED? [y/N]") ||
		!strings.Contains(stderr, "nothing done") {
		t.Fatalf("answered no: exit %d, stdout %q, stderr %q; want the question, then nothing done", code, stdout, stderr)
	}
	for _, id := range ids {
		if j, err := s.Client.Get(t.Context(), id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("after no, job %s is %v (%v)", id, j.GetState(), err)
		}
	}

	asked("y\n")
	code, stdout, stderr = runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly")
	if code != 0 || stdout != "3 matched, 3 cancelled\n" {
		t.Fatalf("answered yes: exit %d, stdout %q, stderr %q; want 3 cancelled", code, stdout, stderr)
	}
	for _, id := range ids {
		if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("job %s is %v, want CANCELLED", id, j.GetState())
		}
	}
	if j, _ := s.Client.Get(t.Context(), other); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the job of another queue is %v, want QUEUED", j.GetState())
	}

	asked("") // --yes never reads the answer
	code, stdout, _ = runInProcess(t, "cancel", "--server", s.URL, "--all", "--yes", "--json")
	if code != 0 || stdout != `{"matched":1,"changed":1}`+"\n" {
		t.Fatalf("--all --yes --json: exit %d, %q; want the one job left cancelled", code, stdout)
	}

	// A filter that says nothing is a usage error, before any question
	// (the server would refuse it); so are an ID and a filter together.
	asked("y\n")
	code, _, stderr = runInProcess(t, "cancel", "--server", s.URL, "--tenant", "default")
	if code != 2 || strings.Contains(stderr, "[y/N]") || !strings.Contains(stderr, "cancel of tenant default needs --queue, --kind, --state, --created-before or --batch, or --all") {
		t.Fatalf("a filter of a tenant alone: exit %d, %q; want 2 saying what to add, without asking", code, stderr)
	}
	if code, _, stderr = runInProcess(t, "delete", "--server", s.URL); code != 2 ||
		!strings.Contains(stderr, "or jobwatch delete with filter flags (--queue, --kind, --state, --created-before, --batch, or --all)") {
		t.Fatalf("neither an ID nor a filter: exit %d, %q; want 2 naming both ways", code, stderr)
	}
	if code, _, stderr = runInProcess(t, "cancel", ids[0], "--server", s.URL, "--queue", "nightly"); code != 2 ||
		!strings.Contains(stderr, "cancel takes one job's ID or filter flags, not both") {
		t.Fatalf("an ID and a filter: exit %d, %q; want 2 saying not both", code, stderr)
	}
	if code, _, stderr = runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly", "--bogus"); code != 2 ||
		!strings.Contains(stderr, "flag provided but not defined: -bogus") {
		t.Fatalf("a filter and an unknown flag: exit %d, %q; want 2 naming the flag", code, stderr)
	}
	if code, _, stderr = runInProcess(t, "cancel", "--server", s.URL, "--kind", "x", "--created-before", "yesterday"); code != 2 ||
		!strings.Contains(stderr, "--created-before") {
		t.Fatalf("a bad --created-before: exit %d, %q; want 2 naming the flag", code, stderr)
	}
}

// A filter flag given again adds to the list, as a comma does; a flag of
// one value (--batch, --tenant, --created-before) given again is a usage
// error, as either value alone would act on other jobs.
func TestAFilterFlagGivenTwiceIsNotDroppedWithoutAWord(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	var ids []string
	for _, q := range []string{"dq1", "dq2"} {
		ids = append(ids, s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.twice", Queue: q}))
	}
	code, stdout, stderr := runInProcess(t, "cancel", "--server", s.URL, "--queue", "dq1", "--queue", "dq2", "--state", "queued", "--state", "running", "--yes")
	if code != 0 || stdout != "2 matched, 2 cancelled\n" {
		t.Fatalf("--queue dq1 --queue dq2: exit %d, %q, %q; want both jobs cancelled", code, stdout, stderr)
	}
	for _, id := range ids {
		if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("job %s is %v, want CANCELLED", id, j.GetState())
		}
	}
	for _, flag := range []string{"--batch", "--tenant", "--created-before"} {
		code, _, stderr := runInProcess(t, "delete", "--server", s.URL, "--kind", "bulk.twice", flag, "1h", flag, "2h", "--yes")
		if code != 2 || !strings.Contains(stderr, `given twice ("1h", then "2h"): it takes one value`) {
			t.Errorf("%s twice: exit %d, %q; want 2 saying it takes one value", flag, code, stderr)
		}
	}
	if j, _ := s.Client.Get(t.Context(), ids[0]); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("a refused delete changed job %s: %v", ids[0], j.GetState())
	}
}

// "jobwatch retry ID" runs a failed job again, "jobwatch get" then shows
// the failed attempt and the retry in its history, and "jobwatch delete"
// removes a job once it has ended; "retry --state failed" retries every
// failed job of a queue.
func TestRetryAndDeleteOneJobOrEveryMatch(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	failOne := func(queue string) string {
		t.Helper()
		id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cli.retry", Queue: queue, MaxAttempts: 1})
		j := s.claim(t, "cli.retry")
		if _, err := s.Engine.Fail(t.Context(), j.ID, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: "503"}, false); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := failOne("imports")
	code, stdout, stderr := runInProcess(t, "retry", id, "--server", s.URL)
	if code != 0 || !strings.Contains(stdout, "QUEUED") {
		t.Fatalf("retry: exit %d, %q, %q; want the job QUEUED", code, stdout, stderr)
	}
	code, stdout, _ = runInProcess(t, "get", id, "--server", s.URL)
	if code != 0 || !strings.Contains(stdout, "history:") || !strings.Contains(stdout, "#1 FAILED") ||
		!strings.Contains(stdout, "error=Upstream: 503") || !strings.Contains(stdout, "QUEUED") || !strings.Contains(stdout, "by=anonymous") {
		t.Fatalf("get after the retry: exit %d\n%s\nwant the failed attempt and the retry by anonymous in the history", code, stdout)
	}
	code, _, stderr = runInProcess(t, "delete", id, "--server", s.URL)
	if code != 1 || !strings.Contains(stderr, "failed_precondition") || !strings.Contains(stderr, "cancel it first") {
		t.Fatalf("delete of a queued job: exit %d, %q; want failed_precondition saying to cancel it first", code, stderr)
	}
	if code, _, stderr = runInProcess(t, "cancel", id, "--server", s.URL); code != 0 {
		t.Fatalf("cancel: exit %d, %q", code, stderr)
	}
	if code, stdout, stderr = runInProcess(t, "delete", id, "--server", s.URL); code != 0 || stdout != id+" deleted\n" {
		t.Fatalf("delete of a cancelled job: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, _, stderr = runInProcess(t, "get", id, "--server", s.URL); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("get after the delete: exit %d, %q; want not found", code, stderr)
	}

	failed := []string{failOne("imports"), failOne("imports")}
	code, stdout, stderr = runInProcess(t, "retry", "--server", s.URL, "--state", "failed", "--queue", "imports", "--yes")
	if code != 0 || stdout != "2 matched, 2 retried\n" {
		t.Fatalf("retry --state failed: exit %d, %q, %q; want both retried", code, stdout, stderr)
	}
	for _, id := range failed {
		if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("job %s is %v after the bulk retry, want QUEUED", id, j.GetState())
		}
	}
	// A batch alone narrows enough; this one holds no failed job.
	if code, stdout, stderr = runInProcess(t, "retry", "--server", s.URL, "--batch", "album-7", "--yes"); code != 0 || stdout != "0 matched, 0 retried\n" {
		t.Fatalf("retry --batch: exit %d, %q, %q; want nothing matched", code, stdout, stderr)
	}
	code, _, stderr = runInProcess(t, "retry", "--server", s.URL, "--state", "succeeded", "--yes")
	if code != 1 || !strings.Contains(stderr, "invalid_argument") || !strings.Contains(stderr, "SUCCEEDED") {
		t.Fatalf("retry --state succeeded: exit %d, %q; want invalid_argument naming the state", code, stderr)
	}
	// A job the action leaves as it was is counted, and why it may have
	// been is said: here a retry would make a second active job with
	// its unique key.
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cli.keyed", Queue: "keyed", MaxAttempts: 1, UniqueKey: "nightly"})
	j := s.claim(t, "cli.keyed")
	if _, err := s.Engine.Fail(t.Context(), j.ID, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: "503"}, false); err != nil {
		t.Fatal(err)
	}
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cli.keyed", Queue: "keyed", UniqueKey: "nightly"})
	code, stdout, stderr = runInProcess(t, "retry", "--server", s.URL, "--queue", "keyed", "--yes")
	if code != 0 || stdout != "1 matched, 0 retried\n" || !strings.Contains(stderr, "1 left as they were") || !strings.Contains(stderr, "unique key") {
		t.Fatalf("retry of a job whose key is taken: exit %d, %q, %q; want it left, and why it may have been", code, stdout, stderr)
	}
}

// A bulk action run by cron or a systemd unit, whose stdin is /dev/null
// (a character device, not a terminal), acts without asking.
func TestABulkActionFromAScriptIsNotAsked(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cron", Queue: "nightly"})
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	if isTerminal(devnull) {
		t.Fatal("isTerminal says /dev/null is a terminal")
	}
	saved := os.Stdin
	os.Stdin, stdinIsTerminal = devnull, func() bool { return isTerminal(os.Stdin) }
	t.Cleanup(func() { os.Stdin, stdinIsTerminal = saved, func() bool { return false } })

	code, stdout, stderr := runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly")
	if code != 0 || stdout != "1 matched, 1 cancelled\n" || strings.Contains(stderr, "[y/N]") {
		t.Fatalf("stdin /dev/null: exit %d, stdout %q, stderr %q; want the job cancelled without a question", code, stdout, stderr)
	}
	if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("the job is %v, want CANCELLED", j.GetState())
	}
}

// One Ctrl-C at a bulk action's question ends the command at once,
// having done nothing, as a shell's Ctrl-C would: no second Ctrl-C, and
// no line to type first.
func TestOneCtrlCAtTheBulkQuestionEndsItWithNothingDone(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.ctrlc", Queue: "nightly"})
	typed, typing := io.Pipe() // a terminal nobody types at
	t.Cleanup(func() { typing.Close() })
	stdin, stdinIsTerminal = typed, func() bool { return true }
	t.Cleanup(func() { stdinIsTerminal = func() bool { return false } })

	ctx, ctrlC := context.WithCancelCause(t.Context())
	var stderr lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"cancel", "--server", s.URL, "--queue", "nightly"}, io.Discard, &stderr)
	}()
	waitFor(t, "the question", func() bool { return strings.Contains(stderr.String(), "[y/N] ") })
	ctrlC(signalCause{os.Interrupt})
	select {
	case code := <-exited:
		if want := "? [y/N] \njobwatch: cancel: stopped by SIGINT (Ctrl-C): nothing done\n"; code != 130 || !strings.HasSuffix(stderr.String(), want) {
			t.Fatalf("Ctrl-C at the question: exit %d, %q; want 130 ending %q", code, stderr.String(), want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("one Ctrl-C at the question did not end the command: %q", stderr.String())
	}
	if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the job is %v, want QUEUED", j.GetState())
	}
}

// A bulk action stopped by a signal before it asked for a page says
// nothing was done, not that a page may have been done in part, and not
// Go's "context canceled".
func TestABulkActionStoppedBeforeItsFirstPageSaysNothingWasDone(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.ctrlc", Queue: "nightly"})
	ctx, ctrlC := context.WithCancelCause(t.Context())
	ctrlC(signalCause{os.Interrupt})
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"cancel", "--server", s.URL, "--queue", "nightly", "--yes"}, &stdout, &stderr)
	if code != 130 || stderr.String() != "jobwatch: cancel: stopped by SIGINT (Ctrl-C): nothing done\n" || stdout.String() != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 130 and nothing done", code, stdout.String(), stderr.String())
	}
	if j, _ := s.Client.Get(t.Context(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the job is %v, want QUEUED", j.GetState())
	}
}

// A bulk retry that the tenant's max_queued stops partway says, beside
// the refusal, what it did: no summary of a call that went through on
// stdout, and --json gives the counts with the error.
func TestABulkRetryStoppedPartwaySaysWhatStands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "jobwatch.db")
	st, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	s := serveForCLI(t, db, st, jobs.Config{Rules: jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"default": {MaxQueued: 1}}}}, server.Config{})
	for range 3 {
		s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.quota", MaxAttempts: 1})
		j := s.claim(t, "bulk.quota")
		if _, err := s.Engine.Fail(t.Context(), j.ID, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: "503"}, false); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runInProcess(t, "retry", "--server", s.URL, "--kind", "bulk.quota", "--yes")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "resource_exhausted") ||
		!strings.Contains(stderr, "this page retried 1 of the 3 jobs it matched") ||
		!strings.Contains(stderr, "jobwatch: retry: stopped after 3 matched, 1 retried\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the refusal and what stands, on stderr", code, stdout, stderr)
	}
	code, stdout, _ = runInProcess(t, "retry", "--server", s.URL, "--kind", "bulk.quota", "--yes", "--json")
	if code != 1 || !strings.HasPrefix(stdout, `{"matched":2,"changed":0,"error":"retry: resource_exhausted: `) {
		t.Fatalf("--json: exit %d, %q; want the counts and the error", code, stdout)
	}
}

// A bulk action whose call is cut on its way back cannot know what the
// server did with the page it asked for, and says so, with what to do.
func TestABulkActionCutOffSaysThePageMayBeDone(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // the stream is reset, with no answer
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()
	code, stdout, stderr := runInProcess(t, "cancel", "--server", srv.URL, "--queue", "nightly", "--yes")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "jobwatch: cancel: stopped after 0 matched, 0 cancelled; the page asked for when it stopped may have been done in part: run the same command again") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want it said that the page may have been done", code, stdout, stderr)
	}
	code, stdout, _ = runInProcess(t, "cancel", "--server", srv.URL, "--queue", "nightly", "--yes", "--json")
	if code != 1 || !strings.HasPrefix(stdout, `{"matched":0,"changed":0,"error":"cancel: `) || !strings.HasSuffix(stdout, `,"inDoubt":true}`+"\n") {
		t.Fatalf("--json: exit %d, %q; want the counts, the error and inDoubt", code, stdout)
	}
}

// A filter that matched nothing in the caller's own tenant says which
// tenant that was, and how to name another: on a server without tokens
// (as an admin's) "default", named as such, not as a token's.
func TestABulkActionThatMatchedNothingSaysWhichTenantItRead(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cli", Queue: "nightly", Tenant: "acme"})
	code, out, errOut := runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly", "--yes")
	if code != 0 || out != "0 matched, 0 cancelled\n" || !strings.Contains(errOut, `the filter was read in tenant default; --tenant T names another`) {
		t.Errorf("cancel --queue nightly = exit %d, %q, %q; want 0 matched and which tenant was read", code, out, errOut)
	}
	code, out, errOut = runInProcess(t, "cancel", "--server", s.URL, "--queue", "nightly", "--tenant", "acme", "--yes")
	if code != 0 || out != "1 matched, 1 cancelled\n" || strings.Contains(errOut, "--tenant T") {
		t.Errorf("cancel --queue nightly --tenant acme = exit %d, %q, %q; want 1 matched, without the hint", code, out, errOut)
	}
}
