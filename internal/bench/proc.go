package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobwatch/jobwatch/internal/benchfloor"
)

// benchServer is one server under measurement: the floor, the jobwatch
// binary given by --before, or this jobwatch. Each scenario starts it as
// a process of its own, so its memory and CPU are its own.
type benchServer struct {
	name   string // column: floor, before, jobwatch
	binary string
	floor  bool // the benchfloor, run as "BINARY bench --serve-floor ADDR"
}

// durable reports whether a restart on the same directory keeps the jobs.
func (s benchServer) durable() bool { return !s.floor }

// serverProc is a running server process.
type serverProc struct {
	srv  benchServer
	base string // http://127.0.0.1:PORT
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{} // closed when the process has exited
	http *http.Client  // for /metrics, its own pool
}

// serverOptions say how to start a jobwatch process: its database (in
// the bench's directory; a scenario that needs the jobs of an earlier
// process names the same one), and room for every call the bench parks.
// Every process also gets caps longer than any scenario, so a parked call
// stays parked while it is measured.
type serverOptions struct {
	db     string
	parked int
	// dbURL, when set, is the PostgreSQL database of the process instead
	// of a SQLite file (db is then unused).
	dbURL string
}

// startServer starts srv with its data in dir and waits until it answers.
func startServer(ctx context.Context, srv benchServer, dir string, opts serverOptions) (*serverProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var args []string
	if srv.floor {
		args = []string{"bench", "--serve-floor", addr}
	} else {
		parked := strconv.Itoa(opts.parked)
		db := filepath.Join(dir, srv.name+"-"+opts.db+".db")
		if opts.dbURL != "" {
			db = opts.dbURL
		}
		args = []string{"serve", "--db", db, "--addr", addr,
			"--max-parked-calls", parked, "--max-parked-calls-per-tenant", parked,
			"--wait-cap", "30m", "--stream-lifetime", "30m", "--log-level", "warn"}
	}
	// Not CommandContext: stop ends the process gracefully, and a bench
	// cut short by ctx still stops it through the deferred stop.
	cmd := exec.Command(srv.binary, args...)
	ownGroup(cmd)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", srv.name, err)
	}
	p := &serverProc{srv: srv, base: "http://" + addr, cmd: cmd, logs: logs, done: make(chan struct{}),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
	go func() { cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := p.metrics(); err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it answered: %s", srv.name, logs.tail())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not answer within 30s: %s", srv.name, logs.tail())
		}
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// stop ends the process: SIGTERM, then SIGKILL if it lingers.
func (p *serverProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.http.CloseIdleConnections()
}

// alive returns an error with the process's last words if it has exited.
func (p *serverProc) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %s", p.srv.name, p.logs.tail())
	default:
		return nil
	}
}

// metrics reads the process's /metrics: every sample without labels.
func (p *serverProc) metrics() (map[string]float64, error) {
	resp, err := p.http.Get(p.base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// metric reads one sample of /metrics.
func (p *serverProc) metric(name string) (float64, error) {
	m, err := p.metrics()
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("%s: /metrics has no %s", p.srv.name, name)
	}
	return v, nil
}

// awaitMetric polls name until it is at least want, the process exits or
// a minute passes.
func (p *serverProc) awaitMetric(ctx context.Context, name string, want float64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := p.metric(name)
		if err != nil {
			return err
		}
		if v >= want {
			return nil
		}
		if err := p.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s is %v after a minute, want %v", p.srv.name, name, v, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// rssKiB is the process's resident set (VmRSS) in KiB.
func (p *serverProc) rssKiB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) > 0 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the CPU time (user + system) the process has used.
func (p *serverProc) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	utime, err1 := strconv.ParseFloat(f[11], 64) // field 14
	stime, err2 := strconv.ParseFloat(f[12], 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicks, nil
}

// serveFloor runs the benchfloor on addr until ctx ends: the process the
// bench starts for the floor column.
func serveFloor(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return benchfloor.New(benchfloor.Config{WaitCap: 30 * time.Minute}).Serve(ctx, ln)
}

// syncBuffer collects a child's output for an error message.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // a chatty child must not grow the bench
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

// tail is the last few lines the process wrote.
func (b *syncBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

var _ io.Writer = (*syncBuffer)(nil)
