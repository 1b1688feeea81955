package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// syncBuilder is a log's output, written by the settling timer's
// goroutine and read by the test's.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAnOutageIsOneEpisodeHoweverItsFailuresArrive(t *testing.T) {
	var out syncBuilder
	h := &health{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		closing: context.Background(), settle: 50 * time.Millisecond}
	down := fmt.Errorf("%w: connection refused", jobtype.ErrUnavailable)
	count := func(level string) int { return strings.Count(out.String(), "level="+level) }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s; log:\n%s", what, out.String())
			}
		}
	}

	if !h.reachable() {
		t.Fatal("a new store is unreachable")
	}
	h.observe(errors.New("a caller's own error"))
	if !h.reachable() || count("WARN") != 0 {
		t.Fatal("an error that is not the database's started an episode")
	}

	// The listener, a write, the notifier and a straggling write fail in
	// turn; a write succeeds in between; the listener comes back.
	h.listenerLost(down)
	h.observe(down)
	h.notified(down)
	h.observe(nil)
	if h.reachable() {
		t.Error("reachable while the listener is down")
	}
	h.observe(down)
	h.listenerBack()
	if h.reachable() {
		t.Error("reachable while writes fail")
	}
	h.observe(nil)
	if !h.reachable() {
		t.Error("unreachable once writes succeed and the listener listens")
	}
	waitUntil("the episode's end", func() bool { return count("INFO") == 1 })
	if n := count("WARN"); n != 1 {
		t.Errorf("%d warnings for one episode, want 1:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "refused_writes=2") {
		t.Errorf("the end does not count the 2 refused writes:\n%s", out.String())
	}

	// A failure after the episode settled is a new one.
	h.observe(down)
	if n := count("WARN"); n != 2 {
		t.Errorf("a later outage logged %d warnings in all, want 2", n)
	}
	h.observe(nil)
	waitUntil("the second episode's end", func() bool { return count("INFO") == 2 })
}

func TestAProbeEndsAnEpisodeNoCallerWrites(t *testing.T) {
	var out syncBuilder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	back := make(chan struct{})
	h := &health{log: slog.New(slog.NewTextHandler(&out, nil)), closing: ctx, settle: time.Millisecond,
		probe: func(context.Context) error {
			select {
			case <-back:
				return nil
			default:
				return jobtype.ErrUnavailable
			}
		}}
	h.observe(fmt.Errorf("%w: connection refused", jobtype.ErrUnavailable))
	close(back)
	for deadline := time.Now().Add(10 * probeEvery); !h.reachable(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still unreachable after the probe could write")
		}
	}
}
