// Package auth decides who a caller is: it reads the tokens file (serve
// --tokens), matches a request's bearer token against it in constant
// time, and carries the caller's Principal in the request's context for
// the handlers to check what it may do. It never logs or returns a token.
package auth

import "context"

// Role is what a token may do (docs/SECURITY.md, "The tokens file and
// the roles").
type Role string

const (
	// RoleClient submits, gets, lists, cancels, starts, waits on and
	// watches the jobs of its one tenant.
	RoleClient Role = "client"
	// RoleWorker calls WorkerService only, claiming within its tenants
	// and kinds.
	RoleWorker Role = "worker"
	// RoleAdmin may do everything, for every tenant.
	RoleAdmin Role = "admin"
	// RoleMetrics may read /metrics and call nothing else: the token a
	// Prometheus scraper is given when /metrics shares the API's port on
	// a server with tokens (admin tokens may read it too).
	RoleMetrics Role = "metrics"
)

// Principal is the caller a token names.
type Principal struct {
	Role Role
	// Tenant is a client's tenant; empty for workers and admins.
	Tenant string
	// Tenants and Kinds bound what a worker may claim; empty: any.
	Tenants []string
	Kinds   []string
	// TokenID names the token in logs and metrics without revealing it:
	// a short prefix of its SHA-256, as the tokens file lists it.
	TokenID string
	// Name is the token's name in the tokens file (name:), or TokenID
	// when the file gives none. It says who acted in a job's history.
	Name string

	// digest is the token's SHA-256, which Tokens.Grants looks for after
	// a reload.
	digest [32]byte
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller's Principal, and false when the server
// runs without a tokens file (everyone may do everything).
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Anonymous is who acted when the server runs without a tokens file.
const Anonymous = "anonymous"

// Describe names p as a job's history and the logs record who did an
// operator's action: the token's name, then its role and, for a client,
// its tenant, as in "deploy-bot (client, tenant acme)" or "ops (admin)".
func (p Principal) Describe() string {
	name := p.Name
	if name == "" {
		name = p.TokenID
	}
	if p.Tenant != "" {
		return name + " (" + string(p.Role) + ", tenant " + p.Tenant + ")"
	}
	return name + " (" + string(p.Role) + ")"
}

// DescribeCaller is Describe of ctx's Principal, or Anonymous when the
// server runs without a tokens file.
func DescribeCaller(ctx context.Context) string {
	p, ok := FromContext(ctx)
	if !ok {
		return Anonymous
	}
	return p.Describe()
}
