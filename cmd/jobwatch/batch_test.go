package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

// startBatchServer is startCLIServer on the backend under test
// (internal/testdb: SQLite, or PostgreSQL with JOBWATCH_TEST_BACKEND)
// with the server's wait cap set to waitCap (0: the default), so that a
// command's wait can outlive several caps.
func startBatchServer(t *testing.T, waitCap time.Duration) *cliServer {
	t.Helper()
	db := testdb.New(t)
	st, err := testdb.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return serveForCLI(t, db, st, jobs.Config{LeaseTimeout: 30 * time.Second, SweepInterval: 20 * time.Millisecond}, server.Config{WaitCap: waitCap})
}

// calls is how many calls of procedure (such as "WaitJobs") the server
// has answered.
func (s *cliServer) calls(procedure string) float64 {
	mfs, _ := s.registry.Gather()
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "jobwatch_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "procedure" && l.GetValue() == "/jobwatch.v1.JobService/"+procedure {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// submitBatch submits n jobs of kind with batch in one SubmitJobs and
// returns their ids in order.
func (s *cliServer) submitBatch(t *testing.T, kind, batch string, n int) []string {
	t.Helper()
	reqs := make([]*jobwatchv1.SubmitJobRequest, n)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: kind, Batch: batch}
	}
	js, err := s.Client.SubmitJobs(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.GetId()
	}
	return ids
}

// end claims the next job of kind and completes it (result not "") or
// fails it.
func (s *cliServer) end(t *testing.T, kind, result string) string {
	t.Helper()
	j := s.claim(t, kind)
	var err error
	if result == "" {
		_, err = s.Engine.Fail(context.Background(), j.ID, j.LeaseID, jobtype.JobError{Type: "Boom"}, false)
	} else {
		_, err = s.Engine.Complete(context.Background(), j.ID, j.LeaseID, []byte(result))
	}
	if err != nil {
		t.Error(err) // Error: called from goroutines too
	}
	return j.ID
}

// batchIDs lists the ids of a batch's jobs, oldest first.
func (s *cliServer) batchIDs(t *testing.T, batch string) []string {
	t.Helper()
	resp, err := s.Client.JobService().ListJobs(context.Background(), &jobwatchv1.ListJobsRequest{Batch: batch, PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range resp.GetJobs() {
		ids = append(ids, j.GetId())
	}
	slices.Reverse(ids)
	return ids
}

func TestSubmitFileSubmitsAJobALine(t *testing.T) {
	s := startBatchServer(t, 0)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	writeFile(t, file, `{"kind":"thumb","payload":{"image":"a.png"}}

{"kind":"thumb","queue":"slow","batch":"other"}
{"kind": "index", "hold": true, "unique_key": "idx"}
`)
	code, out, errOut := runInProcess(t, "submit", "--file", file, "--batch", "album", "--queue", "fast", "--server", s.URL)
	ids := strings.Fields(out)
	if code != 0 || len(ids) != 3 {
		t.Fatalf("submit --file = exit %d, %q (%s); want 0 and three ids", code, out, errOut)
	}
	want := []struct {
		kind, queue, batch string
		state              jobwatchv1.JobState
	}{
		{"thumb", "fast", "album", jobwatchv1.JobState_JOB_STATE_QUEUED},
		{"thumb", "slow", "other", jobwatchv1.JobState_JOB_STATE_QUEUED},
		{"index", "fast", "album", jobwatchv1.JobState_JOB_STATE_PENDING},
	}
	for i, id := range ids {
		j, err := s.Client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if j.GetKind() != w.kind || j.GetQueue() != w.queue || j.GetBatch() != w.batch || j.GetState() != w.state {
			t.Errorf("job of line %d = %s in queue %q, batch %q, %v; want %s in %q, batch %q, %v (a line's own fields over the flags)",
				i+1, j.GetKind(), j.GetQueue(), j.GetBatch(), j.GetState(), w.kind, w.queue, w.batch, w.state)
		}
	}
	if j, _ := s.Client.Get(ctx, ids[0]); j.GetPayload().GetStructValue().GetFields()["image"].GetStringValue() != "a.png" {
		t.Errorf("the first job's payload = %v, want the line's", j.GetPayload())
	}

	// From stdin, printed as JSON: a job a line.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := jobwatchCmd(cctx, "submit", "--file", "-", "--batch", "piped", "--json", "--server", s.URL)
	cmd.Stdin = strings.NewReader("{\"kind\":\"a\"}\n{\"kind\":\"b\"}") // no newline at the end
	piped, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(piped)), "\n")
	if err != nil || len(lines) != 2 {
		t.Fatalf("submit --file - --json = %v, %q; want two JSON lines", err, piped)
	}
	for i, line := range lines {
		var j struct{ ID, Kind, Batch string }
		if err := json.Unmarshal([]byte(line), &j); err != nil || j.Kind != []string{"a", "b"}[i] || j.Batch != "piped" {
			t.Fatalf("line %d = %s (%v); want job %q of batch piped", i+1, line, err, []string{"a", "b"}[i])
		}
	}
	if got := s.batchIDs(t, "piped"); len(got) != 2 {
		t.Fatalf("batch piped holds %v, want the two jobs", got)
	}
}

