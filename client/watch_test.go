package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

func TestWatchResumesWithoutDuplicateOrGap(t *testing.T) {
	// Streams end every 100ms (the server's lifetime limit) and the proxy
	// cuts every connection now and then: the watcher must resume each
	// time from the last version it yielded.
	s := startServer(t, serverOptions{server: server.Config{StreamLifetime: 100 * time.Millisecond}})
	p := startProxy(t, s.Addr)
	c := fastClient(t, p.URL())
	job := submit(t, c, "steps")
	id, lease := claim(t, s.Engine, "steps")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := make(chan *jobwatchv1.Job)
	watchErr := make(chan error, 1)
	go func() {
		defer close(seen)
		for j, err := range c.Watch(ctx, job.GetId()) {
			if err != nil {
				watchErr <- err
				return
			}
			seen <- j
		}
	}()
	next := func() *jobwatchv1.Job {
		t.Helper()
		select {
		case j, ok := <-seen:
			if !ok {
				t.Fatalf("watch ended early: %v", <-watchErr)
			}
			return j
		case <-ctx.Done():
			t.Fatal("no snapshot in time")
		}
		return nil
	}

	var versions []int64
	first := next()
	versions = append(versions, first.GetVersion())
	// Lockstep: each change waits until the watcher has seen the one
	// before, so latest-value coalescing cannot skip a version and any
	// gap or repeat is the resume's fault.
	for step := 1; step <= 30; step++ {
		if step%7 == 0 {
			p.Drop()
		}
		if step%10 == 0 {
			time.Sleep(120 * time.Millisecond) // outlive the stream's lifetime
		}
		hb, err := s.Engine.Heartbeat(ctx, id, lease, int32(step*3), fmt.Sprintf("step %d", step))
		if err != nil {
			t.Fatal(err)
		}
		j := next()
		if j.GetVersion() != hb.Version || j.GetStep() != fmt.Sprintf("step %d", step) {
			t.Fatalf("after step %d saw version %d %q, want version %d", step, j.GetVersion(), j.GetStep(), hb.Version)
		}
		versions = append(versions, j.GetVersion())
	}
	complete(t, s.Engine, id, lease, `{"steps":30}`)
	last := next()
	versions = append(versions, last.GetVersion())
	if last.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("last snapshot is %v, want SUCCEEDED", last.GetState())
	}
	if j, ok := <-seen; ok {
		t.Fatalf("watch went on after the terminal snapshot with version %d", j.GetVersion())
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] != versions[i-1]+1 {
			t.Fatalf("versions %v: a gap or repeat at index %d", versions, i)
		}
	}
}

func TestWatchEnds(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()

	t.Run("an unknown job yields ErrJobNotFound", func(t *testing.T) {
		var got error
		for _, err := range c.Watch(ctx, "j_00000000000000000000000000") {
			got = err
		}
		if !errors.Is(got, client.ErrJobNotFound) {
			t.Fatalf("watch error = %v, want ErrJobNotFound", got)
		}
	})
	t.Run("a job that already ended yields its terminal snapshot once", func(t *testing.T) {
		j := submit(t, c, "gone")
		if _, err := c.Cancel(ctx, j.GetId()); err != nil {
			t.Fatal(err)
		}
		var states []jobwatchv1.JobState
		for j, err := range c.Watch(ctx, j.GetId()) {
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, j.GetState())
		}
		if len(states) != 1 || states[0] != jobwatchv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("snapshots %v, want exactly one CANCELLED", states)
		}
	})
	t.Run("a caller's context that ends yields its error", func(t *testing.T) {
		j := submit(t, c, "slow")
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		var got error
		for _, err := range c.Watch(cctx, j.GetId()) {
			got = err
		}
		if !errors.Is(got, context.DeadlineExceeded) {
			t.Fatalf("watch error = %v, want context.DeadlineExceeded", got)
		}
	})
	t.Run("breaking out of the loop closes the stream", func(t *testing.T) {
		j := submit(t, c, "open")
		for range c.Watch(ctx, j.GetId()) {
			break
		}
		eventually(t, "no watch is open", func() bool { return s.gauge("jobwatch_open_watches") == 0 })
	})
}

// A watch of a job that does not change, on a server whose streams end
// after 100ms, resumes at once each time the lifetime ends its stream:
// no backoff and no retry notice, which would read as a failure.
func TestAQuietWatchEndedByTheStreamLifetimeIsNoFailure(t *testing.T) {
	s := startServer(t, serverOptions{server: server.Config{StreamLifetime: 100 * time.Millisecond}})
	var notices atomic.Int32
	var last atomic.Value
	c := fastClient(t, s.URL, client.WithRetryNotify(func(err error, _ time.Duration) {
		// On a loaded machine the last call may reach the server after
		// the deadline (deadline_exceeded): that is the deadline, not
		// what this test is about.
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			notices.Add(1)
			last.Store(err.Error())
		}
	}))
	job := submit(t, c, "quiet")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	snapshots := 0
	for _, err := range c.Watch(ctx, job.GetId()) {
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "last try") {
				t.Fatalf("watch ended with %v; want the deadline alone", err)
			}
			break
		}
		snapshots++
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, err := range c.WatchLogs(ctx, job.GetId(), 0) {
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "last try") {
				t.Fatalf("watch of the logs ended with %v; want the deadline alone", err)
			}
			break
		}
	}
	if snapshots != 1 || notices.Load() != 0 {
		t.Fatalf("%d snapshots and %d retry notices (the last %v) over streams ended by their lifetime; want 1 and none", snapshots, notices.Load(), last.Load())
	}
}
