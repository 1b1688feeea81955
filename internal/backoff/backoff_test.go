package backoff

import (
	"math"
	"testing"
	"time"
)

// store/storetest pins Step's and Delay's edges (every backend's retry
// RunAt depends on them); these tests pin what a retry loop sees.

func TestARetryLoopWaitsUpToADoublingStepAndStartsOverAfterASuccess(t *testing.T) {
	r := Retry{Policy: Policy{Initial: time.Second, Max: 4 * time.Second}, jitter: func() float64 { return math.Nextafter(1, 0) }}
	var got []time.Duration
	for range 4 {
		got = append(got, r.Next())
	}
	r.Reset()
	got = append(got, r.Next())
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays with the largest jitter = %v, want %v", got, want)
		}
	}
}

func TestADelayIsDrawnFromTheWholeStep(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute}
	t.Run("no jitter is no delay, the largest jitter the whole step", func(t *testing.T) {
		for attempt := 1; attempt <= 80; attempt++ {
			step := p.Step(attempt)
			if d := p.Delay(attempt, 0); d != 0 {
				t.Errorf("attempt %d: Delay(jitter 0) = %v, want 0", attempt, d)
			}
			if d := p.Delay(attempt, math.Nextafter(1, 0)); d != step {
				t.Errorf("attempt %d: Delay(jitter just below 1) = %v, want the step %v", attempt, d, step)
			}
		}
	})
	t.Run("jitters are drawn below and above one half", func(t *testing.T) {
		var below, above bool
		for range 64 {
			j := Jitter()
			if j < 0 || j >= 1 {
				t.Fatalf("Jitter() = %v, want [0, 1)", j)
			}
			below, above = below || j < 0.5, above || j >= 0.5
		}
		// Either is false with probability 2^-64 for a uniform draw.
		if !below || !above {
			t.Errorf("64 jitters: some below 1/2 %v, some above %v; want both", below, above)
		}
	})
}

func TestSleepEndsWhenDoneIsClosed(t *testing.T) {
	done := make(chan struct{})
	close(done)
	if Sleep(done, time.Hour) {
		t.Error("Sleep(closed, 1h) reported that the hour passed")
	}
	if Sleep(done, 0) {
		t.Error("Sleep(closed, 0) reported that it was not stopped")
	}
	if !Sleep(make(chan struct{}), time.Millisecond) {
		t.Error("Sleep(open, 1ms) reported that it was stopped")
	}
}