func TestSubmitFileSaysWhichLineWasRefusedAndWhatWasSubmitted(t *testing.T) {
	s := startBatchServer(t, 0)
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	writeFile(t, file, `{"kind":"k1"}
{"kind":"k2"}
{"kind":"k3"}
{"kind":"k4","priority":12}
{"kind":"k5"}
`)
	t.Run("up to 1,000 jobs are one commit: all or none", func(t *testing.T) {
		code, out, errOut := runInProcess(t, "submit", "--file", file, "--batch", "whole", "--server", s.URL)
		if code != exitError || out != "" || !strings.HasPrefix(errOut, "jobwatch: submit: no job was submitted: line 4 of "+file+": invalid_argument: jobs[3].priority") ||
			strings.Count(errOut, "\n") != 1 {
			t.Fatalf("submit --file = exit %d, stdout %q, stderr %q; want 1, no id, and line 4 named", code, out, errOut)
		}
		if got := s.batchIDs(t, "whole"); len(got) != 0 {
			t.Fatalf("batch whole holds %v after a refused file; want no job", got)
		}
	})
	t.Run("chunks before the refused one stay submitted, and it says so", func(t *testing.T) {
		code, out, errOut := runInProcess(t, "submit", "--file", file, "--batch", "chunked", "--chunk", "2", "--server", s.URL)
		ids := strings.Fields(out)
		for _, want := range []string{
			"line 4 of " + file + ": invalid_argument: jobs[1].priority",
			"none of the jobs of lines 3 to 4 was submitted",
			"the jobs of lines 1 to 2 were submitted (their ids are above)",
			"nothing from line 5 on was sent",
		} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
		if code != exitError || len(ids) != 2 || !slices.Equal(s.batchIDs(t, "chunked"), ids) {
			t.Fatalf("submit --file --chunk 2 = exit %d, ids %v, batch holds %v; want 1 and the first chunk's two jobs, printed",
				code, ids, s.batchIDs(t, "chunked"))
		}
	})
	t.Run("a refused chunk of one line names its job", func(t *testing.T) {
		code, out, errOut := runInProcess(t, "submit", "--file", file, "--batch", "single", "--chunk", "1", "--server", s.URL)
		if code != exitError || len(strings.Fields(out)) != 3 || !strings.Contains(errOut, "\njobwatch: the job of line 4 was not submitted\n") {
			t.Fatalf("submit --file --chunk 1 = exit %d, stdout %q, stderr %q; want 1, three ids, and line 4's job not submitted", code, out, errOut)
		}
	})
}

func TestSubmitFileRefusesBadInputBeforeSendingAnything(t *testing.T) {
	s := startBatchServer(t, 0)
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, text)
		return path
	}
	good := file("good.jsonl", `{"kind":"k"}`+"\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--file", file("broken.jsonl", "{\"kind\":\"k\"}\n{\"kind\":\"k\"}\n{\"kind\":\n")}, "line 3 of"},
		{[]string{"--file", file("unknown.jsonl", `{"kind":"k","colour":"red"}`)}, `unknown field "colour"`},
		{[]string{"--file", file("empty.jsonl", "\n\n")}, "holds no job"},
		{[]string{"--file", filepath.Join(dir, "missing.jsonl")}, "no such file"},
		{[]string{"--file", good, "thumb"}, "takes no KIND"},
		{[]string{"--file", good, "--hold"}, `set "hold" on each line`},
		{[]string{"--file", good, "--payload", "{}"}, `set "payload" on each line`},
		{[]string{"--file", good, "--wait"}, "jobwatch wait --batch NAME"},
		{[]string{"--file", good, "--chunk", "1001"}, "--chunk must be from 1 to 1000"},
		{[]string{}, "usage: jobwatch submit KIND [flags], or jobwatch submit --file FILE"},
		{[]string{"thumb", "--chunk", "10"}, "--chunk goes with --file"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := runInProcess(t, append([]string{"submit", "--batch", "refused", "--server", s.URL}, tt.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 saying %q", code, errOut, tt.want)
			}
		})
	}
	if got := s.batchIDs(t, "refused"); len(got) != 0 {
		t.Fatalf("refused files submitted %v; want nothing", got)
	}
}

