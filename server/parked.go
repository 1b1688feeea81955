package server

// Parked calls: how many WaitJob, WatchJob, WatchJobs, ClaimJob and
// other long-lived calls may park at once, in all, of one tenant and of
// one connection; which tenant a call counts against; and the answer
// (resource_exhausted, or ParkedCallsHeader on a wait) when a limit is
// full.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/internal/shallow"
	"github.com/jobwatch/jobwatch/jobtype"
)

// parkedCalls counts the calls parked now against the limit of their
// connection, the total limit and, when perTenant is set, the limit of
// their tenant. A call that finds any full is answered at once; nobody
// else's call is ended for it.
type parkedCalls struct {
	limit     int64
	perTenant int64 // 0: no per-tenant limit
	perConn   int64
	n         atomic.Int64
	metrics   *Metrics
	conns     *connMetrics

	mu      sync.Mutex
	tenants map[tenantPlaces]int64 // parked calls of each tenant with any, claims apart
	// refusedLabels are the tenants named by the tenant label of
	// jobwatch_parked_calls_tenant_refused_total other than those of a
	// token (see refusedLabel).
	refusedLabels map[string]bool
}

// tenantPlaces is what a tenant's limit counts: its workers' claims and
// its waits and watches each have a limit of their own, so that a client
// token, which parks waits, cannot keep its tenant's workers from
// parking their claims, nor workers the tenant's waits.
type tenantPlaces struct {
	tenant string
	claims bool
}

func newParkedCalls(limit, perTenant, perConn int, metrics *Metrics, conns *connMetrics) *parkedCalls {
	return &parkedCalls{
		limit:     int64(limit),
		perTenant: int64(max(0, perTenant)),
		perConn:   int64(perConn),
		metrics:   metrics,
		conns:     conns,
		tenants:   map[tenantPlaces]int64{},

		refusedLabels: map[string]bool{},
	}
}

// maxRefusedTenantLabels bounds the tenants that
// jobwatch_parked_calls_tenant_refused_total names besides those of
// tokens: a tenant a caller names (WatchJobs, SubmitJob with wait) or a
// job's, which without tokens anyone may choose, so that a client
// refused under ever new tenant names cannot add series without end.
// Past it such tenants count together as otherTenantsLabel.
const maxRefusedTenantLabels = 100

// otherTenantsLabel is the tenant label of the refusals past
// maxRefusedTenantLabels; no tenant name can be it.
const otherTenantsLabel = "(other)"

// refusedLabel is the tenant label of a refusal of tenant: the tenant
// itself when a token names it (bounded by the tokens file) or when it
// is one of the first maxRefusedTenantLabels others refused, else
// otherTenantsLabel. p.mu is held.
func (p *parkedCalls) refusedLabel(tenant string, ofToken bool) string {
	label := tenantLabel(tenant)
	if ofToken || tenant == "" || p.refusedLabels[tenant] {
		return label
	}
	if len(p.refusedLabels) >= maxRefusedTenantLabels {
		return otherTenantsLabel
	}
	p.refusedLabels[tenant] = true
	return label
}

// tokenNames reports whether the caller's token in ctx names tenant: a
// client token's tenant, or one of a worker token's tenants.
func tokenNames(ctx context.Context, tenant string) bool {
	p, ok := auth.FromContext(ctx)
	return ok && tenant != "" && (p.Tenant == tenant || slices.Contains(p.Tenants, tenant))
}

// Kinds of parked calls, as /metrics labels them.
const (
	parkWaitKind       = "wait"
	parkWatchKind      = "watch"
	parkClaimKind      = "claim"
	parkHealthKind     = "health_watch" // grpc.health.v1.Health/Watch
	parkReflectionKind = "reflection"   // a gRPC reflection stream
)

// kindNoun names a kind of parked call in a refusal.
func kindNoun(kind string) string {
	switch kind {
	case parkHealthKind:
		return "health Watch"
	case parkReflectionKind:
		return "reflection stream"
	}
	return kind
}

// park takes a place for a call of kind of tenant, made on the
// connection in ctx, or answers why there is none: the
// resource_exhausted error a watch or claim returns. A call whose tenant
// is not known (counted false, or no per-tenant limit) counts against its
// connection and the total alone.
func (p *parkedCalls) park(ctx context.Context, kind, tenant string, counted bool) (release func(), refused error) {
	return p.parkPlaces(ctx, kind, tenant, counted, 1)
}

