package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// BenchmarkShortCallWithParkedWaits measures GetJob through one client
// with nothing parked and with 1,000 WaitForJob calls parked on the same
// client, side by side in one run:
//
//	go test -run '^$' -bench ShortCallWithParkedWaits -benchtime 2000x ./client
//
// ns/op is the mean; p50-µs and p99-µs are the median and 99th percentile
// of single calls. The long calls travel on their own transport, so the
// two rows should match within noise.
func BenchmarkShortCallWithParkedWaits(b *testing.B) {
	for _, parked := range []int{0, 1000} {
		b.Run(fmt.Sprintf("parked=%d", parked), func(b *testing.B) {
			s := startServer(b, serverOptions{})
			c := fastClient(b, s.URL)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()

			target := submit(b, c, "bench-target")
			for range parked {
				wg.Go(func() { _, _ = c.WaitForJob(ctx, target.GetId()) })
			}
			eventually(b, "all waits are parked", func() bool {
				return s.gauge("jobwatch_parked_waits") == float64(parked)
			})
			probe := submit(b, c, "bench-probe")
			req := &jobwatchv1.GetJobRequest{JobId: probe.GetId()}
			for range 50 { // warm the connection and the server's caches
				if _, err := c.JobService().GetJob(ctx, req); err != nil {
					b.Fatal(err)
				}
			}

			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.JobService().GetJob(ctx, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			if got := s.gauge("jobwatch_parked_waits"); got != float64(parked) {
				b.Fatalf("%v waits parked at the end, want %d", got, parked)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
