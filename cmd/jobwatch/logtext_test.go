package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// What a job printed reaches the reader's terminal as text and colours
// only: nothing that sets its title, clears it, moves its cursor or hides
// what came before a carriage return.
func TestPrintableKeepsTextAndColoursOnly(t *testing.T) {
	for _, tc := range []struct {
		name, in, colour, plain string
	}{
		{"plain text", "batch 3 of 7\tok", "batch 3 of 7\tok", "batch 3 of 7\tok"},
		{"a colour", "\x1b[31mfailed\x1b[0m: disk", "\x1b[31mfailed\x1b[0m: disk\x1b[0m", "failed: disk"},
		{"a colour left on", "\x1b[1;32mgreen", "\x1b[1;32mgreen\x1b[0m", "green"},
		{"conceal dropped, so the text it would hide shows", "\x1b[8mhidden\x1b[0m shown", "hidden\x1b[0m shown\x1b[0m", "hidden shown"},
		{"conceal among colours, its reset kept", "\x1b[1;8;31mred\x1b[28m", "\x1b[1;31mred\x1b[28m\x1b[0m", "red"},
		{"conceal written 08", "\x1b[08mx", "x", "x"},
		{"a 256-colour or RGB colour's 8 is an argument, not conceal", "\x1b[38;5;8mgrey\x1b[48;2;8;8;8mbg", "\x1b[38;5;8mgrey\x1b[48;2;8;8;8mbg\x1b[0m", "greybg"},
		{"a colon form is one parameter", "\x1b[38:5:8mgrey", "\x1b[38:5:8mgrey\x1b[0m", "grey"},
		{"a private m sequence is not a colour", "\x1b[>4;2mkeys", "keys", "keys"},
		{"a window title", "title \x1b]0;pwned\x07 end", "title  end", "title  end"},
		{"a title ended by ST", "a\x1b]2;x\x1b\\b", "ab", "ab"},
		{"a clear and a cursor move", "\x1b[2J\x1b[Hclean", "clean", "clean"},
		{"a carriage return", "cr overwrite\rHIDDEN", "cr overwriteHIDDEN", "cr overwriteHIDDEN"},
		{"a bell, a backspace and DEL", "a\x07b\x08c\x7fd", "abcd", "abcd"},
		{"a C1 CSI", "x\u009b31my", "x31my", "x31my"},
		{"a lone 0x9b byte, an 8-bit CSI", "raw9b \x9b2J after", "raw9b \ufffd2J after", "raw9b \ufffd2J after"},
		{"invalid UTF-8 as the log stores it, a run as one U+FFFD", "a\xff\xfeb\xc3", "a\ufffdb\ufffd", "a\ufffdb\ufffd"},
		{"a NUL as the log stores it", "a\x00b", "a\ufffdb", "a\ufffdb"},
		{"an escape cut short", "end\x1b[", "end", "end"},
		{"UTF-8 kept", "café → ok", "café → ok", "café → ok"},
		{"a right-to-left override", "report\u202Efdp.exe\u202C done", "reportfdp.exe done", "reportfdp.exe done"},
		{"isolates, marks, separators and a BOM", "\ufeffa\u2066b\u2069\u200fc\u2028d", "abcd", "abcd"},
		{"right-to-left text kept", "שלום", "שלום", "שלום"},
	} {
		if got := printable(tc.in, true); got != tc.colour {
			t.Errorf("%s, for a terminal: %q, want %q", tc.name, got, tc.colour)
		}
		if got := printable(tc.in, false); got != tc.plain {
			t.Errorf("%s, piped: %q, want %q", tc.name, got, tc.plain)
		}
	}
}

// The one-line summary that wait and watch print quotes a job's step and
// error as printable text: what a command printed into them reaches the
// reader without its escapes, neither run nor shown escaped.
func TestSummaryPrintsAStepAndAnErrorAsText(t *testing.T) {
	j := &jobwatchv1.Job{Id: "j_1", State: jobwatchv1.JobState_JOB_STATE_FAILED, Percent: 10,
		Step:  "\x1b[31mred step\x1b]0;TITLE\x07 x\rY",
		Error: &jobwatchv1.JobError{Type: "Bad\x1b[2J", Message: "\x1b[32mgreen msg\x1b[0m"}}
	got := summary(j)
	if want := `j_1 FAILED 10% "red step xY" error=Bad "green msg"`; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}

