package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// logCases are the shared cases of jobs' logs.
var logCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"appended lines are numbered per job, stamped with the attempt, and read back a page at a time", testAppendAndReadLogs},
	{"an append under a lease that does not hold changes nothing", testAppendLogsStaleLease},
	{"past the bound the oldest lines are dropped, never the newest, and reads say where the kept lines start", testLogsBounded},
	{"a job's lines go with the job", testLogsGoWithTheJob},
	{"the same lines sent again, their answer lost, are appended once", testAppendSentAgain},
}

func logLines(prefix string, n int) []jobtype.LogLine {
	lines := make([]jobtype.LogLine, n)
	for i := range lines {
		lines[i] = jobtype.LogLine{Time: at(i), Stream: jobtype.LogStream(i % 3), Text: fmt.Sprintf("%s %d", prefix, i+1)}
	}
	return lines
}

func bound(n int64) func(string) int64 { return func(string) int64 { return n } }

func appendLogs(t *testing.T, s store.Store, id, lease string, lines []jobtype.LogLine, max int64) store.LogAppended {
	t.Helper()
	res, err := s.AppendLogs(t.Context(), store.LogAppend{JobID: id, LeaseID: lease, Lines: lines, MaxBytes: bound(max)})
	if err != nil {
		t.Fatalf("append %d lines to %s: %v", len(lines), id, err)
	}
	return res
}

func testAppendAndReadLogs(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := running("j", "default", 0)
	create(t, s, j)
	other := running("k", "default", 0)
	create(t, s, other)

	res := appendLogs(t, s, "j", j.LeaseID, logLines("a", 3), 1<<20)
	if !res.Held || res.LastSeq != 3 || res.Job.ID != "j" {
		t.Fatalf("first append: held %v, last seq %d; want held, 3", res.Held, res.LastSeq)
	}
	appendLogs(t, s, "k", other.LeaseID, logLines("other", 2), 1<<20)
	if res := appendLogs(t, s, "j", j.LeaseID, logLines("b", 2), 1<<20); res.LastSeq != 5 {
		t.Fatalf("second append: last seq %d, want 5", res.LastSeq)
	}

	p, err := s.JobLogs(ctx, "j", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a 1", "a 2", "a 3", "b 1", "b 2"}
	if len(p.Lines) != len(want) || p.FirstSeq != 1 || p.LastSeq != 5 || p.Job.State != jobtype.Running {
		t.Fatalf("read: %d lines, first %d, last %d, job %s; want 5 lines, 1, 5, RUNNING", len(p.Lines), p.FirstSeq, p.LastSeq, p.Job.State)
	}
	for i, l := range p.Lines {
		if l.Seq != int64(i+1) || l.Text != want[i] || l.Attempt != j.Attempt {
			t.Errorf("line %d: seq %d %q attempt %d; want seq %d %q attempt %d", i, l.Seq, l.Text, l.Attempt, i+1, want[i], j.Attempt)
		}
	}
	if l := p.Lines[1]; !l.Time.Equal(at(1)) || l.Stream != jobtype.LogStdout {
		t.Errorf("line 2: time %v stream %d; want %v stream %d", l.Time, l.Stream, at(1), jobtype.LogStdout)
	}
	p, err = s.JobLogs(ctx, "j", 3, 1)
	if err != nil || len(p.Lines) != 1 || p.Lines[0].Seq != 4 {
		t.Errorf("one line after 3: %v, %v; want line 4", p.Lines, err)
	}
	if p, err := s.JobLogs(ctx, "j", 5, 10); err != nil || len(p.Lines) != 0 || p.LastSeq != 5 {
		t.Errorf("after the last: %v, last %d, %v; want none, 5", p.Lines, p.LastSeq, err)
	}
	if p, err := s.JobLogs(ctx, "never", 0, 10); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("logs of an unknown job: %v, %v; want ErrNotFound", p.Lines, err)
	}
	fresh := newJob("fresh", at(0))
	create(t, s, fresh)
	if p, err := s.JobLogs(ctx, "fresh", 0, 10); err != nil || len(p.Lines) != 0 || p.LastSeq != 0 || p.FirstSeq != 1 {
		t.Errorf("logs of a job without any: %v first %d last %d, %v; want none, 1, 0", p.Lines, p.FirstSeq, p.LastSeq, err)
	}
}

func testAppendLogsStaleLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := running("j", "default", 0)
	create(t, s, j)
	appendLogs(t, s, "j", j.LeaseID, logLines("a", 1), 1<<20)
	res := appendLogs(t, s, "j", "someone-else", logLines("b", 2), 1<<20)
	if res.Held || res.Job.LeaseID != j.LeaseID || res.LastSeq != 1 {
		t.Errorf("append under another lease: held %v, job lease %q, last %d; want not held, %q, 1", res.Held, res.Job.LeaseID, res.LastSeq, j.LeaseID)
	}
	done := newJob("done", at(0))
	done.State = jobtype.Succeeded
	create(t, s, done)
	if res := appendLogs(t, s, "done", "", logLines("c", 1), 1<<20); res.Held || res.Job.State != jobtype.Succeeded {
		t.Errorf("append to an ended job: held %v state %s; want not held", res.Held, res.Job.State)
	}
	if _, err := s.AppendLogs(ctx, store.LogAppend{JobID: "never", LeaseID: "x", Lines: logLines("d", 1), MaxBytes: bound(1 << 20)}); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("append to an unknown job: %v, want ErrNotFound", err)
	}
	if p, _ := s.JobLogs(ctx, "j", 0, 10); len(p.Lines) != 1 {
		t.Errorf("after the refused appends: %d lines, want 1", len(p.Lines))
	}
}

func testLogsBounded(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := running("j", "default", 0)
	create(t, s, j)
	line := strings.Repeat("x", 84) // 100 bytes with its overhead
	lines := make([]jobtype.LogLine, 10)
	for i := range lines {
		lines[i] = jobtype.LogLine{Time: at(i), Text: line}
	}
	appendLogs(t, s, "j", j.LeaseID, lines, 1000) // exactly at the bound
	if p, _ := s.JobLogs(ctx, "j", 0, 100); len(p.Lines) != 10 || p.FirstSeq != 1 {
		t.Fatalf("at the bound: %d lines, first %d; want all 10, 1", len(p.Lines), p.FirstSeq)
	}
	appendLogs(t, s, "j", j.LeaseID, lines[:3], 1000)
	p, err := s.JobLogs(ctx, "j", 0, 100)
	if err != nil || len(p.Lines) != 10 || p.FirstSeq != 4 || p.Lines[0].Seq != 4 || p.LastSeq != 13 {
		t.Fatalf("past the bound: %d lines from %d (first %d, last %d), %v; want 10 from 4 to 13", len(p.Lines), p.Lines[0].Seq, p.FirstSeq, p.LastSeq, err)
	}
	huge := strings.Repeat("y", 3000)
	appendLogs(t, s, "j", j.LeaseID, []jobtype.LogLine{{Time: at(20), Text: huge}}, 1000)
	p, _ = s.JobLogs(ctx, "j", 0, 100)
	if len(p.Lines) != 1 || p.Lines[0].Seq != 14 || p.Lines[0].Text != huge || p.FirstSeq != 14 {
		t.Errorf("a line larger than the bound: %d lines, first %d; want only it, 14", len(p.Lines), p.FirstSeq)
	}
}

func testLogsGoWithTheJob(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := running("j", "default", 0)
	create(t, s, j)
	appendLogs(t, s, "j", j.LeaseID, logLines("a", 5), 1<<20)
	// End it and delete it, as an operator would.
	res, err := s.WriteLeases(ctx, []store.LeaseWrite{{Op: store.Complete, JobID: "j", LeaseID: j.LeaseID}}, leaseRules)
	if err != nil || !res[0].Held {
		t.Fatalf("complete: %v", err)
	}
	if _, deleted, err := s.DeleteJob(ctx, "j"); err != nil || !deleted {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.JobLogs(ctx, "j", 0, 10); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("logs of a deleted job: %v, want ErrNotFound", err)
	}
	// A job of the same id again (ids are never reused by the engine,
	// but the store must not resurrect lines): no lines.
	again := running("j", "default", 0)
	create(t, s, again)
	if p, err := s.JobLogs(ctx, "j", 0, 10); err != nil || len(p.Lines) != 0 || p.LastSeq != 0 {
		t.Errorf("a new job of a deleted one's id: %d lines, last %d, %v; want none", len(p.Lines), p.LastSeq, err)
	}
}

