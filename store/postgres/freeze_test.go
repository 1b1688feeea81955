package postgres

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
)

// freezer is a TCP proxy to a database that can stop passing bytes
// either way while keeping every connection open: a database that hangs
// (a stopped process, a network that drops packets), which no error or
// reset ever reports.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	thawed chan struct{} // closed while bytes pass
	conns  []net.Conn
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, thawed: make(chan struct{})}
	close(f.thawed)
	t.Cleanup(func() { f.thaw(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.pass(c)
		}
	}()
	return f
}

func (f *freezer) pass(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer up.Close()
	f.mu.Lock()
	f.conns = append(f.conns, c, up)
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { f.copy(up, c); done <- struct{}{} }()
	go func() { f.copy(c, up); done <- struct{}{} }()
	<-done
}

// copy passes what it reads from src to dst, holding it while frozen.
func (f *freezer) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			thawed := f.thawed
			f.mu.Unlock()
			<-thawed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection and takes no more: the database is gone.
func (f *freezer) cut() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thawed = make(chan struct{})
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

// A database that hangs without closing its connections is not taken as
// reachable for as long as TCP keeps them open: the listener's catch-up
// gives up after its timeout, health then says NOT_SERVING, and once the
// database answers again the listener listens again and health says
// SERVING.
func TestAHungDatabaseIsNotReachable(t *testing.T) {
	raw := pgtest.URL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	f := startFreezer(t, u.Host)
	u.Host = f.ln.Addr().String()
	s := openURL(t, u.String())
	s.catchUpLimit = 500 * time.Millisecond
	heard := make(chan bool, 16)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := s.Listen(ctx, func(_ []store.Change, missed bool) {
		select {
		case heard <- missed:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !s.Reachable() {
		t.Fatal("the store is not reachable before the database hangs")
	}

	f.freeze()
	frozen := time.Now()
	// The bound only fails a broken build: a catch-up is due within a
	// second, and gives up half a second later.
	waitUntil(t, 30*time.Second, "the store to say the hung database is not reachable", func() bool { return !s.Reachable() })
	t.Logf("not reachable %v after the database hung", time.Since(frozen).Round(time.Millisecond))

	f.thaw()
	waitUntil(t, 30*time.Second, "the store to say the database is reachable again", s.Reachable)
	select {
	case missed := <-heard:
		if !missed {
			t.Errorf("the listener's first call after the hang was not missed=true")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not say it had missed changes after the hang")
	}
}

// waitUntil polls cond until it holds, failing t after bound.
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// A store closed while its listener cannot reach the database (a replica
// stopped during an outage) closes cleanly: the listener, which keeps
// trying to connect again, stops without touching the connection it no
// longer has.
func TestAStoreClosesWhileItsListenerCannotReachTheDatabase(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	f := startFreezer(t, u.Host)
	u.Host = f.ln.Addr().String()
	s, err := Open(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(t.Context(), func([]store.Change, bool) {}); err != nil {
		t.Fatal(err)
	}
	f.cut()
	waitUntil(t, 30*time.Second, "the store to say the database is gone", func() bool { return !s.Reachable() })
	s.Close() // a panic here fails the test binary
}