// A history entry of a job that ended before it ever ran (cancelled
// while queued) says so rather than naming an attempt 0.
func TestHistoryLineOfAJobThatNeverRan(t *testing.T) {
	a := &jobwatchv1.JobAttempt{State: jobwatchv1.JobState_JOB_STATE_CANCELLED, By: "ops (admin)"}
	if got := historyLine(a); !strings.HasPrefix(got, "before any run: CANCELLED") || !strings.HasSuffix(got, " by=ops (admin)") {
		t.Errorf("historyLine = %q, want it to start \"before any run: CANCELLED\" and name who", got)
	}
	a.Attempt = 2
	if got := historyLine(a); !strings.HasPrefix(got, "#2 CANCELLED") {
		t.Errorf("historyLine = %q, want it to start \"#2 CANCELLED\"", got)
	}
}

// An attempt that failed and was retried reads as such, not as the
// QUEUED state the job went back to.
func TestHistoryLineOfARetriedAttempt(t *testing.T) {
	a := &jobwatchv1.JobAttempt{Attempt: 1, State: jobwatchv1.JobState_JOB_STATE_QUEUED,
		Error: &jobwatchv1.JobError{Type: "Timeout", Message: "attempt ran longer than the queue's timeout of 2s"}}
	if got := historyLine(a); !strings.HasPrefix(got, "#1 ended, retried (QUEUED)") || !strings.Contains(got, "error=Timeout") {
		t.Errorf("historyLine = %q, want it to start \"#1 ended, retried (QUEUED)\" and give the error", got)
	}
}

// A command the shell could not find or run says so in the job's error,
// not only in its log.
func TestAnExitStatusOfTheShellsOwnSaysWhatItMeans(t *testing.T) {
	h := execHandler("no-such-command-jobwatch-test", commandEnv(os.Environ(), nil), textOutput(io.Discard), time.Second, nil)
	_, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(int, string) {})
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 127 || !strings.Contains(err.Error(), "found no such command") {
		t.Errorf("a command not found ended with %v; want exit status 127 saying the shell found no such command", err)
	}
}

// A job waiting for its next attempt reads as such: its error is its
// last attempt's, and it says when it is ready.
func TestSummaryOfAJobWaitingForItsNextAttempt(t *testing.T) {
	j := &jobwatchv1.Job{Id: "j_1", State: jobwatchv1.JobState_JOB_STATE_QUEUED,
		Error: &jobwatchv1.JobError{Type: "Timeout"}, RunAt: timestamppb.New(time.Now().Add(29 * time.Second))}
	if got := summary(j); !strings.Contains(got, "last_error=Timeout") || !strings.Contains(got, " ready at ") || !strings.Contains(got, "not claimed before") {
		t.Errorf("summary = %q, want last_error=Timeout and when it is ready", got)
	}
	j.State = jobwatchv1.JobState_JOB_STATE_FAILED
	if got := summary(j); !strings.Contains(got, " error=Timeout") || strings.Contains(got, "ready at") {
		t.Errorf("summary of the FAILED job = %q, want error=Timeout and no ready time", got)
	}
	// Cancelled because a job it runs after failed: that is why it ended.
	j.State = jobwatchv1.JobState_JOB_STATE_CANCELLED
	if got := summary(j); !strings.Contains(got, " error=Timeout") {
		t.Errorf("summary of a job cancelled with its error = %q, want error=Timeout", got)
	}
	// Cancelled after a failed attempt: the cancel ended it, not the error.
	j.Attempts = []*jobwatchv1.JobAttempt{{Attempt: 1, State: jobwatchv1.JobState_JOB_STATE_FAILED, Error: &jobwatchv1.JobError{Type: "Timeout"}}}
	if got := summary(j); !strings.Contains(got, " last_error=Timeout") {
		t.Errorf("summary of the CANCELLED job = %q, want last_error=Timeout", got)
	}
	var b strings.Builder
	if err := printJob(&b, j, false); err != nil || !strings.Contains(b.String(), "last error:") {
		t.Errorf("printJob of the CANCELLED job = %q, %v; want its error labelled \"last error\"", b.String(), err)
	}
	// Cancelled because a job it runs after failed, retried to wait
	// again, then cancelled by an operator: the operator's cancel ended
	// it, and the dependency's error is from before the retry.
	j = &jobwatchv1.Job{Id: "j_2", State: jobwatchv1.JobState_JOB_STATE_CANCELLED,
		Error: &jobwatchv1.JobError{Type: "DependencyFailed", Message: "job j_1, which it runs after, ended CANCELLED"},
		Attempts: []*jobwatchv1.JobAttempt{
			{State: jobwatchv1.JobState_JOB_STATE_WAITING, By: "anonymous"},
			{State: jobwatchv1.JobState_JOB_STATE_CANCELLED, By: "anonymous"},
		}}
	if got := summary(j); !strings.Contains(got, " last_error=DependencyFailed") {
		t.Errorf("summary of the job an operator cancelled = %q, want last_error=DependencyFailed", got)
	}
}
