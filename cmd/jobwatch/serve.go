package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobwatch/jobwatch/alerthook"
	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/config"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/postgres"
	"github.com/jobwatch/jobwatch/store/sqlite"
	"github.com/jobwatch/jobwatch/web"
)

const serveUsage = `Usage: jobwatch serve [flags]

Runs the server: the API (Connect, gRPC and gRPC-Web), the page at /,
/metrics and gRPC health on one port, HTTP/1.1 and cleartext HTTP/2, with
jobs in a SQLite file, or in a PostgreSQL database (--db postgres://...)
that several servers may share. With --tokens every call needs a bearer
token the file lists (jobwatch token new makes one); without it, it
listens on loopback only. SIGINT or SIGTERM shuts it down gracefully: parked calls
answer at once (a second signal quits without waiting). SIGHUP reloads the --config and --tokens files; a file
with a mistake is refused (the log names its line and key) and the one in
effect stays; calls and streams of a token the new file removed end. A
tokens file that lists no token is refused, at start and on SIGHUP,
unless it says "tokens: []" (everyone locked out, on purpose).
--metrics-addr moves /metrics to a listener of its own; without it, and
with --tokens, /metrics takes a metrics or admin token.

Flags:
`

// defaultAddr is where serve and demo listen unless --addr says
// otherwise: loopback, which needs no tokens.
const defaultAddr = "127.0.0.1:8080"

// serveFlags are the flags of "jobwatch serve".
type serveFlags struct {
	addr            string
	db              string
	config          string
	tokens          string
	pidFile         string
	waitCap         time.Duration
	claimCap        time.Duration
	leaseTimeout    time.Duration
	streamLifetime  time.Duration
	keepalive       time.Duration
	lockTimeout     time.Duration
	dbWait          time.Duration
	maxRequestBytes int
	sendTimeout     time.Duration
	bodyTimeout     time.Duration
	maxConnections  int
	maxParkedCalls  int
	maxParkedTenant int
	conns           connFlags
	allowedHosts    string
	maxSendBytes    int
	logLevel        slog.Level
	insecure        bool
	corsOrigins     string
	metricsAddr     string
	tenantMetrics   bool
}

// connFlags are serve's stream and connection bounds: server.Config's
// fields of the same names (0: the server's default).
type connFlags struct {
	maxStreamsPerConn   int
	maxParkedConn       int
	maxPendingBodies    int
	maxNewConnections   int
	firstRequestTimeout time.Duration
}

func parseServeFlags(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := newServeFlagSet(&f, stderr)
	if err := parseFlags(fs, args); err != nil {
		return f, err
	}
	return checkServeFlags(f, fs.Args())
}