func TestWaitForSeveralJobsExitsWithTheFirstThatDidNotSucceed(t *testing.T) {
	s := startBatchServer(t, 0)
	ids := s.submitBatch(t, "three", "", 3)
	s.end(t, "three", `{"rows":1}`) // ids[0]
	s.end(t, "three", "")           // ids[1]: FAILED
	if _, err := s.Client.Cancel(context.Background(), ids[2]); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		ids      []string
		wantCode int
	}{
		{"a cancelled job before a failed one exits 4", []string{ids[0], ids[2], ids[1]}, exitCancelled},
		{"a failed job before a cancelled one exits 3", []string{ids[1], ids[0], ids[2]}, exitFailed},
		{"jobs that all succeeded exit 0", []string{ids[0], ids[0]}, exitSucceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runJobwatch(t, append([]string{"wait", "--server", s.URL}, tt.ids...)...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			want := slices.Compact(slices.Clone(tt.ids))
			if code != tt.wantCode || len(lines) != len(want) {
				t.Fatalf("wait = exit %d, %q (%s); want %d and a line per job", code, out, errOut, tt.wantCode)
			}
			for i, id := range want {
				if !strings.HasPrefix(lines[i], id+" ") {
					t.Fatalf("line %d = %q; want job %s's, in the order given", i+1, lines[i], id)
				}
			}
		})
	}
	code, out, _ := runJobwatch(t, "wait", "--server", s.URL, "--json", ids[2], ids[0], ids[1])
	var got []struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitCancelled || len(got) != 3 ||
		got[0].State != "JOB_STATE_CANCELLED" || got[1].State != "JOB_STATE_SUCCEEDED" || got[2].State != "JOB_STATE_FAILED" {
		t.Fatalf("wait --json = exit %d, %q (%v); want 4 and a JSON array of the three jobs in order", code, out, err)
	}
	if !strings.Contains(out, `"result":{"rows":1}`) {
		t.Fatalf("wait --json = %s; want the results too", out)
	}
}

func TestWaitBatchWaitsAcrossTheServersCaps(t *testing.T) {
	s := startBatchServer(t, 50*time.Millisecond)
	ids := s.submitBatch(t, "nightly", "nightly", 3)
	if _, err := s.Client.Cancel(context.Background(), ids[1]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := jobwatchCmd(ctx, "wait", "--batch", "nightly", "--server", s.URL)
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	before := s.calls("WaitJobs")
	waitFor(t, "the command to ask again after three caps", func() bool { return s.calls("WaitJobs")-before >= 3 })
	s.end(t, "nightly", `"first"`)
	s.end(t, "nightly", `"last"`)
	err := cmd.Wait()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if cmd.ProcessState.ExitCode() != exitCancelled || len(lines) != 3 {
		t.Fatalf("wait --batch = %v, stdout %q, stderr %q; want exit 4 (the second job was cancelled) and three lines", err, out.String(), errOut.String())
	}
	for i, want := range []string{ids[0] + " SUCCEEDED", ids[1] + " CANCELLED", ids[2] + " SUCCEEDED"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Fatalf("line %d = %q, want %q...: the batch's jobs in submission order", i+1, lines[i], want)
		}
	}
}

