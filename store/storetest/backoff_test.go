package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// Every backend computes a retry's RunAt from store.Backoff, and the
// suite's expectations come from it too, so its edges are pinned here.
func TestBackoffStepDoublesFromInitialUpToMax(t *testing.T) {
	const maxDuration = time.Duration(math.MaxInt64)
	tests := []struct {
		name    string
		backoff store.Backoff
		attempt int32
		want    time.Duration
	}{
		{"the first attempt waits the initial backoff", store.Backoff{Initial: time.Second, Max: time.Minute}, 1, time.Second},
		{"the second attempt waits twice that", store.Backoff{Initial: time.Second, Max: time.Minute}, 2, 2 * time.Second},
		{"the sixth attempt waits 32 times that", store.Backoff{Initial: time.Second, Max: time.Minute}, 6, 32 * time.Second},
		{"the seventh attempt is capped at the maximum", store.Backoff{Initial: time.Second, Max: time.Minute}, 7, time.Minute},
		{"attempt 0 waits the initial backoff", store.Backoff{Initial: time.Second, Max: time.Minute}, 0, time.Second},
		{"a huge attempt waits the maximum", store.Backoff{Initial: time.Second, Max: time.Minute}, math.MaxInt32, time.Minute},
		{"an initial backoff above the maximum is capped", store.Backoff{Initial: time.Hour, Max: time.Minute}, 1, time.Minute},
		{"times are whole microseconds", store.Backoff{Initial: 1500 * time.Nanosecond, Max: time.Second}, 2, 2 * time.Microsecond},
		{"a maximum near the largest duration does not overflow", store.Backoff{Initial: time.Second, Max: maxDuration}, 100,
			maxDuration.Truncate(time.Microsecond)},
		{"a maximum of half the largest duration does not overflow", store.Backoff{Initial: 3 * time.Second, Max: maxDuration / 2}, 100,
			(maxDuration / 2).Truncate(time.Microsecond)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.backoff.Step(tc.attempt); got != tc.want {
				t.Errorf("%+v.Step(%d) = %v, want %v", tc.backoff, tc.attempt, got, tc.want)
			}
		})
	}
}

func TestBackoffDelayIsJitterTimesStepInMicroseconds(t *testing.T) {
	b := store.Backoff{Initial: time.Second, Max: time.Minute}
	justBelowOne := math.Nextafter(1, 0)
	tests := []struct {
		name    string
		backoff store.Backoff
		attempt int32
		jitter  float64
		want    time.Duration
	}{
		{"jitter 0 is no delay", b, 1, 0, 0},
		{"jitter 0.5 is half the step, floored", b, 1, 0.5, 500 * time.Millisecond},
		{"jitter 0.25 after the third attempt is a quarter of 4 s", b, 3, 0.25, time.Second},
		{"jitter just below 1 is the whole step", b, 1, justBelowOne, time.Second},
		{"jitter just below 1 at the maximum is the maximum", b, 40, justBelowOne, time.Minute},
		{"jitter just below 1 of a step of a year is the year", store.Backoff{Initial: 365 * 24 * time.Hour, Max: 365 * 24 * time.Hour}, 1, justBelowOne, 365 * 24 * time.Hour},
		{"a delay is whole microseconds", b, 1, 0.3333333, 333333 * time.Microsecond},
		{"a step of 0 is no delay", store.Backoff{}, 5, 0.9, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.backoff.Delay(tc.attempt, tc.jitter); got != tc.want {
				t.Errorf("%+v.Delay(%d, %v) = %v, want %v", tc.backoff, tc.attempt, tc.jitter, got, tc.want)
			}
		})
	}
}