// newServeFlagSet declares serve's flags into f. Their defaults are the
// server's and the engine's (server.Default*, jobs.Default*), so --help,
// the flag table of the docs (checked by
// TestTheServeFlagTableInTheDocsIsServes) and a server built with a zero
// Config agree.
func newServeFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	fs.StringVar(&f.addr, "addr", defaultAddr, "`host:port` to listen on (HTTP/1.1 and h2c)")
	fs.StringVar(&f.db, "db", "jobwatch.db", "SQLite database `file` (created if missing), or a postgres:// URL of a database that several replicas may share")
	fs.StringVar(&f.config, "config", "", "YAML configuration `file`: retention, strict, queues, pools, tenants, schedules and alerts (see docs/OPERATING.md); SIGHUP reloads it")
	fs.StringVar(&f.tokens, "tokens", "", "YAML tokens `file`: the SHA-256 of each bearer token with its role and tenant (see docs/SECURITY.md); every call then needs a token, and --addr may be any address; SIGHUP reloads it")
	fs.StringVar(&f.pidFile, "pid-file", "", "`file` to write the process id to while serving (removed at exit), so \"jobwatch reload --pid-file FILE\" signals this server alone; refused if a running serve holds it")
	fs.DurationVar(&f.waitCap, "wait-cap", server.DefaultWaitCap, "longest a WaitJob parks before answering with the current state")
	fs.DurationVar(&f.claimCap, "claim-cap", jobs.DefaultClaimCap, "longest a ClaimJob parks before answering with no job")
	fs.DurationVar(&f.leaseTimeout, "lease-timeout", jobs.DefaultLeaseTimeout, "a running job without a heartbeat for this long is lost (or retried)")
	fs.DurationVar(&f.streamLifetime, "stream-lifetime", server.DefaultStreamLifetime, "WatchJob, WatchJobs and WatchJobLogs streams end (OK) after this long, so load balancers rotate; clients resume")
	fs.DurationVar(&f.keepalive, "keepalive", server.DefaultKeepalive, "idle streams send an empty message this often")
	fs.DurationVar(&f.dbWait, "db-wait", time.Minute, "PostgreSQL only: how long serve waits at start for a database it cannot reach yet (starting, or the network is), trying again with a warning each time; 0 fails at once")
	fs.DurationVar(&f.lockTimeout, "lock-timeout", sqlite.DefaultLockTimeout, "a write that cannot get the database this long (another process holds its lock, or writes queue) answers unavailable")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest request message in `bytes`")
	fs.DurationVar(&f.sendTimeout, "send-timeout", server.DefaultSendTimeout, "a response or stream whose write stays blocked this long on a client that does not read is ended")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "a request body must arrive in full within this long, else deadline_exceeded and the connection closes")
	fs.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections(),
		"most client `connections` held at once, beyond which new ones are closed at once; the default is this process's open-file limit less an eighth (at least 128), kept for the database and logs")
	fs.IntVar(&f.maxSendBytes, "max-pending-send-bytes", server.DefaultSendBudget(),
		"the send budget: most `bytes` of answers being built or held unsent at once; a call over it waits while answers ahead are sent, else gets resource_exhausted; the default is a sixty-fourth of the memory the process may use (machine, cgroup, GOMEMLIMIT), at least 64 MiB")
	fs.IntVar(&f.maxParkedCalls, "max-parked-calls", server.DefaultMaxParkedCalls,
		"most WaitJob(s), WatchJob(s), WatchJobLogs and ClaimJob `calls` parked at once; beyond it a wait answers at once, a watch or claim gets resource_exhausted")
	fs.IntVar(&f.maxParkedTenant, "max-parked-calls-per-tenant", 0,
		"most parked `calls` of one tenant (see docs/OPERATING.md, Limits); 0: a quarter of --max-parked-calls; set it to --max-parked-calls to turn it off")
	fs.IntVar(&f.conns.maxStreamsPerConn, "max-streams-per-conn", server.DefaultMaxStreamsPerConn,
		"most HTTP/2 `streams` one connection may have open at once")
	fs.IntVar(&f.conns.maxParkedConn, "max-parked-calls-per-conn", 0,
		"most parked `calls` (waits, watches, claims, health Watch and reflection streams) of one connection, below --max-streams-per-conn so its short calls always find a stream; 0: --max-streams-per-conn less a tenth")
	fs.IntVar(&f.conns.maxPendingBodies, "max-pending-bodies", server.DefaultMaxPendingBodies,
		"most `requests` whose body has not arrived yet, across all clients; past it the connection whose body has been awaited the longest is closed")
	fs.IntVar(&f.conns.maxNewConnections, "max-new-connections", 0,
		"most `connections` that have not sent a request yet; past it a new one closes the one silent the longest; 0: an eighth of --max-connections")
	fs.DurationVar(&f.conns.firstRequestTimeout, "first-request-timeout", server.DefaultFirstRequestTimeout,
		"a new connection that has not sent its first request within this long is closed")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "",
		"comma-separated `hosts` (name or address, with or without a port) whose Host header is answered besides loopback ones; without tokens the server refuses every other Host (DNS rebinding)")
	fs.Var(levelFlag{&f.logLevel}, "log-level", "log `level`: debug (logs every call), info, warn or error")
	fs.BoolVar(&f.insecure, "insecure", false, "allow a non-loopback --addr without authentication")
	fs.StringVar(&f.corsOrigins, "cors-origins", "", "comma-separated browser `origins` allowed to call the API (\"*\" for any, with --tokens or --insecure); empty: no CORS")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "`host:port` of a listener of its own for /metrics, which then leaves --addr; it asks for no token, so bind it where only your scraper reaches. Empty: /metrics on --addr, taking a metrics or admin token when --tokens is given")
	fs.BoolVar(&f.tenantMetrics, "metrics-per-tenant", false, "add jobwatch_queue_tenant_jobs to /metrics: each queue's queued and running jobs by tenant, two series per queue and tenant with unfinished work (mind the cardinality); a scrape after a change reads every unfinished job's index entry")
	return fs
}

