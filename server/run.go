package server

// Running a server and its engine together, and the rule that keeps a
// server without authentication on this machine.

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// ErrNoAuthBeyondLoopback is what Serve and Run refuse to do by default:
// listen beyond loopback without Tokens. Their error wraps it and says
// how to go on (Config.Tokens, a loopback address, or Config.Insecure).
var ErrNoAuthBeyondLoopback = errors.New("a listener beyond loopback without authentication")

// Run runs the engine's periodic duties and serves on ln until ctx ends,
// in the order that loses nothing, and returns once both have stopped:
//
//  1. The engine's duties start (Engine.Run: lease expiry, retries due,
//     schedules, retention, alerts), before the first call is accepted.
//  2. Serve answers on ln until ctx ends.
//  3. Serve shuts down: health turns NOT_SERVING, Engine.Shutdown makes
//     every parked WaitJob, WatchJob and ClaimJob answer OK at once (in
//     this process too: in-process workers' claims return), streams end,
//     and calls in flight get up to ShutdownGrace to finish.
//  4. Only then do the engine's duties stop, so that calls finishing
//     during the grace period still see leases expire and jobs retried.
//
// If serving fails before ctx ends, Run shuts the engine down all the
// same. A listener Serve refuses (beyond loopback without Tokens or
// Insecure) is refused before the engine's duties start. Run closes ln.
// It returns Serve's error, joined with the engine's if Engine.Run
// failed. The store stays open: close it after Run returns.
//
// jobwatch serve and jobwatch demo run this way; an embedder that
// builds its own engine and server should too.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	if err := s.checkListener(ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	// Not ctx: the duties outlive the serving by the grace period.
	dutiesCtx, stopDuties := context.WithCancel(context.Background())
	defer stopDuties()
	duties := make(chan error, 1)
	go func() { duties <- s.engine.Run(dutiesCtx) }()

	serveErr := s.Serve(ctx, ln)
	s.engine.Shutdown() // Serve did already, unless serving failed
	stopDuties()
	engineErr := <-duties
	if errors.Is(engineErr, context.Canceled) {
		engineErr = nil
	}
	if engineErr != nil {
		engineErr = fmt.Errorf("engine: %w", engineErr)
	}
	return errors.Join(serveErr, engineErr)
}

// checkListener refuses a listener beyond loopback when no token is
// asked for, unless Config.Insecure says the server is exposed on
// purpose.
func (s *Server) checkListener(addr net.Addr) error {
	if s.authRequired || s.cfg.Insecure || localOnly(addr) {
		return nil
	}
	return fmt.Errorf("serve on %s: %w: anyone who can reach it could read every tenant's jobs and submit, cancel and run jobs; "+
		"give Config.Tokens (serve --tokens FILE), listen on 127.0.0.1 or [::1], "+
		"or set Config.Insecure (serve --insecure) to expose it on purpose", addr, ErrNoAuthBeyondLoopback)
}

// localOnly reports whether addr can be reached from this machine only:
// a TCP address on loopback, or a Unix socket. An unspecified address
// (0.0.0.0, ::) listens on every interface, so it is not.
func localOnly(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
