package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// BenchmarkListJobsMemory measures what the issue measured: the server's
// memory while 8 clients at once send a 35-byte ListJobs for 500 jobs of a
// tenant holding 600 jobs of 250 KB. The clients read the answers into
// io.Discard, so what grows is the server's. It reports the answer's size
// and the peak of the process's heap and RSS over the calls:
//
//	go test ./server -run '^$' -bench BenchmarkListJobsMemory -benchtime 1x
func BenchmarkListJobsMemory(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobwatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	engine := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	srv := server.New(engine, server.Config{Logger: slog.New(slog.DiscardHandler), ShutdownGrace: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { stop(); <-served }()
	url := "http://" + ln.Addr().String() + listJobsPath

	pad := strings.Repeat("x", 250_000)
	for i := range 600 {
		payload, _ := json.Marshal(map[string]any{"n": i, "pad": pad})
		if _, err := engine.Submit(ctx, jobs.SubmitRequest{Tenant: "amp", Kind: "resize", Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	hc := &http.Client{Transport: &http.Transport{}}
	for _, bc := range []struct{ name, body string }{
		{"default view", `{"tenant":"amp","pageSize":500}`},
		{"full view", `{"tenant":"amp","pageSize":500,"view":"JOB_VIEW_FULL"}`},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/%d clients", bc.name, clients), func(b *testing.B) {
				for range b.N {
					runtime.GC()
					before := heapInUse()
					resetPeakRSS()
					peak := watchPeakHeap()
					var wg sync.WaitGroup
					sizes := make([]int64, clients)
					for c := range clients {
						wg.Add(1)
						go func() {
							defer wg.Done()
							resp, err := hc.Post(url, "application/json", strings.NewReader(bc.body))
							if err != nil {
								b.Error(err)
								return
							}
							defer resp.Body.Close()
							sizes[c], _ = io.Copy(io.Discard, resp.Body)
						}()
					}
					wg.Wait()
					max := peak()
					b.ReportMetric(float64(sizes[0])/1e6, "MB/answer")
					b.ReportMetric(float64(before)/1e6, "heap-before-MB")
					b.ReportMetric(float64(max)/1e6, "heap-peak-MB")
					b.ReportMetric(float64(peakRSS())/1e6, "rss-peak-MB")
				}
			})
		}
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// watchPeakHeap samples the heap until the returned func is called, and
// that func returns the highest value seen.
func watchPeakHeap() func() uint64 {
	done := make(chan struct{})
	result := make(chan uint64)
	go func() {
		peak := heapInUse()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				peak = max(peak, heapInUse())
			case <-done:
				result <- max(peak, heapInUse())
				return
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-result
	}
}

// resetPeakRSS starts the process's VmHWM afresh (Linux), so that peakRSS
// reports the peak of what follows.
func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb uint64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb * 1000
		}
	}
	return 0
}
