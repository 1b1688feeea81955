package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// submitOK runs "jobwatch submit" with args against s and returns the
// id it printed.
func (s *cliServer) submitOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runInProcess(t, append(append([]string{"submit"}, args...), "--server", s.URL)...)
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "j_") {
		t.Fatalf("submit %v = exit %d, %q (%s); want 0 and an id", args, code, out, errOut)
	}
	return id
}

// getJob runs "jobwatch get ID" against s and returns what it printed.
func (s *cliServer) getJob(t *testing.T, id string) string {
	t.Helper()
	code, out, errOut := runInProcess(t, "get", id, "--server", s.URL)
	if code != 0 {
		t.Fatalf("get %s = exit %d (%s)", id, code, errOut)
	}
	return out
}

// untilState follows job id until it is in state, through the job's
// watch stream; the bound only fails a broken build.
func (s *cliServer) untilState(t *testing.T, id string, state jobwatchv1.JobState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last jobwatchv1.JobState
	for j, err := range s.Client.Watch(ctx, id) {
		if err != nil {
			t.Fatalf("watch %s for %s (last seen %s): %v", id, stateName(state), stateName(last), err)
		}
		if last = j.GetState(); last == state {
			return
		}
	}
	t.Fatalf("job %s ended %s, never %s", id, stateName(last), stateName(state))
}

// mustMatch fails unless text matches every pattern.
func mustMatch(t *testing.T, what, text string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(text) {
			t.Errorf("%s has no match for %s:\n%s", what, p, text)
		}
	}
}

// A job submitted with --after is WAITING, and get and list say so and
// name what it waits for; a wait on it waits; it becomes QUEUED the
// moment a worker runs its dependency, and the wait ends with it.
func TestSubmitAfterWaitsForItsDependency(t *testing.T) {
	s := startBatchServer(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a := s.submitOK(t, "deps.first")
	b := s.submitOK(t, "deps.then", "--after", a, "--batch", "nightly")
	mustMatch(t, "get of the job after the other", s.getJob(t, b),
		`(?m)^state: +WAITING$`, `(?m)^after: +`+a+` +QUEUED$`, `(?m)^on dependency failure: +cancel$`, `(?m)^batch: +nightly$`)

	code, out, errOut := runInProcess(t, "list", "--state", "waiting", "--server", s.URL)
	if code != 0 || !strings.Contains(out, b) || regexp.MustCompile(`(?m)^`+a).MatchString(out) {
		t.Fatalf("list --state waiting = exit %d:\n%s%s\nwant the waiting job alone", code, out, errOut)
	}
	mustMatch(t, "list --state waiting", out, b+` +deps\.then +WAITING +0% +after `+a)

	// wait, as a process of its own: a WAITING job has not ended, so it
	// parks on the server until the job does.
	var waitOut, waitErr bytes.Buffer
	waiting := jobwatchCmd(ctx, "wait", b, "--server", s.URL)
	waiting.Stdout, waiting.Stderr = &waitOut, &waitErr
	if err := waiting.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- waiting.Wait() }()
	waitFor(t, "the wait parked on the server", func() bool { return s.parkedWaits() >= 1 })

	logs, _, _ := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "deps.first", "--exec", "echo '\"first done\"'")
	s.untilState(t, b, jobwatchv1.JobState_JOB_STATE_QUEUED)
	mustMatch(t, "get once its dependency succeeded", s.getJob(t, b), `(?m)^state: +QUEUED$`, `(?m)^after: +`+a+`$`)
	if first, err := s.Client.Get(ctx, a); err != nil || first.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the dependency = %v, %v; want SUCCEEDED; worker's log:\n%s", first, err, logs)
	}
	select {
	case err := <-waited:
		t.Fatalf("wait ended (%v) while its job was only QUEUED: %s%s", err, waitOut.String(), waitErr.String())
	default:
	}

	s.end(t, "deps.then", `"then done"`)
	select {
	case err := <-waited:
		if err != nil || !strings.Contains(waitOut.String(), b+" SUCCEEDED") {
			t.Fatalf("wait = %v, %q (%s); want exit 0 and the job SUCCEEDED", err, waitOut.String(), waitErr.String())
		}
	case <-ctx.Done():
		t.Fatal("wait did not end with its job")
	}
}

