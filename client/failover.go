package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// A Client given several server addresses ("http://a:8080,http://b:8080")
// sends every call to one of them, the current one, and makes the next
// one current when a call finds the current one gone. Nothing is sent
// twice here: a call that failed after it was sent returns its error,
// and only the caller's own retry (or one of the client's retry loops)
// goes to the next address, because it may have been carried out (a
// SubmitJob committed just before its server died), and only the caller
// can tell whether that call may be made again. A call that was never
// sent, because no connection to its address could be made (refused, no
// such host), goes on to the next address at once, each address at most
// once: so a one-shot call, such as one jobwatch get, reaches the second
// server of the list when the first is down.

// splitServers splits a comma-separated list of server addresses,
// dropping blanks around them and empty entries.
func splitServers(list string) []string {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseServers checks a list of several addresses: each an http:// or
// https:// URL with a host, all with one scheme, since the client's
// transports are built for one (h2c for http://, TLS for https://).
func parseServers(addrs []string) ([]*url.URL, error) {
	if len(addrs) == 0 {
		return nil, errNoServer
	}
	var urls []*url.URL
	for _, a := range addrs {
		if err := validURL(a); err != nil {
			return nil, err
		}
		u, _ := url.Parse(a) // validURL parsed it
		if len(urls) > 0 && u.Scheme != urls[0].Scheme {
			return nil, fmt.Errorf("server addresses %s and %s: %w", addrs[0], a, errMixedSchemes)
		}
		u.Path = strings.TrimRight(u.Path, "/")
		u.RawPath = ""
		urls = append(urls, u)
	}
	return urls, nil
}

var (
	errNoServer     = errors.New("no server address")
	errMixedSchemes = errors.New("every server address must have the same scheme (all http:// or all https://)")
)

// servers is the address list of a Client with several, and which one
// calls go to now.
type servers struct {
	urls []*url.URL
	// err, when set, is why the list cannot be used: every call fails
	// with it.
	err error
	// turn counts the moves so far; calls go to urls[turn % len(urls)].
	// A call that fails moves the list on only from the turn it was sent
	// in (compare-and-swap), so a hundred calls failing together on one
	// address move it one step, not past the healthy ones behind it; and
	// because turn only grows, a call from a lap ago cannot move it.
	turn atomic.Uint64
	// onMove, if set, hears of each move (WithServerMoveNotify).
	onMove func(from, to string, cause error)
}

// newServers returns the servers of a list of several addresses and the
// address to build the generated clients with (the first, or a
// placeholder when the list is unusable).
func newServers(addrs []string) (*servers, string) {
	urls, err := parseServers(addrs)
	if err != nil {
		return &servers{err: fmt.Errorf("client: %w", err)}, "http://jobwatch.invalid"
	}
	return &servers{urls: urls}, urls[0].String()
}

// current is the address calls go to now and the turn it was read in.
func (s *servers) current() (*url.URL, uint64) {
	turn := s.turn.Load()
	return s.urls[turn%uint64(len(s.urls))], turn
}

// failed moves calls to the next address, unless another call already
// did since turn; cause is what the call sent in turn saw.
func (s *servers) failed(turn uint64, cause error) {
	if s.turn.CompareAndSwap(turn, turn+1) && s.onMove != nil {
		n := uint64(len(s.urls))
		s.onMove(s.urls[turn%n].Redacted(), s.urls[(turn+1)%n].Redacted(), cause)
	}
}

// errGone is the cause of a move on an answer that said the server
// cannot serve calls now (gone).
var errGone = errors.New("the server answered that it cannot serve calls now")

// failoverHTTP is the connect.HTTPClient of a Client with several
// servers: it sends each request to the current address and moves to the
// next when the request finds that address gone.
type failoverHTTP struct {
	next connect.HTTPClient
	s    *servers
	// base is the address the generated clients put in every request:
	// its path prefix gives way to the current address's.
	base *url.URL
}

func (f *failoverHTTP) Do(req *http.Request) (*http.Response, error) {
	if f.s.err != nil {
		// Not unavailable, which every retry loop would retry for ever.
		return nil, connect.NewError(connect.CodeInvalidArgument, f.s.err)
	}
	target, turn := f.s.current()
	ctx := req.Context()
	resp, err := f.next.Do(f.to(req, target, req.Body))
	for tries := 1; err != nil && neverSent(err) && ctx.Err() == nil && tries < len(f.s.urls); tries++ {
		dialErr, body := err, req.Body
		if body != nil && body != http.NoBody {
			if req.GetBody == nil {
				break
			}
			if body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		f.s.failed(turn, dialErr)
		target, turn = f.s.current()
		resp, err = f.next.Do(f.to(req, target, body))
	}
	if err != nil {
		// Refused, reset, timed out, the connection lost before an answer,
		// no such host: this address cannot serve now. A call the caller
		// gave up on says nothing of the server, unless it gave up
		// because the server did not answer in time (errUnanswered).
		if ctx.Err() == nil || unanswered(ctx) {
			f.s.failed(turn, cmp.Or(context.Cause(ctx), err))
		}
		return nil, err
	}
	if gone(resp) {
		f.s.failed(turn, errGone)
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, ctx: ctx, fail: func(err error) { f.s.failed(turn, err) }}
	return resp, nil
}

// to is req sent to target with body: a shallow copy, the caller's
// request left as it was.
func (f *failoverHTTP) to(req *http.Request, target *url.URL, body io.ReadCloser) *http.Request {
	out := req.WithContext(req.Context())
	u := *req.URL
	u.Scheme, u.Host, u.User = target.Scheme, target.Host, target.User
	u.Path = target.Path + strings.TrimPrefix(req.URL.Path, f.base.Path)
	u.RawPath = ""
	out.URL, out.Host, out.Body = &u, target.Host, body
	return out
}

// neverSent reports an error of a request that reached no server: no
// connection to its address could be made.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// gone reports an answer that says the server cannot serve calls now: a
// 503 (a jobwatch server whose database is away, a proxy with no server
// behind it), or a gRPC or gRPC-Web call ended at once with code
// unavailable.
func gone(resp *http.Response) bool {
	return resp.StatusCode == http.StatusServiceUnavailable ||
		resp.Header.Get("Grpc-Status") == "14" // codes.Unavailable, in a trailers-only answer
}

// errUnanswered is the cause of a call its caller abandoned because the
// server did not answer in time (remoteBackend's first tries): unlike
// other calls a caller gives up on, it moves the client to its next
// server, as a server that cannot be reached does. A server that froze
// (a stopped process, a host that stopped answering, its connection
// still open) is otherwise noticed only by the connection's pings.
var errUnanswered = errors.New("the server did not answer in time")

// unanswered reports whether ctx ended with errUnanswered.
func unanswered(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errUnanswered) }

// watchedBody is a response body that moves the client on when reading it
// fails for another reason than its end: the server went away in the
// middle of an answer (a stream, a parked call).
type watchedBody struct {
	io.ReadCloser
	ctx    context.Context
	fail   func(error)
	closed atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// After Close, or once the caller's ctx ended, a failed read is the
	// caller's doing.
	if err != nil && err != io.EOF && !b.closed.Load() && (b.ctx.Err() == nil || unanswered(b.ctx)) {
		b.fail(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}
