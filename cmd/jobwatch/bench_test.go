package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
)

// The bench lives in internal/bench, whose tests measure every figure;
// these check what the command line adds: a bench started as "jobwatch
// bench" measures this binary and the floor it serves, and the bench's
// mistakes are usage errors like every other command's.

// TestBenchMeasuresThisBinary: without --binary, the bench starts its
// servers (serve, and "bench --serve-floor" for the floor) from the
// binary it runs in.
func TestBenchMeasuresThisBinary(t *testing.T) {
	t.Setenv("JOBWATCH_TEST_RUN_MAIN", "1") // the servers bench starts from this binary run main
	var out, errOut bytes.Buffer
	args := []string{"bench", "--json", "--scenarios", "wakeup", "--jobs", "2"}
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, &errOut)
	}
	var res struct {
		Servers []string `json:"servers"`
		Results map[string]struct {
			Wakeup *struct {
				Jobs int `json:"jobs"`
			} `json:"wakeup"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if want := []string{"floor", "jobwatch"}; !slices.Equal(res.Servers, want) {
		t.Fatalf("servers = %q, want %q", res.Servers, want)
	}
	for _, name := range res.Servers {
		if w := res.Results[name].Wakeup; w == nil || w.Jobs != 2 {
			t.Errorf("%s: wakeup = %+v, want 2 jobs measured", name, w)
		}
	}
}

// TestBenchMistakesAreUsageErrors: a mistyped flag, a typo in a list and
// a --postgres that is not a URL exit 2 with what was wrong, said once;
// a typo is not a run of nothing.
func TestBenchMistakesAreUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--bogus"}, "jobwatch: bench: flag provided but not defined: -bogus\nRun \"jobwatch bench -h\" for its flags.\n"},
		{[]string{"bench", "--scenarios", "fanout,parkd"}, `jobwatch: --scenarios: unknown scenario "parkd"`},
		{[]string{"bench", "--postgres", "host=127.0.0.1 user=postgres"}, "jobwatch: --postgres must be a postgres:// or postgresql:// URL\n"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var errOut bytes.Buffer
			if code := run(context.Background(), tt.args, io.Discard, &errOut); code != 2 {
				t.Fatalf("exit %d, want 2:\n%s", code, &errOut)
			}
			if !strings.HasPrefix(errOut.String(), tt.want) || strings.Count(errOut.String(), "jobwatch:") != 1 {
				t.Errorf("stderr %q; want it to begin %q, said once", &errOut, tt.want)
			}
		})
	}
}