// checkServeFlags refuses flags that cannot work together, and fills in
// the ones whose default depends on another.
func checkServeFlags(f serveFlags, args []string) (serveFlags, error) {
	if len(args) > 0 {
		return f, usageError{fmt.Sprintf("serve takes no arguments, got %q", args)}
	}
	for name, d := range map[string]time.Duration{
		"wait-cap": f.waitCap, "claim-cap": f.claimCap, "lease-timeout": f.leaseTimeout,
		"stream-lifetime": f.streamLifetime, "keepalive": f.keepalive, "lock-timeout": f.lockTimeout,
		"send-timeout": f.sendTimeout, "body-timeout": f.bodyTimeout,
	} {
		if d <= 0 {
			return f, usageError{fmt.Sprintf("--%s must be positive, got %v", name, d)}
		}
	}
	if f.leaseTimeout < time.Second {
		return f, usageError{fmt.Sprintf("--lease-timeout must be at least 1s (a worker heartbeats at a third of it), got %v", f.leaseTimeout)}
	}
	if f.dbWait < 0 {
		return f, usageError{fmt.Sprintf("--db-wait must be 0 or more, got %v", f.dbWait)}
	}
	db, err := checkDB(f.db)
	if err != nil {
		return f, err
	}
	f.db = db
	for name, n := range map[string]int{
		"max-request-bytes": f.maxRequestBytes, "max-connections": f.maxConnections, "max-parked-calls": f.maxParkedCalls,
		"max-pending-send-bytes": f.maxSendBytes,
	} {
		if n <= 0 {
			return f, usageError{fmt.Sprintf("--%s must be positive, got %d", name, n)}
		}
	}
	if f.maxParkedTenant < 0 {
		return f, usageError{fmt.Sprintf("--max-parked-calls-per-tenant must not be negative, got %d", f.maxParkedTenant)}
	}
	if f.maxParkedTenant == 0 {
		f.maxParkedTenant = max(1, f.maxParkedCalls/4)
	}
	if f.conns.maxStreamsPerConn < 2 || f.conns.maxPendingBodies <= 0 || f.conns.firstRequestTimeout <= 0 || f.conns.maxParkedConn < 0 || f.conns.maxNewConnections < 0 {
		return f, usageError{"--max-streams-per-conn must be at least 2, --max-pending-bodies and --first-request-timeout positive, " +
			"--max-parked-calls-per-conn and --max-new-connections not negative"}
	}
	if f.conns.maxParkedConn >= f.conns.maxStreamsPerConn {
		return f, usageError{fmt.Sprintf("--max-parked-calls-per-conn (%d) must be below --max-streams-per-conn (%d), which leaves streams for short calls",
			f.conns.maxParkedConn, f.conns.maxStreamsPerConn)}
	}
	if f.metricsAddr != "" && f.metricsAddr == f.addr && !strings.HasSuffix(f.addr, ":0") { // :0 is any free port, each its own
		return f, usageError{fmt.Sprintf("--metrics-addr %s is --addr too: give /metrics an address of its own, or leave --metrics-addr out to serve it on --addr", f.addr)}
	}
	for _, h := range splitList(f.allowedHosts) {
		if err := server.CheckAllowedHost(h); err != nil {
			return f, usageError{"--allowed-hosts: " + err.Error()}
		}
	}
	for _, o := range splitList(f.corsOrigins) {
		if err := checkOrigin(o); err != nil {
			return f, usageError{"--cors-origins: " + err.Error()}
		}
		// The Host check keeps other sites' pages from a server without
		// tokens; CORS for any origin would let every page the user
		// opens through it (docs/SECURITY.md).
		if o == "*" && f.tokens == "" && !f.insecure {
			return f, usageError{`--cors-origins "*" without --tokens would let every web page you open call this server, which has no authentication: ` +
				`name the origins of your own pages (--cors-origins https://app.example.org), give --tokens, or add --insecure to accept it`}
		}
	}
	allowed := f.insecure || f.tokens != ""
	if err := checkLoopback("--addr", f.addr, allowed,
		"give --tokens, listen on 127.0.0.1 or [::1], or pass --insecure to let anyone who can reach it submit, cancel and run jobs"); err != nil {
		return f, err
	}
	if f.metricsAddr != "" {
		// The listener asks for no token: beyond loopback it takes what
		// --addr takes there, --tokens or --insecure, so that a server
		// kept to this machine does not show its tenants to the network.
		if err := checkLoopback("--metrics-addr", f.metricsAddr, allowed,
			"listen on 127.0.0.1 or [::1], or give --tokens or --insecure to show every tenant's counts to whoever reaches it"); err != nil {
			return f, err
		}
	}
	return f, nil
}