func TestWaitAnyReturnsOnceTheFirstJobEnds(t *testing.T) {
	s := startBatchServer(t, 0)
	ids := s.submitBatch(t, "race", "", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := jobwatchCmd(ctx, "wait", "--any", "--json", ids[1], ids[0], "--server", s.URL)
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command's wait to park", func() bool { return s.parkedWaits() == 1 })
	first := s.end(t, "race", "") // ids[0], FAILED
	err := cmd.Wait()
	var got []struct{ ID, State string }
	if jerr := json.Unmarshal([]byte(out.String()), &got); jerr != nil || cmd.ProcessState.ExitCode() != exitFailed ||
		len(got) != 1 || got[0].ID != first || got[0].State != "JOB_STATE_FAILED" {
		t.Fatalf("wait --any = %v, stdout %q, stderr %q; want exit 3 and the one job that ended, %s", err, out.String(), errOut.String(), first)
	}
}

func TestWaitForSeveralJobsSaysWhatIsWrong(t *testing.T) {
	s := startBatchServer(t, 0)
	known := s.submitBatch(t, "known", "", 1)[0]
	held := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
	for _, tt := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{known, "j_00000000000000000000000000"}, exitError, "wait: not_found: j_00000000000000000000000000: job not found"},
		{[]string{known, held}, exitError, "wait: failed_precondition: " + held + ": job is pending: start it first"},
		{[]string{held}, exitError, "jobwatch: wait: failed_precondition: " + held + ": job is pending: start it first\n"},
		{[]string{"--batch", "no-such-batch"}, exitError, `batch "no-such-batch" holds no job`},
		{[]string{known, known, "--timeout", "200ms"}, exitTimedOut, "--timeout passed"},
		{[]string{known, "--batch", "b"}, exitUsage, "IDs or --batch, not both"},
		{[]string{}, exitUsage, "usage: jobwatch wait ID [ID...]"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := runInProcess(t, append([]string{"wait", "--server", s.URL}, tt.args...)...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", code, errOut, tt.wantCode, tt.want)
			}
		})
	}
}

func TestListBatchShowsOnlyTheBatchsJobs(t *testing.T) {
	s := startBatchServer(t, 0)
	mine := s.submitBatch(t, "thumb", "album", 2)
	other := s.submitBatch(t, "thumb", "other", 1)
	code, out, errOut := runInProcess(t, "list", "--batch", "album", "--server", s.URL)
	if code != 0 || !strings.Contains(out, mine[0]) || !strings.Contains(out, mine[1]) || strings.Contains(out, other[0]) {
		t.Fatalf("list --batch album = exit %d:\n%s%s\nwant %v only", code, out, errOut, mine)
	}
}

func TestWatchBatchFollowsEveryJobUntilAllHaveEnded(t *testing.T) {
	s := startBatchServer(t, 0)
	for _, mode := range []string{"lines", "bar"} {
		t.Run(mode, func(t *testing.T) {
			kind, batch := "watched-"+mode, "batch-"+mode
			ids := s.submitBatch(t, kind, batch, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := jobwatchCmd(ctx, "watch", "--batch", batch, "--progress", mode, "--server", s.URL)
			var out lockedBuffer
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			expect := func(want string) {
				t.Helper()
				waitFor(t, "watch to print "+want, func() bool { return strings.Contains(out.String(), want) })
			}
			if mode == "lines" {
				expect(ids[0] + " QUEUED")
				expect(ids[1] + " QUEUED")
			} else {
				expect("2 jobs, 0 ended; 2 queued")
			}
			j := s.claim(t, kind) // ids[0]
			if _, err := s.Engine.Heartbeat(ctx, j.ID, j.LeaseID, 50, "half way"); err != nil {
				t.Fatal(err)
			}
			if mode == "lines" {
				expect(ids[0] + ` RUNNING 50% "half way"`)
			} else {
				expect("2 jobs, 0 ended; 1 queued, 1 running")
			}
			if _, err := s.Engine.Complete(ctx, j.ID, j.LeaseID, []byte(`"done"`)); err != nil {
				t.Fatal(err)
			}
			if mode == "bar" {
				expect("2 jobs, 1 ended: 1 succeeded; 1 queued")
			}
			s.end(t, kind, "") // ids[1], FAILED
			err := cmd.Wait()
			text := out.String()
			if cmd.ProcessState.ExitCode() != exitFailed {
				t.Fatalf("watch --batch = %v; want exit 3 (a job failed); output:\n%s", err, text)
			}
			if !strings.HasSuffix(text, "batch "+batch+": 2 jobs, 2 ended: 1 succeeded, 1 failed\n") {
				t.Fatalf("output does not end with the batch's counts:\n%q", text)
			}
			if mode == "lines" && (!strings.Contains(text, ids[0]+` SUCCEEDED 100% "half way"`) || !strings.Contains(text, ids[1]+" FAILED")) {
				t.Fatalf("lines output lacks the jobs' ends:\n%s", text)
			}
			if mode == "bar" && (!strings.Contains(text, "\r\x1b[K[###############...............]") || !strings.Contains(text, "\n"+ids[1]+" FAILED 0% error=Boom\n")) {
				t.Fatalf("bar output lacks a half-full bar or the failed job's line:\n%q", text)
			}
		})
	}
}

// The stream starts with a batch's 500 most recent jobs: the rest, and
// their order, come from listing the batch.
func TestWatchBatchKnowsJobsBeyondTheStreamsFirstPage(t *testing.T) {
	s := startBatchServer(t, 0)
	ctx := context.Background()
	ids := s.submitBatch(t, "big", "big", 600)
	if failed := s.end(t, "big", ""); failed != ids[0] {
		t.Fatalf("claimed %s first, want the oldest, %s", failed, ids[0])
	}
	if _, err := s.Client.CancelJobs(ctx, &jobwatchv1.JobFilter{Kinds: []string{"big"}}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, "watch", "--batch", "big", "--json", "--server", s.URL)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var j struct{ ID string }
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seen[j.ID] = true
	}
	if code != exitFailed || len(seen) != 600 {
		t.Fatalf("watch --batch big = exit %d with %d jobs (%s); want 3, from the oldest job's failure, and all 600 jobs", code, len(seen), errOut)
	}
}

func TestWatchBatchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"watch", "j_1", "--batch", "b"},
		{"watch", "--batch", "b", "--logs"},
		{"watch", "j_1", "--tenant", "acme"},
		{"watch"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if code, _, errOut := runInProcess(t, args...); code != exitUsage || errOut == "" {
				t.Fatalf("exit %d, stderr %q; want 2 and a message", code, errOut)
			}
		})
	}
}

// submit --file keeps what it read compactly until it sends it: a
// million small jobs took the command 1 GB when each was kept decoded.
// 100,000 of them must hold less than 30 MB of heap (about 7 MB kept
// encoded).
func TestSubmitFileKeepsTheJobsItReadCompactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	var b strings.Builder
	const n = 100_000
	for i := range n {
		fmt.Fprintf(&b, `{"kind":"email","queue":"q-%d","payload":{"n":%d,"user":"u%d"}}`+"\n", i%3, i, i%1000)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	b = strings.Builder{}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	encoded, lines, err := readJobLines(path, &jobwatchv1.SubmitJobRequest{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(encoded) != n || len(lines) != n {
		t.Fatalf("read %d jobs, want %d", len(encoded), n)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d jobs read hold %.1f MB of heap", n, float64(grew)/(1<<20))
	if grew > 30<<20 {
		t.Errorf("%d jobs read from a file hold %d MB of heap, want under 30", n, grew>>20)
	}
	reqs, err := decodeJobs(encoded[n-2:])
	if err != nil || reqs[1].GetKind() != "email" || reqs[1].GetQueue() != "q-0" {
		t.Fatalf("the last job read back as %v, %v", reqs, err)
	}
}

// Lines of large payloads go in calls small enough for the server's
// request limit: ten jobs of 200 KB each (2 MB, over the default 1 MiB)
// are all submitted, in several commits, not refused whole.
func TestSubmitFileSplitsLargeJobsByTheirSize(t *testing.T) {
	s := startBatchServer(t, 0)
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	var b strings.Builder
	big := strings.Repeat("a", 200_000)
	for range 10 {
		fmt.Fprintf(&b, `{"kind":"big","payload":%q,"batch":"large"}`+"\n", big)
	}
	writeFile(t, file, b.String())
	code, out, errOut := runInProcess(t, "submit", "--file", file, "--server", s.URL)
	if ids := strings.Fields(out); code != 0 || len(ids) != 10 {
		t.Fatalf("submit --file of ten 200 KB jobs = exit %d, %d ids (%s); want 0 and ten ids", code, len(ids), errOut)
	}
	if got := chunkEnd([][]byte{make([]byte, 1<<20)}, 0, 1000); got != 1 {
		t.Errorf("a job over the chunk's bytes went in a call of %d jobs; want it alone", got)
	}
}

// A batch of more jobs than one WaitJobs takes, or as many ids, is waited
// for 1,000 at a time: every job, in submission order.
func TestWaitForMoreJobsThanOneWaitJobsTakes(t *testing.T) {
	s := startBatchServer(t, 0)
	ctx := context.Background()
	var ids []string
	for _, n := range []int{1000, 5} {
		reqs := make([]*jobwatchv1.SubmitJobRequest, n)
		for i := range reqs {
			reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: "many", Batch: "big"}
		}
		jobs, err := s.Client.SubmitJobs(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			ids = append(ids, j.GetId())
		}
	}
	if _, err := s.Client.CancelJobs(ctx, &jobwatchv1.JobFilter{Batch: "big"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--batch", "big"}, ids} {
		code, out, errOut := runInProcess(t, append([]string{"wait", "--server", s.URL}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != exitCancelled || len(lines) != len(ids) {
			t.Fatalf("wait %.40v = exit %d, %d lines (%s); want exit %d and %d lines", args, code, len(lines), errOut, exitCancelled, len(ids))
		}
		if !strings.HasPrefix(lines[0], ids[0]) || !strings.HasPrefix(lines[len(lines)-1], ids[len(ids)-1]) {
			t.Errorf("wait %.40v printed %q first and %q last; want the jobs in submission order", args, lines[0], lines[len(lines)-1])
		}
	}
	code, out, errOut := runInProcess(t, "wait", "--server", s.URL, "--batch", "big", "--any")
	if code != exitCancelled || out == "" {
		t.Errorf("wait --batch big --any = exit %d, %q (%s); want the first ended", code, out, errOut)
	}
}

// A server restarted on its database restored from an older copy has the
// batch's jobs at lower versions than watch --batch saw: the stream's
// resume starts over (started_over), and watch forgets what it held and
// lists the batch again, rather than keeping a job ended that the server
// has queued and exiting before it runs.
func TestWatchBatchStartsOverOnADatabaseRestoredFromAnOlderCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "jobwatch.db")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	serve := func() *exec.Cmd {
		_, cmd, _ := startServe(t, ctx, "--db", db, "--addr", addr)
		return cmd
	}
	first := serve()
	c := client.New("http://" + addr)
	var ids []string
	for range 2 {
		j, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "restored", Batch: "nightly"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.GetId())
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	live, err := sql.Open("sqlite3", db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = live.ExecContext(ctx, "VACUUM INTO ?", backup)
	live.Close()
	if err != nil {
		t.Fatalf("back up: %v", err)
	}
	for range 10 { // the live database's changes run ahead of the copy's
		if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "other"}); err != nil {
			t.Fatal(err)
		}
	}

	watch := jobwatchCmd(ctx, "watch", "--batch", "nightly", "--progress", "lines", "--server", "http://"+addr)
	var out lockedBuffer
	watch.Stdout, watch.Stderr = &out, &out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { watch.Wait(); close(exited) }()
	waitFor(t, "watch to print both jobs", func() bool {
		return strings.Contains(out.String(), ids[0]+" QUEUED") && strings.Contains(out.String(), ids[1]+" QUEUED")
	})
	if _, err := c.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch to print the cancel", func() bool { return strings.Contains(out.String(), ids[0]+" CANCELLED") })

	first.Process.Signal(syscall.SIGTERM)
	first.Wait()
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if err := os.Rename(backup, db); err != nil {
		t.Fatal(err)
	}
	mark := len(out.String())
	serve() // the copy, where both jobs are queued
	waitFor(t, "watch to print the first job queued again", func() bool { return strings.Contains(out.String()[mark:], ids[0]+" QUEUED") })

	if _, err := c.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch to print the second job's cancel", func() bool { return strings.Contains(out.String()[mark:], ids[1]+" CANCELLED") })
	select {
	case <-exited:
		t.Fatalf("watch --batch exited while the restored server had %s queued:\n%s", ids[0], out.String())
	default:
	}
	if _, err := c.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatalf("watch --batch did not exit once both jobs had ended:\n%s", out.String())
	}
	if code := watch.ProcessState.ExitCode(); code != exitCancelled || !strings.HasSuffix(out.String(), "batch nightly: 2 jobs, 2 ended: 2 cancelled\n") {
		t.Fatalf("watch --batch = exit %d; want %d and the batch's counts at the end:\n%s", code, exitCancelled, out.String())
	}
}
