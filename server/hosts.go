package server

// The Host check and the warning of a server exposed without
// authentication.
//
// A server on loopback without tokens trusts whoever can reach it, which
// is meant to be this machine's users. A web page elsewhere can still
// reach it through the browser: DNS rebinding points a name the page
// controls (evil.example) at 127.0.0.1, and the browser then sends the
// page's requests, same-origin, to the loopback port. What gives it away
// is the Host header, which names the attacker's domain: a server that
// answers only requests for a loopback name or address, or a name the
// operator listed, cannot be reached that way.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// DefaultInsecureWarnEvery is how often a server exposed without
// authentication (Config.Insecure) repeats its warning.
const DefaultInsecureWarnEvery = time.Hour

// hostRefusedWarnEvery spaces the warnings about refused Host headers, so
// a rebinding page that retries makes one line a minute, with a count.
const hostRefusedWarnEvery = time.Minute

// hostCheck refuses requests whose Host is neither a loopback name or
// address nor one of the allowed hosts.
type hostCheck struct {
	allowed []allowedHost
	errors  *connect.ErrorWriter
	metrics *Metrics
	log     *slog.Logger

	mu          sync.Mutex
	refused     int64     // since the last warning
	lastWarning time.Time // zero: none yet
}

// allowedHost is one --allowed-hosts entry: a host name or address, and
// the port a request must name when the entry names one.
type allowedHost struct {
	host string // lower case, IPv6 without brackets
	port string // "": any port, or none
}

// CheckAllowedHost reports whether entry can be an --allowed-hosts entry:
// a host name or IP address, with or without a port, and nothing more.
// Entries match exactly (case aside): "jobs.example.org" does not allow
// "api.jobs.example.org".
func CheckAllowedHost(entry string) error {
	if strings.ContainsAny(entry, "/*?#@ ") || strings.Contains(entry, "://") {
		return fmt.Errorf("%q is not a host: give a host name or address, with or without a port, such as jobs.example.org or jobs.example.org:8080", entry)
	}
	h, ok := splitHost(entry)
	if !ok || h.host == "" {
		return fmt.Errorf("%q is not a host[:port]", entry)
	}
	return nil
}

func newHostCheck(allowed []string, metrics *Metrics, log *slog.Logger, opts []connect.HandlerOption) *hostCheck {
	c := &hostCheck{errors: connect.NewErrorWriter(opts...), metrics: metrics, log: log}
	for _, a := range allowed {
		if h, ok := splitHost(a); ok && h.host != "" {
			c.allowed = append(c.allowed, h)
		}
	}
	return c
}

// handler wraps next with the check; it applies to every path: the RPCs
// of every protocol, the page, /metrics, health and reflection.
func (c *hostCheck) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// r.Host is the Host header of HTTP/1.1 and the :authority of
		// HTTP/2, which gRPC clients set.
		if c.allows(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		c.metrics.hostRefused.Inc()
		c.refusedOne(r.Host)
		noteRefusal(r, connect.CodePermissionDenied, fmt.Sprintf("Host %q is neither loopback nor one of --allowed-hosts", r.Host))
		err := connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"this server answers only requests for a loopback host (localhost, 127.0.0.1, [::1]), "+
				"not for %q: a page elsewhere may be reaching it through DNS rebinding; "+
				"if this name is yours (a proxy or another machine), start the server with --allowed-hosts %s",
			r.Host, hostOnly(r.Host)))
		if c.errors.IsSupported(r) {
			_ = c.errors.Write(w, r, err)
			return
		}
		http.Error(w, err.Message(), http.StatusForbidden)
	})
}

// allows reports whether host (a Host header's value) names this machine
// or an allowed host. An empty or malformed Host is refused: browsers
// always send one.
func (c *hostCheck) allows(host string) bool {
	h, ok := splitHost(host)
	if !ok || h.host == "" {
		return false
	}
	if isLoopbackHost(h.host) {
		return true
	}
	for _, a := range c.allowed {
		if a.host == h.host && (a.port == "" || a.port == h.port) {
			return true
		}
	}
	return false
}

func (c *hostCheck) refusedOne(host string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused++
	if !c.lastWarning.IsZero() && time.Since(c.lastWarning) < hostRefusedWarnEvery {
		return
	}
	c.log.Warn("refused requests for a host that is not loopback (possible DNS rebinding); "+
		"if the name is yours, add it with --allowed-hosts", "host", host, "refused", c.refused)
	c.lastWarning, c.refused = time.Now(), 0
}

// splitHost parses a Host header value, or an --allowed-hosts entry:
// name, name:port, IPv4[:port], [IPv6][:port] or a bare IPv6 address. A
// name's one trailing dot (localhost.) is dropped.
func splitHost(s string) (allowedHost, bool) {
	s = strings.ToLower(s)
	var h allowedHost
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return h, false
		}
		h.host, s = s[1:end], s[end+1:]
		if s != "" {
			if !strings.HasPrefix(s, ":") {
				return h, false
			}
			h.port = s[1:]
		}
		if net.ParseIP(h.host) == nil {
			return h, false
		}
	case strings.Count(s, ":") > 1:
		// A bare IPv6 address, as an --allowed-hosts entry may give it.
		if net.ParseIP(s) == nil {
			return h, false
		}
		h.host = s
	default:
		h.host = s
		if i := strings.IndexByte(s, ':'); i >= 0 {
			h.host, h.port = s[:i], s[i+1:]
		}
		h.host = strings.TrimSuffix(h.host, ".")
	}
	for _, c := range h.port {
		if c < '0' || c > '9' {
			return h, false
		}
	}
	return h, true
}

// hostOnly is host without its port, as a suggestion for --allowed-hosts.
func hostOnly(host string) string {
	if h, ok := splitHost(host); ok && h.host != "" {
		if strings.Contains(h.host, ":") {
			return "[" + h.host + "]"
		}
		return h.host
	}
	return "NAME"
}

// isLoopbackHost reports whether host, without port, names this machine:
// localhost and its subdomains (which browsers resolve to loopback
// themselves, RFC 6761), 127.0.0.0/8 and ::1.
func isLoopbackHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// warnInsecure logs that the server is exposed without authentication,
// at once and then every interval until ctx ends: an operator who reads
// the log later still finds it near the end.
func (s *Server) warnInsecure(ctx context.Context, addr net.Addr, every time.Duration) {
	warn := func() {
		s.log.Warn("serving beyond loopback WITHOUT authentication (--insecure): anyone who can reach this address "+
			"can read every tenant's jobs, payloads and results, and submit, cancel and claim jobs; "+
			"to fix it, give serve a tokens file (--tokens FILE, see docs/SECURITY.md) or listen on 127.0.0.1",
			"addr", addr.String())
	}
	warn()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			warn()
		}
	}
}