// jobwatch get of a WAITING job shows beside each job it runs after its
// state, so that one can see which it still waits for.
func TestGetShowsTheStatesOfTheJobsAWaitingJobRunsAfter(t *testing.T) {
	s := startBatchServer(t, 0)
	a := s.submitOK(t, "deps.one")
	c := s.submitOK(t, "deps.two")
	b := s.submitOK(t, "deps.after", "--after", a+","+c)
	s.end(t, "deps.one", `"done"`)
	mustMatch(t, "get of the job after two", s.getJob(t, b),
		`(?m)^state: +WAITING$`, `(?m)^after: +`+a+` +SUCCEEDED$`, `(?m)^ +`+c+` +QUEUED$`)
}

// A dependency that fails cancels the jobs that run after it, with an
// error that names it, unless they were submitted with
// --on-dependency-failure run; a retry of a cancelled one waits again,
// until its dependency, retried too, has succeeded.
func TestAFailedDependencyCancelsTheJobAfterIt(t *testing.T) {
	s := startBatchServer(t, 0)
	a := s.submitOK(t, "deps.first")
	cancelled := s.submitOK(t, "deps.then", "--after", a)
	runs := s.submitOK(t, "deps.anyway", "--after", a, "--on-dependency-failure", "run")
	mustMatch(t, "get of the job that runs anyway", s.getJob(t, runs), `(?m)^state: +WAITING$`, `(?m)^on dependency failure: +run$`)

	if failed := s.end(t, "deps.first", ""); failed != a {
		t.Fatalf("failed %s, want the dependency %s", failed, a)
	}
	s.untilState(t, cancelled, jobwatchv1.JobState_JOB_STATE_CANCELLED)
	mustMatch(t, "get of the cancelled job", s.getJob(t, cancelled), `(?m)^state: +CANCELLED$`,
		`(?m)^error: +DependencyFailed: job `+a+`, which it runs after, ended FAILED$`)
	// A job submitted after the failed one ends as it is made, and
	// submit says so beside its id.
	if code, out, errOut := runInProcess(t, "submit", "deps.late", "--after", a, "--server", s.URL); code != 0 || !strings.HasPrefix(out, "j_") ||
		!strings.Contains(errOut, "the job ended as it was submitted: "+strings.TrimSpace(out)+" CANCELLED 0% error=DependencyFailed") {
		t.Errorf("submit --after the failed job = exit %d, %q (%s); want its id, and that it ended CANCELLED", code, out, errOut)
	}
	code, out, errOut := runInProcess(t, "wait", cancelled, "--server", s.URL)
	if code != exitCancelled || !strings.Contains(out, `error=DependencyFailed "job `+a+`, which it runs after, ended FAILED"`) {
		t.Errorf("wait on the cancelled job = exit %d, %q (%s); want %d and the dependency named", code, out, errOut, exitCancelled)
	}
	code, out, _ = runInProcess(t, "list", "--server", s.URL)
	mustMatch(t, "list", out, cancelled+` +deps\.then +CANCELLED +0% +DependencyFailed job `+a)
	if code != 0 {
		t.Errorf("list = exit %d", code)
	}

	s.untilState(t, runs, jobwatchv1.JobState_JOB_STATE_QUEUED)

	// The retry never runs it before its dependency has succeeded: it
	// waits again, and says so, until the dependency, retried, succeeds.
	code, out, errOut = runInProcess(t, "retry", cancelled, "--server", s.URL)
	if code != 0 || !strings.Contains(errOut, "job "+cancelled+" waits again for the jobs it runs after that have not succeeded") {
		t.Fatalf("retry = exit %d, %q (%s); want 0 and that it waits again", code, out, errOut)
	}
	mustMatch(t, "get after the retry", s.getJob(t, cancelled), `(?m)^state: +WAITING$`)
	if code, out, errOut := runInProcess(t, "retry", a, "--server", s.URL); code != 0 || strings.Contains(errOut, "waits again") {
		t.Fatalf("retry of the dependency = exit %d, %q (%s)", code, out, errOut)
	}
	if done := s.end(t, "deps.first", `"ok"`); done != a {
		t.Fatalf("completed %s, want the dependency %s", done, a)
	}
	s.untilState(t, cancelled, jobwatchv1.JobState_JOB_STATE_QUEUED)
}

