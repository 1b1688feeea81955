package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
)

// Bearer tokens are checked in one place, gate, a connect interceptor on
// every handler of JobService, WorkerService and QueueService: connect
// hands it the same procedure and headers for Connect, gRPC and gRPC-Web,
// and writes its refusals in each protocol's own way. gRPC health's
// unary Check stays open (it says nothing about jobs); its Watch and
// reflection take a token of any role (admitAnyToken, streams.go).
// /metrics takes a metrics or admin token on the API's port, read by the
// same rule (bearer), unless it is moved to a listener of its own
// (metrics.go).

// Errors a caller sees when its token does not let it in. None repeats
// the token.
var (
	errTokenRequired = errors.New("a bearer token is required")
	errTokenUnknown  = errors.New("the token is not known")
	// errTokenRevoked ends the calls, streams included, of a token a
	// reload removed or changed.
	errTokenRevoked = errors.New("the token is no longer known")
)

// SetTokens swaps the tokens file in effect (serve does on SIGHUP): each
// later call is checked against t, and every call in flight whose token t
// no longer grants as it was (removed, or its role, tenant, tenants or
// kinds changed) ends at once with unauthenticated, WatchJob and WatchJobs
// streams included. It does nothing on a server made without
// Config.Tokens, which never asks for a token; t nil then knows no token.
func (s *Server) SetTokens(t *auth.Tokens) {
	if !s.authRequired {
		return
	}
	if t == nil {
		t = &auth.Tokens{}
	}
	s.tokens.Store(t)
	s.openCalls.endUngranted(t)
}

// gate is the interceptor that checks the bearer token of every call,
// and the role the procedure needs. It puts the caller's Principal in the
// context for the handlers, which scope what they read and change to the
// caller's tenant.
type gate struct{ s *Server }

func (g *gate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, end, err := g.s.admit(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		defer end()
		resp, err := next(ctx, req)
		if err := revoked(ctx); err != nil {
			return nil, err
		}
		return resp, err
	}
}

func (g *gate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *gate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, end, err := g.s.admit(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		defer end()
		err = next(ctx, conn)
		if rerr := revoked(ctx); rerr != nil {
			return rerr
		}
		return err
	}
}

// admit decides whether the call may run: it returns the context the
// handler runs in (carrying the caller's Principal, and cancelled if a
// reload revokes the token) and end, to call when the call is over.
func (s *Server) admit(ctx context.Context, procedure string, header http.Header) (context.Context, func(), error) {
	nothing := func() {}
	if !s.authRequired {
		if header.Get("Authorization") != "" {
			// A caller testing its token against a server without
			// tokens (the demo) would otherwise learn nothing.
			s.tokenIgnored.Do(func() {
				s.log.Warn("a call sent an Authorization header, but this server runs without --tokens: no token is checked and every caller may do everything (serve with --tokens to check them); said once")
			})
		}
		return ctx, nothing, nil
	}
	if procedure == jobwatchv1connect.JobServiceGetServerInfoProcedure {
		// GetServerInfo is how the page learns that it needs a token, and
		// what the token it has may do: it refuses no one, and runs with
		// the Principal of a token the tokens know.
		if token, err := bearer(header); err == nil {
			if p, ok := s.tokens.Load().Lookup(token); ok {
				ctx = auth.WithPrincipal(ctx, p)
			}
		}
		return ctx, nothing, nil
	}
	return s.admitToken(ctx, header, func(p auth.Principal) error { return roleRefusal(p, procedure) })
}

// readerOf is whose turn the reads of p's calls take (jobs.WithReader):
// a client's tenant, else the token's. So one tenant's reads, however
// many of its tokens make them, cannot keep another tenant's waiting.
func readerOf(p auth.Principal) string {
	if p.Role == auth.RoleClient {
		return "tenant/" + p.Tenant
	}
	return "token/" + p.TokenID
}

// roleRefusal is permission_denied if p's role may not call procedure.
func roleRefusal(p auth.Principal, procedure string) error {
	if !may(p.Role, procedure) {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("a %s token may not call %s; %s", p.Role, procedure, whoMay(procedure)))
	}
	return nil
}

