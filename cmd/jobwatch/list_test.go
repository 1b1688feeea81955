package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

func TestListShowsTheDefaultTenantUnlessToldAnother(t *testing.T) {
	s := startCLIServer(t, time.Second)
	mine := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report"})
	theirs := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report", Tenant: "acme"})
	code, out, errOut := runInProcess(t, "list", "--server", s.URL)
	if code != 0 || !strings.Contains(out, mine) || strings.Contains(out, theirs) {
		t.Fatalf("list = exit %d:\n%s%s\nwant the default tenant's job %s only", code, out, errOut, mine)
	}
	code, out, _ = runInProcess(t, "list", "--server", s.URL, "--tenant", "acme")
	if code != 0 || strings.Contains(out, mine) || !strings.Contains(out, theirs) {
		t.Fatalf("list --tenant acme = exit %d:\n%s\nwant acme's job %s only", code, out, theirs)
	}
	// '*': every tenant's, newest first, each with its tenant.
	code, out, errOut = runInProcess(t, "list", "--server", s.URL, "--tenant", "*")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "TENANT ") ||
		!strings.HasPrefix(lines[1], "acme ") || !strings.Contains(lines[1], theirs) ||
		!strings.HasPrefix(lines[2], "default ") || !strings.Contains(lines[2], mine) {
		t.Fatalf("list --tenant '*' = exit %d:\n%s%s\nwant both jobs, newest first, each with its tenant", code, out, errOut)
	}
}

func TestListFetchesPayloadsOnlyWithFull(t *testing.T) {
	s := startCLIServer(t, time.Second)
	ctx := context.Background()
	// Enough large jobs that --full takes several pages of the server's
	// byte bound.
	pad := strings.Repeat("x", 200_000)
	for i := range 12 {
		if _, err := s.Engine.Submit(ctx, jobs.SubmitRequest{Kind: "resize", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))}); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(out string) []map[string]any {
		t.Helper()
		var js []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var j map[string]any
			if err := json.Unmarshal([]byte(line), &j); err != nil {
				t.Fatalf("line %.80q: %v", line, err)
			}
			js = append(js, j)
		}
		return js
	}

	code, out, errOut := runInProcess(t, "list", "--server", s.URL, "--json")
	if code != 0 {
		t.Fatalf("list --json = exit %d: %s", code, errOut)
	}
	for _, j := range lines(out) {
		if _, ok := j["payload"]; ok {
			t.Fatalf("list --json printed a payload: %.200v", j)
		}
	}
	if len(out) > 12*1024 {
		t.Errorf("list --json of 12 summaries printed %d bytes", len(out))
	}

	code, out, errOut = runInProcess(t, "list", "--server", s.URL, "--json", "--full", "--limit", "10")
	if code != 0 {
		t.Fatalf("list --json --full = exit %d: %s", code, errOut)
	}
	got := lines(out)
	if len(got) != 10 {
		t.Fatalf("list --json --full --limit 10 printed %d jobs, want 10 across pages", len(got))
	}
	for i, j := range got {
		p, _ := j["payload"].(map[string]any)
		if n, _ := p["n"].(float64); int(n) != 11-i || p["pad"] != pad {
			t.Fatalf("job %d: payload n=%v, want %d with its pad: newest first, none skipped", i, p["n"], 11-i)
		}
	}

	if code, _, errOut := runInProcess(t, "list", "--server", s.URL, "--full"); code != 2 || !strings.Contains(errOut, "--json") {
		t.Errorf("list --full without --json = exit %d, %q; want a usage error naming --json", code, errOut)
	}
}

// A job stored before the server refused deep payloads cannot be decoded
// whole; get, wait and watch show the rest of it, say what is missing,
// and wait and watch still exit with how it ended.
func TestCommandsShowAJobWhosePayloadCannotBeDecoded(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	ctx := context.Background()
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "tree", Hold: true})
	st, err := sqlite.Open(s.DB)
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000) // past protobuf's decoding limit
	if _, err := st.UpdateJob(ctx, id, func(j *jobtype.Job) error {
		j.Payload = []byte(deep)
		j.Version++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := s.Engine.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	j := s.claim(t, "tree")
	if _, err := s.Engine.Fail(ctx, id, j.LeaseID, jobtype.JobError{Type: "UndecodableJob", Message: "too deep"}, false); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"get", id}, 0},
		{[]string{"wait", id}, exitFailed},
		{[]string{"watch", "--progress", "lines", id}, exitFailed},
	} {
		code, out, errOut := runInProcess(t, append(tt.args, "--server", s.URL)...)
		if code != tt.code || !strings.Contains(out, id) || !strings.Contains(out, "FAILED") || !strings.Contains(out, "UndecodableJob") ||
			!strings.Contains(errOut, "without its payload and result") {
			t.Errorf("jobwatch %s = exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, the job FAILED with its error, and a note on what is missing",
				tt.args[0], code, out, errOut, tt.code)
		}
	}
}

// A job failed with a 4,000-character error does not widen the table:
// its step column is cut at 80 characters, with an ellipsis, on its row,
// and the other rows are not padded to it.
func TestListCutsALongErrorInItsTable(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "long.error"})
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "quiet"})
	j := s.claim(t, "long.error")
	if _, err := s.Engine.Fail(context.Background(), id, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: strings.Repeat("the warehouse said no ", 180)}, false); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, "list", "--server", s.URL)
	if code != 0 {
		t.Fatalf("list = exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if n := len([]rune(line)); n > 250 {
			t.Fatalf("a line of %d characters:\n%s", n, out)
		}
	}
	if !strings.Contains(out, "Upstream the warehouse said no") || !strings.Contains(out, "…") {
		t.Fatalf("the failed job's step is not its error, cut:\n%s", out)
	}
}

// --limit above a page (500) lists that many, page by page, rather than
// stopping at one page.
func TestListTakesALimitBeyondAPage(t *testing.T) {
	s := startCLIServer(t, time.Second)
	s.submitBatch(t, "many", "a", 1000)
	s.submitBatch(t, "many", "b", 1000)
	code, out, errOut := runInProcess(t, "list", "--server", s.URL, "--limit", "1200")
	if rows := strings.Count(out, "\n") - 1; code != 0 || rows != 1200 {
		t.Fatalf("list --limit 1200 of 2,000 jobs = exit %d, %d rows (%s); want 1200", code, rows, errOut)
	}
}