// checkOrigin refuses what a browser never sends as an Origin, so a typo
// such as a trailing slash is an error at start, not a page that cannot
// call the API.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not an origin: %v", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: an origin starts with http:// or https://", o)
	case u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("%q: an origin is scheme://host[:port] and nothing more, such as https://example.org", o)
	}
	return nil
}

// checkLoopback enforces docs/SECURITY.md "Who may call it": with no tokens file the
// server may listen on loopback only, unless --insecure says the operator
// knows. allowed is true when either is given; remedy says what the
// command's caller can do about a refusal.
func checkLoopback(flag, addr string, allowed bool, remedy string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Sprintf("%s %q: %v", flag, addr, err)}
	}
	if allowed || isLoopback(host) {
		return nil
	}
	return usageError{fmt.Sprintf("%s %q is not a loopback address and there is no authentication: %s", flag, addr, remedy)}
}

// isLoopback reports whether host names only this machine. An empty host
// (":8080") listens on every interface, so it is not loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// libpqKeyword matches a keyword of libpq's key=value connection
// strings ("host=db1 dbname=jobs ...").
var libpqKeyword = regexp.MustCompile(`(^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslrootcert|connect_timeout|application_name|options|service|target_session_attrs)\s*=`)

// checkDB refuses a --db that would be opened as a SQLite file while it
// was meant as another database: a libpq key=value connection string or
// a URL of another scheme (each would otherwise become a file of that
// name, each replica on a database of its own, and the string, password
// and all, in the log). A postgres or postgresql scheme in capitals is
// written the way isPostgresURL reads it. The errors never repeat the
// value: it may hold a password.
func checkDB(db string) (string, error) {
	if scheme, rest, ok := strings.Cut(db, "://"); ok {
		switch s := strings.ToLower(scheme); s {
		case "postgres", "postgresql":
			return s + "://" + rest, nil
		}
		return db, usageError{fmt.Sprintf("--db: a %s:// URL is not a database jobwatch opens: give a SQLite file path, or a postgres:// URL", scheme)}
	}
	if lower := strings.ToLower(db); strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") ||
		strings.HasPrefix(lower, "postgres//") || strings.HasPrefix(lower, "postgresql//") {
		return db, usageError{"--db starts as a PostgreSQL URL but is not one: write postgres://USER@HOST:PORT/DBNAME (the password in PGPASSWORD or ~/.pgpass, which ps cannot read)"}
	}
	if libpqKeyword.MatchString(db) {
		return db, usageError{"--db looks like a PostgreSQL key=value connection string (host=... dbname=...): give it as a URL, postgres://USER@HOST:PORT/DBNAME?sslmode=... (the password in PGPASSWORD or ~/.pgpass, which ps cannot read), or a SQLite file path"}
	}
	return db, nil
}

