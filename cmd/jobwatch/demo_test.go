package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// The demo shows its queue rules at work on the page: ListQueues (what the
// page's queue panel reads) shows the serial queue and the pooled pair
// with their rules, the serial queue never runs two, the pooled pair never
// holds more than the pool's two units, and the serial queue's jobs run in
// the order they were submitted. Its schedule runs at once and then says
// when it runs next.
func TestTheDemoShowsASerialQueueAPooledPairAndASchedule(t *testing.T) {
	c := client.New(startDemo(t))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sawPoolFull, sawSerialRun := false, false
	for {
		resp, err := c.QueueService().ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]*jobwatchv1.Queue{}
		for _, q := range resp.GetQueues() {
			rows[q.GetName()] = q
		}
		index, readme, thumbs := rows["index"], rows["readme"], rows["thumbnails"]
		if index.GetMode() != jobwatchv1.QueueMode_QUEUE_MODE_SERIAL || readme == nil || thumbs == nil {
			t.Fatalf("ListQueues: index %v, readme %v, thumbnails %v; want a serial index and the pooled pair", index, readme, thumbs)
		}
		for _, q := range []*jobwatchv1.Queue{readme, thumbs} {
			if p := q.GetPools(); len(p) != 1 || p[0].GetName() != "db" || p[0].GetUnits() != 2 {
				t.Fatalf("%s uses pools %v, want db of 2 units", q.GetName(), p)
			}
		}
		if index.GetRunning() > 1 {
			t.Fatalf("the serial queue runs %d at once", index.GetRunning())
		}
		if n := readme.GetRunning() + thumbs.GetRunning(); n > 2 {
			t.Fatalf("the pooled pair runs %d at once, over the pool's 2 units", n)
		}
		sawSerialRun = sawSerialRun || index.GetRunning() == 1
		sawPoolFull = sawPoolFull || readme.GetRunning()+thumbs.GetRunning() == 2
		if sawSerialRun && sawPoolFull && index.GetQueued()+index.GetRunning() == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("within 60s: saw the serial queue run %v, the pool full %v; index still has %d queued, %d running",
				sawSerialRun, sawPoolFull, index.GetQueued(), index.GetRunning())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The schedule's first run has ended, and it says when the next one
	// comes: 20s after.
	for {
		resp, err := c.QueueService().ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetSchedules()) != 1 || resp.GetSchedules()[0].GetName() != "digest" {
			t.Fatalf("ListSchedules: %v, want the demo's digest", resp.GetSchedules())
		}
		s := resp.GetSchedules()[0]
		if s.GetLastJobState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			if got := s.GetNextRunAt().AsTime().Sub(s.GetLastEndedAt().AsTime()); got != 20*time.Second {
				t.Errorf("next run %v after the last ended, want 20s", got)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the schedule's first run did not succeed within 60s: %v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The serial queue's jobs started in submission order.
	list, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Queue: "index", PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	jobs := list.GetJobs()
	slices.Reverse(jobs) // newest first: oldest first now
	if len(jobs) != 3 {
		t.Fatalf("the serial queue has %d jobs, want the demo's 3", len(jobs))
	}
	for i := 1; i < len(jobs); i++ {
		prev, cur := jobs[i-1], jobs[i]
		if cur.GetStartedAt().AsTime().Before(prev.GetFinishedAt().AsTime()) {
			t.Errorf("%s started at %v, before %s, submitted earlier, finished at %v",
				cur.GetId(), cur.GetStartedAt().AsTime(), prev.GetId(), prev.GetFinishedAt().AsTime())
		}
	}
}

// The demo, like serve on loopback without tokens, refuses a request
// whose Host is not a loopback name: a page of another site cannot reach
// it through DNS rebinding.
func TestTheDemoRefusesAForeignHost(t *testing.T) {
	base := startDemo(t)
	if code := demoAnswersHost(t, base, "evil.example"); code != http.StatusForbidden {
		t.Fatalf("Host evil.example: HTTP %d, want 403", code)
	}
}

// A demo in a VM or a container is reached by a name of its own: as
// serve, it answers the hosts --allowed-hosts lists, and listens beyond
// loopback only with --insecure, which its refusal names (the demo has
// no --tokens to suggest).
func TestTheDemoServesBeyondLoopbackWhenToldTo(t *testing.T) {
	base := startDemo(t, "--allowed-hosts", "myvm.lan")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	for host, want := range map[string]int{"myvm.lan:" + port: http.StatusOK, "myvm.lan": http.StatusOK, "evil.example": http.StatusForbidden} {
		if code := demoAnswersHost(t, base, host); code != want {
			t.Errorf("--allowed-hosts myvm.lan, Host %s: HTTP %d, want %d", host, code, want)
		}
	}

	var stderr strings.Builder
	code := run(context.Background(), []string{"demo", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "demo.db")}, io.Discard, &stderr)
	if msg := stderr.String(); code != 2 || !strings.Contains(msg, "--insecure") || strings.Contains(msg, "--tokens") {
		t.Errorf("demo --addr 0.0.0.0:0: exit %d, %q; want 2 and a hint of --insecure, not of --tokens, which demo has not", code, msg)
	}
	exposed := startDemo(t, "--addr", "0.0.0.0:0", "--insecure")
	if code := demoAnswersHost(t, exposed, "myvm.lan"); code != http.StatusOK {
		t.Errorf("demo --addr 0.0.0.0:0 --insecure, Host myvm.lan: HTTP %d, want 200", code)
	}
}

// demoAnswersHost is the HTTP status of a GetServerInfo to base with
// the Host header host.
func demoAnswersHost(t *testing.T, base, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/jobwatch.v1.JobService/GetServerInfo", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The demo's hints name addresses its listener answers and its Host
// check lets through: on 0.0.0.0 it printed http://[::]:8080/.
func TestTheDemoHintsNameHostsItAnswers(t *testing.T) {
	for _, tc := range []struct {
		addr       string
		allowed    []string
		page, here string
	}{
		{"127.0.0.1:8080", nil, "127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::1]:8080", nil, "[::1]:8080", "[::1]:8080"},
		{"0.0.0.0:8080", []string{"myvm.lan"}, "myvm.lan:8080", "127.0.0.1:8080"},
		{"[::]:8080", []string{"myvm.lan:9090", "other"}, "myvm.lan:9090", "127.0.0.1:8080"},
		{"[::]:8080", []string{"fe80::1"}, "[fe80::1]:8080", "127.0.0.1:8080"},
		{"0.0.0.0:8080", nil, "127.0.0.1:8080", "127.0.0.1:8080"},
		{"192.168.1.5:8080", []string{"myvm.lan"}, "myvm.lan:8080", "myvm.lan:8080"},
		{"192.168.1.5:8080", nil, "192.168.1.5:8080", "192.168.1.5:8080"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if page, here := demoHosts(addr, tc.allowed); page != tc.page || here != tc.here {
			t.Errorf("listening on %s, --allowed-hosts %q: hints %s and %s, want %s and %s", tc.addr, tc.allowed, page, here, tc.page, tc.here)
		}
	}
}
