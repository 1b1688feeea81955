package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// jobwatch submit --priority sets the job's priority, get shows it,
// claims take the most urgent first; a priority out of range is the
// server's refusal naming the field and the range, one that is no number
// a usage error.
func TestSubmitWithAPriorityAndGetShowsIt(t *testing.T) {
	s := startCLIServer(t, time.Second)
	submit := func(args ...string) string {
		t.Helper()
		code, out, errOut := runInProcess(t, append([]string{"submit", "report", "--server", s.URL}, args...)...)
		if code != 0 {
			t.Fatalf("submit %v = exit %d, %q", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	later := submit("--priority", "7")
	unset := submit()
	urgent := submit("--priority", "1")
	code, out, _ := runInProcess(t, "get", urgent, "--server", s.URL)
	if code != 0 || !regexp.MustCompile(`(?m)^priority: +1 \(0 most urgent, 9 least\)$`).MatchString(out) {
		t.Errorf("get = exit %d, %q; want a priority line of 1", code, out)
	}
	if code, out, _ := runInProcess(t, "get", unset, "--server", s.URL, "--json"); code != 0 || strings.Contains(out, `"priority"`) {
		t.Errorf("get --json of a job of priority 0 = exit %d, %q; want priority left out, as protojson leaves zero out", code, out)
	}
	for i, want := range []string{unset, urgent, later} {
		if got := s.claim(t, "report"); got.ID != want {
			t.Errorf("claim %d took %s (priority %d), want %s", i, got.ID, got.Priority, want)
		}
	}

	// Out of range or not a number: a usage error (2) naming the flag
	// and the range, as for any bad flag.
	for _, bad := range []string{"12", "-1", "high"} {
		code, _, errOut := runInProcess(t, "submit", "report", "--server", s.URL, "--priority", bad)
		if code != 2 || !strings.Contains(errOut, "-priority: must be a whole number from 0 to 9") {
			t.Errorf("submit --priority %s = exit %d, %q; want a usage error (2) naming the flag and 0 to 9", bad, code, errOut)
		}
	}
}