// waitJobsPerPlace is how many of the jobs a WaitJobs waits for take one
// place of the total and tenant limits: a parked WaitJobs costs the
// server about 1 to 2.5 KiB a job (docs/BENCHMARKS.md, "Batches"), a
// parked WaitJob about 20 to 30 KiB, so that one WaitJobs of 1,000 jobs
// holds about as much as the 63 places it takes, and the limits bound
// memory whatever the calls.
const waitJobsPerPlace = 16

// waitJobsPlaces is how many places a WaitJobs of n jobs takes.
func waitJobsPlaces(n int) int64 {
	return max(1, int64((n+waitJobsPerPlace-1)/waitJobsPerPlace))
}

// parkPlaces is park for a call that takes places of the total and of its
// tenant (a WaitJobs: waitJobsPlaces), and one of its connection's.
func (p *parkedCalls) parkPlaces(ctx context.Context, kind, tenant string, counted bool, places int64) (release func(), refused error) {
	conn := connOf(ctx)
	if conn != nil && conn.parked.Add(1) > p.perConn {
		conn.parked.Add(-1)
		p.conns.parkConnRefused.WithLabelValues(kind).Inc()
		return nil, p.connLimitError(kind)
	}
	releaseCounted, refused := p.parkCounted(kind, tenant, tokenNames(ctx, tenant), counted, places)
	if conn == nil {
		return releaseCounted, refused
	}
	if refused != nil {
		conn.parked.Add(-1)
		return nil, refused
	}
	return func() {
		conn.parked.Add(-1)
		releaseCounted()
	}, nil
}

// parkCounted takes places of the total and of tenant; ofToken says
// that the caller's token names tenant.
func (p *parkedCalls) parkCounted(kind, tenant string, ofToken, counted bool, places int64) (release func(), refused error) {
	if p.n.Add(places) > p.limit {
		p.n.Add(-places)
		p.metrics.parkRefused.WithLabelValues(kind).Inc()
		return nil, p.limitError(kind)
	}
	releaseTotal := func() {
		p.n.Add(-places)
		p.metrics.parkedCalls.Sub(float64(places))
	}
	if p.perTenant == 0 || !counted {
		p.metrics.parkedCalls.Add(float64(places))
		return releaseTotal, nil
	}
	label := tenantLabel(tenant)
	key := tenantPlaces{tenant: tenant, claims: kind == parkClaimKind}
	other := tenantPlaces{tenant: tenant, claims: !key.claims}
	p.mu.Lock()
	if p.tenants[key]+places > p.perTenant {
		refusedLabel := p.refusedLabel(tenant, ofToken)
		p.mu.Unlock()
		p.n.Add(-places)
		p.metrics.tenantParkRefused.WithLabelValues(kind, refusedLabel).Inc()
		return nil, p.tenantLimitError(kind, tenant)
	}
	p.tenants[key] += places
	p.metrics.parkedByTenant.WithLabelValues(label).Add(float64(places))
	p.mu.Unlock()
	p.metrics.parkedCalls.Add(float64(places))
	return func() {
		p.mu.Lock()
		if p.tenants[key] -= places; p.tenants[key] == 0 {
			delete(p.tenants, key)
		}
		if p.tenants[other] == 0 && p.tenants[key] == 0 {
			// Only tenants with parked calls keep a series, so the
			// tenants a caller may name cannot grow /metrics for ever.
			p.metrics.parkedByTenant.DeleteLabelValues(label)
		} else {
			p.metrics.parkedByTenant.WithLabelValues(label).Sub(float64(places))
		}
		p.mu.Unlock()
		releaseTotal()
	}, nil
}

// tenantLabel is a tenant as /metrics shows it: claims of workers bound
// to no tenant count as "(none)", which no tenant name can be.
func tenantLabel(tenant string) string {
	if tenant == "" {
		return "(none)"
	}
	return tenant
}

// limitError is what a watch or claim gets when every place is taken.
func (p *parkedCalls) limitError(kind string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"the server already holds its limit of %d parked calls (waits, watches and claims; --max-parked-calls); "+
			"retry the %s later with backoff, or ask the operator to raise the limit", p.limit, kindNoun(kind)))
}

// connLimitError is what a watch or claim gets when its connection's
// places are taken.
func (p *parkedCalls) connLimitError(kind string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"this connection already holds its limit of %d parked calls (waits, watches, claims and other long-lived streams); "+
			"open another connection for more, or retry the %s later with backoff", p.perConn, kindNoun(kind)))
}