// refuseTokensEarly answers a unary call of jobwatch's services that the
// gate would refuse for its token (none, unknown, or of a role that may
// not call it) before connect reads the request's body, which connect
// does for a unary call before any interceptor runs: so a caller without
// a token learns nothing of how its body would have been read, and the
// server inflates and decodes nothing for it. The gate still decides
// every call let through here (a reload may come in between), and the
// refusal is the gate's, word for word. Streams need no such check:
// connect runs the gate before it reads a stream's request.
func (s *Server) refuseTokensEarly(refusals *connect.ErrorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		procedure := r.URL.Path
		if !s.authRequired || r.Method != http.MethodPost || !unaryProcedures[procedure] ||
			procedure == jobwatchv1connect.JobServiceGetServerInfoProcedure || !refusals.IsSupported(r) {
			next.ServeHTTP(w, r)
			return
		}
		refuse := func(err error) {
			noteRefusal(r, connect.CodeOf(err), refusalMessage(err))
			if r.ProtoMajor == 1 {
				// The body is left unread: net/http would read what is
				// left of it (up to 256 KiB) before it writes the answer,
				// so as to keep the connection, and a body that never
				// comes would hold the refusal until --body-timeout.
				w.Header().Set("Connection", "close")
			}
			_ = refusals.Write(w, r, err)
		}
		token, err := bearer(r.Header)
		if err != nil {
			refuse(connect.NewError(connect.CodeUnauthenticated, err))
			return
		}
		p, ok := s.tokens.Load().Lookup(token)
		if !ok {
			refuse(connect.NewError(connect.CodeUnauthenticated, errTokenUnknown))
			return
		}
		if err := roleRefusal(p, procedure); err != nil {
			refuse(err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusalMessage is the message of a refusal, without its code, for
// the call's debug line (noteRefusal).
func refusalMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// admitToken admits a call whose bearer token the tokens know and whose
// Principal passes check (nil: any role), as admit describes.
func (s *Server) admitToken(ctx context.Context, header http.Header, check func(auth.Principal) error) (context.Context, func(), error) {
	nothing := func() {}
	token, err := bearer(header)
	if err != nil {
		return ctx, nothing, connect.NewError(connect.CodeUnauthenticated, err)
	}
	p, ok := s.tokens.Load().Lookup(token)
	if !ok {
		return ctx, nothing, connect.NewError(connect.CodeUnauthenticated, errTokenUnknown)
	}
	noteCaller(ctx, p)
	if check != nil {
		if err := check(p); err != nil {
			return ctx, nothing, err
		}
	}
	ctx = jobs.WithReader(auth.WithPrincipal(ctx, p), readerOf(p))
	// cancel is a reload's, to end the call whose token it revoked. The
	// call's end does not cancel ctx: connect writes a unary answer after
	// the interceptors return, and what waits for the call's context to
	// end (the send budget's hold on that answer) must wait for that
	// too. ctx ends with the request's, once the answer is written.
	ctx, cancel := context.WithCancelCause(ctx)
	id := s.openCalls.add(p, cancel)
	end := func() { s.openCalls.remove(id) }
	// A reload that swapped the tokens between Lookup and add has not
	// seen this call: look again, now that a later reload will.
	if !s.tokens.Load().Grants(p) {
		end()
		return ctx, nothing, connect.NewError(connect.CodeUnauthenticated, errTokenUnknown)
	}
	return ctx, end, nil
}

// revoked is the error a call ends with when a reload revoked its token
// while it ran, whatever the handler answered: unauthenticated.
func revoked(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errTokenRevoked) {
		return connect.NewError(connect.CodeUnauthenticated, errTokenRevoked)
	}
	return nil
}

// bearer reads the token of the request's one "Authorization: Bearer
// <token>" header. It is the one rule for every protocol (Connect, gRPC,
// gRPC-Web) over HTTP/1.1 and HTTP/2 alike:
//
//   - exactly one Authorization header: two or more are refused, never
//     one of them picked, so a proxy that adds its own and a client
//     that sends another cannot disagree on who calls;
//   - spaces and tabs around the value are ignored, as HTTP/1.1 parsing
//     already drops them (HTTP/2 hands them over), so " Bearer t" means
//     the same on both;
//   - the scheme is Bearer, in any case (RFC 9110), then one or more
//     spaces, then the token: one or more characters, none of them a
//     space, a tab or another control character.
//
// Anything else is refused with an error that says what is wrong, never
// quoting the header (it may be a token).
func bearer(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch len(values) {
	case 0:
		return "", errTokenRequired
	case 1:
	default:
		return "", fmt.Errorf("%w: the request has %d Authorization headers; send exactly one", errTokenRequired, len(values))
	}
	value := strings.Trim(values[0], " \t")
	if strings.EqualFold(value, "Bearer") {
		return "", fmt.Errorf(`%w: the Authorization header has no token after "Bearer"`, errTokenRequired)
	}
	scheme, token, ok := strings.Cut(value, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf(`%w: the Authorization header must read "Bearer <token>"`, errTokenRequired)
	}
	token = strings.TrimLeft(token, " ")
	if strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "", fmt.Errorf("%w: the token in the Authorization header contains a space, a tab or a control character", errTokenRequired)
	}
	return token, nil
}

// may reports whether role may call procedure: clients JobService,
// workers WorkerService, admins everything (QueueService is admin only:
// it shows every tenant's counts and schedules).
func may(role auth.Role, procedure string) bool {
	if role == auth.RoleAdmin {
		return true
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	switch service {
	case jobwatchv1connect.JobServiceName:
		return role == auth.RoleClient
	case jobwatchv1connect.WorkerServiceName:
		return role == auth.RoleWorker
	}
	return false
}

// whoMay says which tokens may call procedure, for a refusal a person
// can act on.
func whoMay(procedure string) string {
	service, _, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	switch service {
	case jobwatchv1connect.JobServiceName:
		return "it takes a client token (or an admin one)"
	case jobwatchv1connect.WorkerServiceName:
		return "it takes a worker token (or an admin one)"
	}
	return "it takes an admin token"
}

// openCalls are the calls admitted with a token and not yet over, so a
// reload can end those whose token it revoked.
type openCalls struct {
	mu    sync.Mutex
	next  uint64
	calls map[uint64]openCall
}

type openCall struct {
	principal auth.Principal
	cancel    context.CancelCauseFunc
}

func (o *openCalls) add(p auth.Principal, cancel context.CancelCauseFunc) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[uint64]openCall{}
	}
	o.next++
	o.calls[o.next] = openCall{principal: p, cancel: cancel}
	return o.next
}

