package server_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// A client that sends a whole request and hangs up at once gets nothing
// done: the server, which reads the request only after the hang-up has
// arrived, must not create the job. TCP_CORK makes the request and the
// FIN leave in one segment, so the hang-up is there before the server
// reads a byte.
func TestARequestWhoseClientHungUpBeforeItWasHandledCreatesNothing(t *testing.T) {
	ts := startServer(t, serverOptions{})
	conn, err := net.Dial("tcp", addrOf(ts.url))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var corkErr error
	if err := raw.Control(func(fd uintptr) {
		corkErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1)
	}); err != nil || corkErr != nil {
		t.Fatalf("cork: %v %v", err, corkErr)
	}
	body := `{"kind":"abandoned"}`
	fmt.Fprintf(conn, "POST /jobwatch.v1.JobService/SubmitJob HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	conn.Close()

	ts.waitForMetric("the server saw the hang-up", 10*time.Second, func(v float64) bool { return v == 1 },
		"jobwatch_requests_abandoned_total")
	c := ts.h2c()
	list, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Kind: "abandoned"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 0 {
		t.Errorf("a submit whose client had hung up created %d jobs, want none", n)
	}
}
