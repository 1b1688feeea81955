package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"testing"
)

// TestBenchPrintsEveryObserverAndTheParkedCost runs a tiny bench: the
// numbers are the machine's, but every row must be there, measured.
func TestBenchPrintsEveryObserverAndTheParkedCost(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--jobs", "3", "--parked", "20"}, &out, io.Discard); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, &out)
	}
	for _, row := range []string{
		`CompleteJob reply\s+3\s`,
		`WaitJob\s+3\s`,
		`WatchJob\s+3\s`,
		`GetJob every 10ms\s+3\s`,
		`20 waits parked at once`,
		`\d+(\.\d+)? KiB`,
	} {
		if !regexp.MustCompile(row).Match(out.Bytes()) {
			t.Errorf("bench output lacks %q:\n%s", row, &out)
		}
	}
}