func (o *openCalls) remove(id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.calls, id)
}

// endUngranted ends every open call whose token t does not grant.
func (o *openCalls) endUngranted(t *auth.Tokens) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, c := range o.calls {
		if !t.Grants(c.principal) {
			c.cancel(errTokenRevoked)
			delete(o.calls, id)
		}
	}
}

// clientTenant is the tenant a client token confines the call to; ok is
// false for an admin, a worker and a server without tokens, which are not
// confined to one tenant.
func clientTenant(ctx context.Context) (tenant string, ok bool) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Role != auth.RoleClient {
		return "", false
	}
	return p.Tenant, true
}

// tenantFor is the tenant a call that names one at key (SubmitJob's
// "tenant", SubmitJobs' "jobs[i].tenant") acts for: a client's own when
// it names none or its own, and permission_denied when it names another.
// Others get what they named.
func tenantFor(ctx context.Context, key, requested string) (string, error) {
	tenant, confined := clientTenant(ctx)
	switch {
	case !confined, requested == tenant:
		return requested, nil
	case requested == "":
		return tenant, nil
	}
	return "", connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("%s: this token may only use tenant %q", key, tenant))
}

// workerScope narrows a claim to the worker token's tenants and kinds
// (each: any when the token names none).
// A request naming a kind the token may not claim is permission_denied
// rather than silently narrowed, so a misconfigured worker learns it at
// once instead of waiting for jobs it will never get; a request naming no
// kinds claims the token's kinds.
func workerScope(ctx context.Context, r *jobs.ClaimRequest) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Role != auth.RoleWorker {
		return nil
	}
	if len(p.Kinds) > 0 {
		if len(r.Kinds) == 0 {
			r.Kinds = slices.Clone(p.Kinds)
		}
		for i, k := range r.Kinds {
			if !slices.Contains(p.Kinds, k) {
				return connect.NewError(connect.CodePermissionDenied,
					fmt.Errorf("kinds[%d]: this token may not claim jobs of kind %q", i, k))
			}
		}
	}
	r.Tenants = slices.Clone(p.Tenants) // the request has no tenants of its own
	return nil
}

// callerNote is where gate leaves the caller it found (admitted or not)
// for callInterceptor, which runs around it, to log and count.
type callerNote struct {
	principal auth.Principal
	ok        bool
}

type callerNoteKey struct{}

func withCallerNote(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerNoteKey{}, &callerNote{})
}

func noteCaller(ctx context.Context, p auth.Principal) {
	if n, ok := ctx.Value(callerNoteKey{}).(*callerNote); ok {
		n.principal, n.ok = p, true
	}
}

func callerOf(ctx context.Context) (auth.Principal, bool) {
	if n, ok := ctx.Value(callerNoteKey{}).(*callerNote); ok && n.ok {
		return n.principal, true
	}
	return auth.Principal{}, false
}