// isPostgresURL reports whether --db names a PostgreSQL database rather
// than a SQLite file.
func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the store --db names. A PostgreSQL database it cannot
// reach (it is starting, or the network is) is tried again for up to
// --db-wait, with a warning each time, so that a replica started before
// its database, as containers started together are, needs no restart. A
// database that refuses it (a wrong password, no such database) fails at
// once.
func openStore(ctx context.Context, f serveFlags, log *slog.Logger) (store.Store, error) {
	if !isPostgresURL(f.db) {
		return sqlite.OpenWith(f.db, sqlite.Config{LockTimeout: f.lockTimeout, Logger: log})
	}
	// Tries at 0.25 s, then backing off to 5 s between tries, and once
	// more at the end of --db-wait: serve waits as long as it says.
	giveUp := time.Now().Add(f.dbWait)
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		st, err := postgres.Open(ctx, f.db)
		left := time.Until(giveUp)
		if err == nil || !errors.Is(err, jobtype.ErrUnavailable) || left <= 0 {
			return st, err
		}
		delay = min(delay, left)
		msg := "the database cannot be reached yet: trying again"
		if postgres.TooManyConnections(err) {
			// Other replicas' pools fill max_connections: theirs close
			// the connections they no longer need within a minute or
			// two (postgres.DefaultMaxConnIdleTime).
			msg = "the database has no room for this replica's connections yet (max_connections): trying again"
		}
		log.Warn(msg, "db", dbName(f.db), "in", delay, "until", giveUp.Format(time.TimeOnly), "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// dbName is --db as logs may show it: a URL without its password,
// whether in the user part or in a password or sslpassword parameter
// (libpq reads both; pgx's own errors mask the same ones).
func dbName(db string) string {
	if !isPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "(a PostgreSQL URL that does not parse)"
	}
	q := u.Query()
	masked := false
	for key := range q {
		if k := strings.ToLower(key); k == "password" || k == "sslpassword" {
			q[key], masked = []string{"xxxxx"}, true
		}
	}
	if masked {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	f, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.logLevel}))
	slog.SetDefault(log)

	// The file is read before the database is opened, so a mistake in it
	// changes nothing on disk.
	var (
		configFile *config.File
		rules      jobtype.Rules
	)
	if f.config != "" {
		if configFile, rules, err = loadConfig(f.config); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
	}
	var tokens *auth.Tokens
	if f.tokens != "" {
		if tokens, err = auth.LoadTokens(f.tokens); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}

	tp, stopTracing, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	// A --pid-file that a running serve holds is refused before the
	// database is opened (or made); the file itself is written once a
	// SIGHUP reloads, below.
	if f.pidFile != "" {
		if err := pidFileFree(f.pidFile); err != nil {
			return err
		}
	}
	// The addresses are tried before the database is opened (or made), so
	// a serve that cannot listen leaves nothing behind, and taken once it
	// is open: until then (--db-wait may last a minute) a client is
	// refused at once rather than left on a port that does not answer.
	for _, a := range [][2]string{{"--addr", f.addr}, {"--metrics-addr", f.metricsAddr}} {
		if a[1] == "" {
			continue
		}
		ln, err := listen(a[0], a[1])
		if err != nil {
			return err
		}
		ln.Close()
	}
	st, err := openStore(ctx, f, log)
	if err != nil {
		return fmt.Errorf("open database %s: %w", dbName(f.db), err)
	}
	defer st.Close()
	ln, err := listen("--addr", f.addr)
	if err != nil {
		return err
	}
	defer ln.Close()           // for the returns before srv.Run, which closes it
	var metricsLn net.Listener // /metrics when not on ln
	if f.metricsAddr != "" {
		if metricsLn, err = listen("--metrics-addr", f.metricsAddr); err != nil {
			return err
		}
		defer metricsLn.Close()
	}

	metrics := server.NewMetricsWith(server.MetricsOptions{PerTenant: f.tenantMetrics})
	// The webhook's deliveries end when serve returns, after the engine
	// has stopped announcing.
	hookDone := make(chan struct{})
	defer close(hookDone)
	engine := jobs.New(st, jobs.Config{
		LeaseTimeout: f.leaseTimeout,
		Logger:       log,
		Metrics:      metrics,
		Rules:        rules,
		Alerts:       alerthook.New(log, hookDone),
		Tracer:       tracerOf(tp),
	})
	host, _, _ := net.SplitHostPort(f.addr)
	loopback := isLoopback(host)
	cfg := server.Config{
		WaitCap:             f.waitCap,
		ClaimCap:            f.claimCap,
		StreamLifetime:      f.streamLifetime,
		Keepalive:           f.keepalive,
		MaxRequestBytes:     f.maxRequestBytes,
		SendTimeout:         f.sendTimeout,
		BodyTimeout:         f.bodyTimeout,
		MaxConnections:      f.maxConnections,
		MaxParkedCalls:      f.maxParkedCalls,
		MaxPendingSendBytes: f.maxSendBytes,
		Logger:              log,
		Metrics:             metrics,
		Page:                web.Handler(),
		CORSOrigins:         splitList(f.corsOrigins),
		Version:             version(),
		Tokens:              tokens,
		TracerProvider:      providerOf(tp),
	}
	// Never above the total, where it would only mislead.
	cfg.MaxParkedCallsPerTenant = min(f.maxParkedTenant, f.maxParkedCalls)
	cfg.MaxStreamsPerConn, cfg.MaxParkedCallsPerConn = f.conns.maxStreamsPerConn, f.conns.maxParkedConn
	cfg.MaxPendingBodies, cfg.MaxNewConnections = f.conns.maxPendingBodies, f.conns.maxNewConnections
	cfg.FirstRequestTimeout = f.conns.firstRequestTimeout
	// Without tokens only this machine's users should reach the server;
	// the Host check (the server's default) keeps out pages that reach it
	// through a browser (DNS rebinding). A server exposed with --insecure
	// is reachable anyway, so it checks only the hosts listed, if any; so
	// does one with --tokens, where a page without a token gets nothing
	// but GetServerInfo.
	cfg.AnyHost = !loopback || f.tokens != ""
	if f.allowedHosts != "" {
		cfg.AnyHost = false
	}
	cfg.AllowedHosts = splitList(f.allowedHosts)
	// parseServeFlags let a non-loopback --addr without --tokens through
	// only with --insecure; the server refuses it otherwise.
	cfg.Insecure = !loopback && f.tokens == ""
	srv := server.New(engine, cfg)
	reloads := &tokenReloads{srv: srv, path: f.tokens, log: log, known: tokens.Len()}
	configReloads := &configReloads{engine: engine, path: f.config, log: log, inEffect: configFile,
		record: func(took bool, fingerprint string) {
			metrics.Reloaded("config", took, time.Now())
			if took {
				metrics.ConfigInEffect(fingerprint)
			}
		}}
	outcomes := &reloadOutcomes{path: reloadOutcomeFile(f.pidFile), log: log}
	// /metrics says whether each file's last reading took, and when one
	// did: an alert sees a replica left on its old rules by a refused
	// reload.
	started := time.Now()
	fingerprint := config.Fingerprint(rules, engine.Retention())
	metrics.ConfigInEffect(fingerprint) // without --config too: the defaults' rules
	if f.config != "" {
		metrics.Reloaded("config", true, started)
	}
	if f.tokens != "" {
		metrics.Reloaded("tokens", true, started)
	}
	// From here on a SIGHUP reloads the files instead of ending the
	// process; without them it only says so (a "systemctl reload" of a
	// unit that passes neither must not stop the server).
	stopReloads := reloadOnHangup(log, func() {
		if f.config == "" && f.tokens == "" {
			log.Warn("SIGHUP: nothing to read again (serve was started without --config or --tokens); still serving")
		}
		var refused, taken, warned []string
		if f.config != "" {
			removed, err := configReloads.reload()
			if err != nil {
				refused = append(refused, err.Error())
			} else {
				taken = append(taken, "config "+f.config)
			}
			if !removed.Empty() {
				warned = append(warned, removedWarning(f.config, removed))
			}
		}
		if f.tokens != "" {
			err := reloads.reload()
			metrics.Reloaded("tokens", err == nil, time.Now())
			if err != nil {
				refused = append(refused, err.Error())
			} else {
				taken = append(taken, "tokens "+f.tokens)
			}
		}
		outcomes.write(refused, taken, warned)
	})
	defer stopReloads()
	// Written once a SIGHUP reloads (above): "jobwatch reload" reads it.
	if f.pidFile != "" {
		removePIDFile, err := writePIDFile(f.pidFile)
		if err != nil {
			return err
		}
		defer removePIDFile()
		defer outcomes.remove()
	}

	attrs := []any{"addr", ln.Addr().String(), "db", dbName(f.db)}
	if metricsLn != nil {
		defer serveMetrics(srv, metricsLn, f.metricsAddr, log)()
		attrs = append(attrs, "metrics_addr", metricsLn.Addr().String())
	}
	if f.config != "" {
		attrs = append(attrs, "config", f.config, "config_fingerprint", fingerprint, "queues", len(rules.Queues), "strict", rules.Strict)
	}
	if f.tokens != "" {
		attrs = append(attrs, "tokens", f.tokens, "tokens_known", tokens.Len())
		if tokens.Len() == 0 {
			log.Warn("listening; the tokens file says tokens: [], so every call but GetServerInfo and the health checks is refused until it lists a token and serve gets a SIGHUP", attrs...)
		} else {
			log.Info("listening; every call but GetServerInfo and the health checks needs a bearer token from the tokens file", attrs...)
		}
	} else if loopback {
		log.Info("listening on loopback only, without authentication: any local user can call the API", attrs...)
	} else {
		// The server warns that it is exposed (Config.Insecure), now and
		// every hour.
		log.Info("listening", attrs...)
	}

	// The engine's duties (lease expiry, retention) start before the
	// first call and stop after the last one (server.Server.Run).
	if err := srv.Run(ctx, ln); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// listen listens on addr, the value of flag; an address in use says
