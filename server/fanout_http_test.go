//go:build unix

package server_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// TestFanOutWaitHTTPTiming is a measurement, not a check: it parks
// JOBWATCH_FANOUT_N WaitJob calls of one job over real HTTP/2 (the
// generated Go client, Connect protocol, 8 connections) against a real
// server on SQLite in this process, completes the job, and logs how long
// after the CompleteJob call was sent the last waiter had its answer.
// Client and server share the process and its CPUs.
//
//	JOBWATCH_FANOUT_N=10000 go test ./server/ -run TestFanOutWaitHTTPTiming -v -count 1
func TestFanOutWaitHTTPTiming(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("JOBWATCH_FANOUT_N"))
	if n <= 0 {
		t.Skip("a measurement: set JOBWATCH_FANOUT_N")
	}
	rounds := 5
	if r, _ := strconv.Atoi(os.Getenv("JOBWATCH_FANOUT_ROUNDS")); r > 0 {
		rounds = r
	}
	ts := startServer(t, serverOptions{config: server.Config{MaxParkedCalls: 2 * n}})
	const conns = 8
	waiters := make([]clients, conns)
	for i := range waiters {
		waiters[i] = ts.h2c()
	}
	c := ts.h2c()
	var times, cpus []time.Duration
	for round := range rounds {
		kind := fmt.Sprintf("fan%d", round)
		job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind, Payload: mustValue(t, map[string]any{"n": 1})})
		lease := claim(t, c, kind)
		ctx := ctxTimeout(t, time.Minute)
		var done sync.WaitGroup
		done.Add(n)
		last := make(chan time.Time, n)
		for i := range n {
			go func() {
				defer done.Done()
				resp, err := waiters[i%conns].jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
					t.Errorf("wait: %v, %v", err, resp.GetJob().GetState())
				}
				last <- time.Now()
			}()
		}
		ts.waitForGaugeWithin("jobwatch_parked_waits", float64(n), time.Minute)
		cpuBefore := processCPU()
		start := time.Now()
		// Not complete(): its 5s can pass on a loaded machine while the
		// server answers the waiters.
		if _, err := c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{
			JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(), Result: mustValue(t, map[string]any{"ok": true}),
		}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		done.Wait()
		close(last)
		var end time.Time
		for at := range last {
			if at.After(end) {
				end = at
			}
		}
		cpu := processCPU() - cpuBefore
		times = append(times, end.Sub(start))
		cpus = append(cpus, cpu)
		t.Logf("round %d: %d waiters all answered %v after CompleteJob was sent, process CPU %v", round, n, end.Sub(start), cpu)
	}
	slices.Sort(times)
	slices.Sort(cpus)
	t.Logf("N=%d median over %d rounds: %v (min %v, max %v); process CPU (client and server) median %v",
		n, rounds, times[len(times)/2], times[0], times[len(times)-1], cpus[len(cpus)/2])
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitForGaugeWithin is waitForGauge with a deadline of its own, which
// tolerates a failed gather: with thousands of calls parked, the gauge of
// stored jobs can time out while the one this waits for is fine.
func (ts *testServer) waitForGaugeWithin(name string, want float64, within time.Duration) {
	ts.t.Helper()
	deadline := time.Now().Add(within)
	for {
		families, _ := ts.registry.Gather()
		for _, f := range families {
			if f.GetName() == name && f.GetMetric()[0].GetGauge().GetValue() == want {
				return
			}
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("%s never reached %v", name, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
