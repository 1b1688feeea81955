package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestABackoffsZeroFieldsTakeTheDefaults(t *testing.T) {
	tests := []struct {
		name             string
		b                Backoff
		initial, maximum time.Duration
	}{
		{"zero is the defaults", Backoff{}, DefaultBackoffInitial, DefaultBackoffMax},
		{"an initial alone keeps the default maximum", Backoff{Initial: time.Second}, time.Second, DefaultBackoffMax},
		{"a maximum alone keeps the default initial", Backoff{Max: time.Minute}, DefaultBackoffInitial, time.Minute},
		{"a maximum below the initial is the initial", Backoff{Initial: time.Second, Max: time.Millisecond}, time.Second, time.Second},
		{"negative fields are the defaults", Backoff{Initial: -1, Max: -1}, DefaultBackoffInitial, DefaultBackoffMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.b.policy()
			if p.Initial != tt.initial || p.Max != tt.maximum {
				t.Errorf("%+v waits from %v up to %v, want from %v up to %v", tt.b, p.Initial, p.Max, tt.initial, tt.maximum)
			}
		})
	}
}

func TestARetrierWaitsAtMostADoublingStepAndStartsOverAfterReset(t *testing.T) {
	r := &retrier{b: Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond}}
	steps := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for round := range 2 {
		for i, step := range steps {
			if d := r.delay(); d < 0 || d > step {
				t.Errorf("round %d, retry %d: delay %v, want 0..%v", round+1, i+1, d, step)
			}
		}
		r.reset()
	}
}

func TestARetrierTellsTheDelayAndStopsWithItsContext(t *testing.T) {
	told := time.Duration(-1) // notify not called
	cause := errors.New("the caller gave up")
	r := &retrier{b: Backoff{Initial: time.Hour, Max: time.Hour}, notify: func(_ error, d time.Duration) { told = d }}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := r.wait(ctx, errors.New("unavailable")); !errors.Is(err, cause) {
		t.Errorf("wait with a cancelled context = %v, want its cause", err)
	}
	if told < 0 || told > time.Hour {
		t.Errorf("notify was told %v, want the delay drawn, 0..1h", told)
	}
}

// A retry that the caller's deadline comes before is not announced: the
// command's own --timeout was read as "retrying in 70ms" of a busy
// server. One the deadline leaves room for is.
func TestARetrierAnnouncesOnlyARetryItsDeadlineLeavesRoomFor(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		told bool
	}{{time.Millisecond, false}, {2 * time.Hour, true}} {
		told := false
		// Delays are drawn from 0 to an hour: one under the millisecond
		// left comes once in millions of runs.
		r := &retrier{b: Backoff{Initial: time.Hour, Max: time.Hour}, notify: func(error, time.Duration) { told = true }}
		ctx, cancel := context.WithTimeout(context.Background(), tc.left)
		if tc.told {
			cancel() // only the announcement is looked at, not the sleep
		}
		_ = r.wait(ctx, errors.New("unavailable"))
		cancel()
		if told != tc.told {
			t.Errorf("%v left: announced %v, want %v", tc.left, told, tc.told)
		}
	}
}

// A deadline that passes during a try says what the tries were waiting
// out: that try's failure, or, when the try ended with the deadline
// itself, the failure before it; nothing once a try went through.
func TestARetrierEndedMidTrySaysWhatTheTriesMet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	refused := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	r := &retrier{b: Backoff{Initial: time.Hour, Max: time.Hour}}
	if err := r.ended(ctx, refused); LastTry(err) != refused {
		t.Errorf("ended by a refused try: %v, want the refusal as the last try", err)
	}
	_ = r.wait(ctx, refused)
	if err := r.ended(ctx, connect.NewError(connect.CodeCanceled, context.Canceled)); LastTry(err) != refused || !errors.Is(err, context.Canceled) {
		t.Errorf("ended mid-try after a refusal: %v, want the cause with the refusal as the last try", err)
	}
	reset := connect.NewError(connect.CodeCanceled, errors.New("stream reset by the server"))
	if err := r.ended(ctx, reset); LastTry(err) != reset {
		t.Errorf("ended by a try whose stream the server reset: %v, want the reset as the last try", err)
	}
	r.answered()
	if err := r.ended(ctx, context.Canceled); err != context.Canceled {
		t.Errorf("ended mid-try after an answer: %v, want the cause alone", err)
	}
}