// what to do about it.
func listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s %s: the address is in use, by another jobwatch or another program: stop that one, or pick another address with %s", flag, addr, flag)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return ln, nil
}

// serveMetrics moves /metrics off the API's port to a listener of its
// own, ln, listening at addr (--metrics-addr), and serves it there, over
// HTTP/1.1, until stop is called. That listener answers /metrics only and
// asks for no token.
func serveMetrics(srv *server.Server, ln net.Listener, addr string, log *slog.Logger) (stop func()) {
	host, _, _ := net.SplitHostPort(addr) // checked by parseServeFlags
	hs := &http.Server{
		Handler:           srv.MoveMetrics(isLoopback(host)),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A scrape of a busy server takes milliseconds; a reader that
		// takes longer is not a scraper.
		WriteTimeout:   time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener stopped with an error", "err", err)
		}
	}
}

// loadConfig reads the configuration file at path, and the rules the
// engine keeps from it: every key of the format, schedules included (see
// config.File.Rules).
func loadConfig(path string) (*config.File, jobtype.Rules, error) {
	f, err := config.Load(path)
	if err != nil {
		return nil, jobtype.Rules{}, err
	}
	rules, err := f.Rules()
	return f, rules, err
}

// reloadOnHangup calls reload on every SIGHUP until the returned function
// is called. configReloads and tokenReloads each swap what they read whole,
// so parked calls stay parked and each later decision sees either the old
// file or the new one; a file with a mistake is refused and logged, and
// the one in effect stays.
func reloadOnHangup(log *slog.Logger, reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				log.Debug("SIGHUP: reloading")
				reload()
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

// configReloads reads the config file again on each SIGHUP and hands
// its rules to engine; a file with a mistake is refused, logged and
// returned. A file that parses but no longer declares queues, pools,
// schedules, tenants or the webhook that the one in effect did is
// applied, as an operator may mean it, but logged at warn naming them,
// so a copy a deploy cut off after a line is seen, as a tokens file
// that lost tokens is. record is told whether a reload took before the
// log says so, so that /metrics agrees with the log by the time it is
// written. Reloads run one at a time (reloadOnHangup).
type configReloads struct {
	engine   *jobs.Engine
	path     string
	log      *slog.Logger
	record   func(took bool, fingerprint string) // of the rules in effect
	inEffect *config.File                        // the file whose rules the engine has
}

func (r *configReloads) reload() (config.Removed, error) {
	f, rules, err := loadConfig(r.path)
	if err == nil {
		err = r.engine.SetRules(rules)
	}
	if err != nil {
		r.record(false, "")
		// One line per reload: the mistakes, joined, in the order of the file.
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		r.log.Error("config reload refused; the config in effect stays", "config", r.path, "err", msg)
		return config.Removed{}, fmt.Errorf("config %s refused; the config in effect stays: %s", r.path, msg)
	}
	fingerprint := config.Fingerprint(rules, r.engine.Retention())
	r.record(true, fingerprint)
	removed := f.RemovedSince(r.inEffect)
	r.inEffect = f
	attrs := []any{"config", r.path, "config_fingerprint", fingerprint, "queues", len(rules.Queues), "schedules", len(rules.Schedules),
		"strict", rules.Strict, "retention", r.engine.Retention()}
	if removed.Empty() {
		r.log.Info("config reloaded", attrs...)
	} else {
		r.log.Warn("config reloaded without "+removed.String(), attrs...)
	}
	return removed, nil
}

// removedWarning is what "jobwatch reload" tells its operator of a
// config reload that removed what the file before declared.
func removedWarning(path string, removed config.Removed) string {
	return fmt.Sprintf("config %s no longer declares %s, which serve has dropped: if the file was cut short (a half-written copy), put it back whole and reload again", path, removed)
}

// tokenReloads reads the tokens file again on each SIGHUP and hands it
// to srv, which ends the calls of the tokens it no longer lists. A file
// that lists no token is refused unless it says tokens: [] (see
// auth.ParseTokens), and a reload that changes how many tokens there are
// is logged at warn with both counts, so a copy that dropped half the
// file is seen. Reloads run one at a time (reloadOnHangup).
type tokenReloads struct {
	srv   interface{ SetTokens(*auth.Tokens) }
	path  string
	log   *slog.Logger
	known int // how many tokens the file in effect lists
}

func (r *tokenReloads) reload() error {
	tokens, err := auth.LoadTokens(r.path)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		r.log.Error("tokens reload refused; the tokens in effect stay", "tokens", r.path, "tokens_known", r.known, "err", msg)
		return fmt.Errorf("tokens %s refused; the tokens in effect stay: %s", r.path, msg)
	}
	r.srv.SetTokens(tokens)
	before := r.known
	r.known = tokens.Len()
	switch attrs := []any{"tokens", r.path, "tokens_before", before, "tokens_known", r.known}; {
	case r.known == 0:
		r.log.Warn("tokens reloaded: the file says tokens: [], so every call but GetServerInfo and the health checks is now refused", attrs...)
	case r.known != before:
		r.log.Warn("tokens reloaded: the number of tokens changed", attrs...)
	default:
		r.log.Info("tokens reloaded", attrs...)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// listFlag is a flag of comma-separated values (read with splitList)
// that may also be given again: --queue a --queue b is --queue a,b,
// where a string flag keeps only the last, and a filter would lose the
// first without a word.
type listFlag struct{ s *string }

func (f listFlag) String() string {
	if f.s == nil {
		return ""
	}
	return *f.s
}

func (f listFlag) Set(v string) error {
	if *f.s != "" && v != "" {
		v = *f.s + "," + v
	}
	*f.s = v
	return nil
}

// onceFlag is a string flag that refuses to be given twice, where a
// string flag keeps only the last: for the one-value parts of a filter
// that acts on jobs, which a second value would replace unseen.
type onceFlag struct {
	s   *string
	set *bool
}

func (f onceFlag) String() string {
	if f.s == nil {
		return ""
	}
	return *f.s
}

func (f onceFlag) Set(v string) error {
	if *f.set {
		return fmt.Errorf("given twice (%q, then %q): it takes one value", *f.s, v)
	}
	*f.s, *f.set = v, true
	return nil
}

// onceVar defines a string flag that refuses to be given twice.
func onceVar(fs *flag.FlagSet, p *string, name, usage string) {
	fs.Var(onceFlag{p, new(bool)}, name, usage)
}

// levelFlag is a log level as docs/OPERATING.md and --help spell it: "info",
// where slog.Level prints "INFO". The zero levelFlag prints "", so the
// flag package shows the default (info, slog's zero level) in --help.
type levelFlag struct{ level *slog.Level }

func (f levelFlag) String() string {
	if f.level == nil {
		return ""
	}
	return strings.ToLower(f.level.String())
}

func (f levelFlag) Set(s string) error { return f.level.UnmarshalText([]byte(s)) }