// A line of submit --file carries after and onDependencyFailure in the
// JSON form curl sends (or the proto names); the flags are per job, so
// they are refused with --file.
func TestSubmitFileLinesCarryTheirDependencies(t *testing.T) {
	s := startBatchServer(t, 0)
	ctx := context.Background()
	a := s.submitOK(t, "deps.first")
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	writeFile(t, file, `{"kind":"deps.then","after":["`+a+`"],"onDependencyFailure":"DEPENDENCY_FAILURE_RUN"}
{"kind":"deps.then","after":["`+a+`"],"on_dependency_failure":"DEPENDENCY_FAILURE_CANCEL"}
{"kind":"deps.free"}
`)
	code, out, errOut := runInProcess(t, "submit", "--file", file, "--server", s.URL)
	ids := strings.Fields(out)
	if code != 0 || len(ids) != 3 {
		t.Fatalf("submit --file = exit %d, %q (%s); want three ids", code, out, errOut)
	}
	for i, want := range []struct {
		state  jobwatchv1.JobState
		after  int
		policy jobwatchv1.DependencyFailure
	}{
		{jobwatchv1.JobState_JOB_STATE_WAITING, 1, jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN},
		{jobwatchv1.JobState_JOB_STATE_WAITING, 1, jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL},
		{jobwatchv1.JobState_JOB_STATE_QUEUED, 0, jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED},
	} {
		j, err := s.Client.Get(ctx, ids[i])
		if err != nil || j.GetState() != want.state || len(j.GetAfter()) != want.after || j.GetOnDependencyFailure() != want.policy {
			t.Errorf("line %d: %v, %v; want %s after %d jobs, %s", i+1, j, err, stateName(want.state), want.after, want.policy)
		}
	}

	// A line after a job the tenant does not have refuses the call's one
	// commit: the line is named, and since the server answered, nothing
	// of the call was submitted.
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	writeFile(t, missing, `{"kind":"deps.free"}
{"kind":"deps.then","after":["j_06h2k5k0tr1rsafy6jp3ngdat4"]}
`)
	code, out, errOut = runInProcess(t, "submit", "--file", missing, "--server", s.URL)
	if code != exitError || out != "" ||
		!strings.Contains(errOut, "submit: no job was submitted: line 2 of "+missing+": not_found: jobs[1].after: job j_06h2k5k0tr1rsafy6jp3ngdat4 not found") {
		t.Errorf("submit --file after a missing job = exit %d, %q, %q; want 1, the id named, and nothing submitted", code, out, errOut)
	}

	for _, flag := range [][]string{{"--after", a}, {"--on-dependency-failure", "run"}} {
		code, _, errOut := runInProcess(t, append([]string{"submit", "--file", file, "--server", s.URL}, flag...)...)
		if code != exitUsage || !strings.Contains(errOut, flag[0]+" does not go with --file") {
			t.Errorf("submit --file %v = exit %d, %q; want a usage error saying to set it on each line", flag, code, errOut)
		}
	}
}

// Bad dependencies are refused with what to do about them, and nothing is
// submitted: an unknown job, or another tenant's, is the server's
// not_found (exit 1) naming the id and nothing of whether it exists
// elsewhere; --after with --hold, or a policy without --after, is a usage
// error (exit 2) before any call.
func TestSubmitAfterRefusesBadDependencies(t *testing.T) {
	s := startBatchServer(t, 0)
	const unknown = "j_06h2k5k0tr1rsafy6jp3ngdat4" // well formed, never issued here
	other := s.submitOK(t, "deps.first", "--tenant", "other")
	known := s.submitOK(t, "deps.first")
	for _, tt := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"an unknown job", []string{"--after", known + "," + unknown}, exitError, "submit: not_found: after: job " + unknown + " not found"},
		{"another tenant's job", []string{"--after", other}, exitError, "submit: not_found: after: job " + other + " not found"},
		{"an id that is no id", []string{"--after", "a b"}, exitError, "submit: invalid_argument: after[0]"},
		{"no id", []string{"--after", ","}, exitUsage, `invalid value "," for flag -after: want one or more job ids`},
		{"with --hold", []string{"--after", known, "--hold"}, exitUsage, "--hold and --after do not go together"},
		{"a policy without --after", []string{"--on-dependency-failure", "run"}, exitUsage, "--on-dependency-failure goes with --after"},
		{"a policy that is none", []string{"--after", known, "--on-dependency-failure", "skip"}, exitUsage, `must be "cancel" or "run"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runInProcess(t, append([]string{"submit", "deps.refused", "--server", s.URL}, tt.args...)...)
			if code != tt.code || out != "" || !strings.Contains(errOut, tt.says) {
				t.Errorf("submit %v = exit %d, %q, %q; want %d saying %q", tt.args, code, out, errOut, tt.code, tt.says)
			}
		})
	}
	code, out, errOut := runInProcess(t, "list", "--kind", "deps.refused", "--server", s.URL)
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("refused submits stored jobs: exit %d:\n%s%s", code, out, errOut)
	}
}
