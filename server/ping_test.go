package server_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/server"
)

// deafConn is a client connection that can go deaf and mute at once, as a
// client host that died without closing its sockets: after freeze it
// reads nothing (what arrives is dropped) and writes vanish.
type deafConn struct {
	net.Conn
	mu     sync.Mutex
	frozen bool
	closed chan struct{}
	once   sync.Once
}

func (c *deafConn) isFrozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

func (c *deafConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.isFrozen() {
			return n, err
		}
		if err != nil {
			<-c.closed // a dead host reports nothing, not even EOF
			return 0, err
		}
	}
}

func (c *deafConn) Write(b []byte) (int, error) {
	if c.isFrozen() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *deafConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func TestServerPingsFreeTheCallsOfADeadClient(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{
		PingInterval: 100 * time.Millisecond, PingTimeout: 200 * time.Millisecond,
	}})
	job := submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "report"})

	var conns []*deafConn
	var mu sync.Mutex
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			dc := &deafConn{Conn: c, closed: make(chan struct{})}
			mu.Lock()
			conns = append(conns, dc)
			mu.Unlock()
			return dc, nil
		},
	}
	defer tr.CloseIdleConnections()
	jobsClient := jobwatchv1connect.NewJobServiceClient(&http.Client{Transport: tr}, ts.url)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := jobsClient.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
		waited <- err
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)
	mu.Lock()
	for _, c := range conns {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
	mu.Unlock()

	// Only the server's unanswered PING can tell the client is gone; the
	// wait's cap is a minute away.
	ts.waitForGauge("jobwatch_parked_waits", 0)

	cancel()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	if err := <-waited; err == nil {
		t.Fatal("the dead client's WaitJob succeeded; want it cut off")
	}
}