// tenantLimitError is what a watch or claim gets when its tenant's
// places are taken.
func (p *parkedCalls) tenantLimitError(kind, tenant string) error {
	who := fmt.Sprintf("tenant %q already holds its", tenant)
	if tenant == "" {
		who = "workers bound to no tenant already hold their"
	}
	what := "waits and watches; its workers' claims have a limit of their own"
	switch {
	case tenant == "":
		what = "claims"
	case kind == parkClaimKind:
		what = "claims of its workers; its waits and watches have a limit of their own"
	}
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"%s limit of %d parked calls (%s; --max-parked-calls-per-tenant); "+
			"retry the %s later with backoff, close calls you no longer need, or ask the operator to raise the limit",
		who, p.perTenant, what, kindNoun(kind)))
}

// parkWait takes a place for a WaitJob (or SubmitJob with wait) on job
// id. Its tenant is the caller's token's, else the job's, read here,
// before the call parks, and only while there is a per-tenant limit: one
// read by primary key, against a call that may park for a minute. A job
// that cannot be read counts against the total alone; the wait itself
// then answers the same error.
func (s *Server) parkWait(ctx context.Context, id string) (release func(), refused error) {
	tenant, counted := s.callTenant(ctx, s.jobTenant(id))
	return s.parked.park(ctx, parkWaitKind, tenant, counted)
}

// parkClaim takes a place for a ClaimJob. Its tenant is its worker
// token's first tenant; workers bound to no tenant (any token without
// tenants, and every worker without tokens) share the tenant "".
func (s *Server) parkClaim(ctx context.Context) (release func(), refused error) {
	tenant, counted := "", s.parked.perTenant > 0
	if p, ok := auth.FromContext(ctx); ok && len(p.Tenants) > 0 {
		tenant = p.Tenants[0]
	}
	return s.parked.park(ctx, parkClaimKind, tenant, counted)
}

// tenantOf finds the tenant a parked call counts against; ok false when
// it cannot be known (the call then counts against the total alone).
type tenantOf func(ctx context.Context) (tenant string, ok bool)

// callTenant is the tenant a parked call counts against: its token's
// when the token names one (a client's), else what of finds. With no
// per-tenant limit it is not looked for.
func (s *Server) callTenant(ctx context.Context, of tenantOf) (string, bool) {
	if s.parked.perTenant == 0 {
		return "", false
	}
	if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
		return p.Tenant, true
	}
	return of(ctx)
}

// jobTenant finds the tenant of job id in the store.
func (s *Server) jobTenant(id string) tenantOf {
	return func(ctx context.Context) (string, bool) {
		// On a goroutine of its own: the read is deep, and the call's
		// goroutine is about to park (see package shallow). Without the
		// call's cancellation: the SQLite driver would register a
		// context.AfterFunc with it, and the map that holds it stays
		// with the call's context for as long as the call is parked.
		// The read is the tenant of one row by primary key, none of
		// its payload or result.
		tenant, err := shallow.Call(func() (string, error) {
			return s.engine.TenantOf(context.WithoutCancel(ctx), id)
		})
		if err != nil {
			return "", false
		}
		return tenant, true
	}
}

// namedTenant is the tenant a request names; "" is jobtype.DefaultTenant, as
// for the engine.
func namedTenant(tenant string) tenantOf {
	return func(context.Context) (string, bool) {
		if tenant == "" {
			return jobtype.DefaultTenant, true
		}
		return tenant, true
	}
}

// ParkedCallsHeader is set to "full" on a WaitJob (or SubmitJob with
// wait) answer that did not park because MaxParkedCalls were parked: the
// state in it is current but the call did not wait, so a client that
// loops on WaitJob should back off before asking again, not spin.
const ParkedCallsHeader = "Jobwatch-Parked-Calls"

func markParkedCallsFull(ctx context.Context) {
	if call, ok := connect.CallInfoForHandlerContext(ctx); ok {
		call.ResponseHeader().Set(ParkedCallsHeader, "full")
	}
}

// parkWatch admits a WatchJob or WatchJobs stream: it takes a parked
// place (or answers resource_exhausted) and returns the stream's end on
// the engine's clock. Until done, every write of the stream is also cut
// at that end, so a stream blocked on a client that does not read still
// ends at its lifetime.
//
// of finds the stream's tenant when its caller's token does not name one
// (see callTenant).
func (s *Server) parkWatch(ctx context.Context, of tenantOf) (deadline time.Time, done func(), err error) {
	tenant, counted := s.callTenant(ctx, of)
	release, refused := s.parked.park(ctx, parkWatchKind, tenant, counted)
	if refused != nil {
		return time.Time{}, nil, refused
	}
	s.metrics.openWatches.Inc()
	deadline = s.capDeadline(ctx, s.cfg.StreamLifetime)
	lift := endStreamBy(ctx, deadline.Add(streamEndGrace))
	return deadline, func() {
		lift()
		s.metrics.openWatches.Dec()
		release()
	}, nil
}