// An append whose lines carry their worker's times, sent again because
// its answer was lost, is answered as held with the log's last seq and
// adds nothing; the same texts at other times, an append without times
// (Resendable false), and the same lines after the log moved on are new.
func testAppendSentAgain(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := running("j", "default", 0)
	create(t, s, j)
	send := func(lines []jobtype.LogLine, resendable bool) store.LogAppended {
		t.Helper()
		res, err := s.AppendLogs(ctx, store.LogAppend{JobID: "j", LeaseID: j.LeaseID, Lines: lines, Resendable: resendable, MaxBytes: bound(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a := logLines("a", 3)
	if res := send(a, true); !res.Held || res.Repeated || res.LastSeq != 3 {
		t.Fatalf("first append: held %v, repeated %v, last %d; want held, 3", res.Held, res.Repeated, res.LastSeq)
	}
	if res := send(a, true); !res.Held || !res.Repeated || res.LastSeq != 3 {
		t.Fatalf("the same sent again: held %v, repeated %v, last %d; want held, repeated, 3", res.Held, res.Repeated, res.LastSeq)
	}
	later := logLines("a", 3)
	for i := range later {
		later[i].Time = later[i].Time.Add(time.Second)
	}
	if res := send(later, true); res.Repeated || res.LastSeq != 6 {
		t.Fatalf("the same texts at other times: repeated %v, last %d; want appended, 6", res.Repeated, res.LastSeq)
	}
	if res := send(later, false); res.Repeated || res.LastSeq != 9 {
		t.Fatalf("an append not resendable: repeated %v, last %d; want appended, 9", res.Repeated, res.LastSeq)
	}
	one := logLines("b", 1)
	send(one, true)
	send(logLines("c", 1), true)
	if res := send(one, true); res.Repeated || res.LastSeq != 12 {
		t.Fatalf("an older append after the log moved on: repeated %v, last %d; want appended, 12", res.Repeated, res.LastSeq)
	}
	if res := send(logLines("d", 20), true); res.Repeated || res.LastSeq != 32 {
		t.Fatalf("more lines than the log's last ones: repeated %v, last %d; want appended, 32", res.Repeated, res.LastSeq)
	}
	if p, err := s.JobLogs(ctx, "j", 0, 100); err != nil || len(p.Lines) != 32 {
		t.Fatalf("the log holds %d lines (%v), want 32", len(p.Lines), err)
	}

	// An append larger than its queue's bound keeps only its newest
	// lines; sent again, it is still told by them.
	k := running("k", "default", 0)
	create(t, s, k)
	big := logLines("e", 50)
	kept := big[len(big)-1].Size() * 10 // about ten lines
	appendBig := func() store.LogAppended {
		t.Helper()
		res, err := s.AppendLogs(ctx, store.LogAppend{JobID: "k", LeaseID: k.LeaseID, Lines: big, Resendable: true, MaxBytes: bound(kept)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := appendBig(); res.Repeated || res.LastSeq != 50 {
		t.Fatalf("an append past the bound: repeated %v, last %d; want appended, 50", res.Repeated, res.LastSeq)
	}
	if res := appendBig(); !res.Held || !res.Repeated || res.LastSeq != 50 {
		t.Fatalf("it sent again: held %v, repeated %v, last %d; want held, repeated, 50", res.Held, res.Repeated, res.LastSeq)
	}
}

// BenchAppendLogs measures appends of 10 lines to one running job's log,
// as the workers send them: each line with its time (Resendable, so the
// store looks for the same append sent again) and, beside it, without.
// A backend's benchmark calls it with a fresh store for each.
func BenchAppendLogs(b *testing.B, open func(b *testing.B) store.Store) {
	for _, resendable := range []bool{false, true} {
		b.Run(fmt.Sprintf("resendable=%v", resendable), func(b *testing.B) {
			s := open(b)
			j := running("j", "default", 0)
			if _, err := s.CreateJob(b.Context(), j); err != nil {
				b.Fatal(err)
			}
			lines := logLines("bench", 10)
			b.ResetTimer()
			for i := range b.N {
				for k := range lines {
					lines[k].Time = at(i*10 + k)
				}
				res, err := s.AppendLogs(b.Context(), store.LogAppend{JobID: "j", LeaseID: j.LeaseID, Lines: lines, Resendable: resendable, MaxBytes: bound(1 << 30)})
				if err != nil || !res.Held || res.Repeated {
					b.Fatalf("append %d: held %v, repeated %v, %v", i, res.Held, res.Repeated, err)
				}
			}
		})
	}
}
