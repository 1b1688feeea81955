package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/internal/yamlread"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Tokens is the set of tokens a tokens file names. The zero value (and
// nil) knows no token. A Tokens is never changed once read: a reload
// reads a new one, so it is safe for concurrent use.
type Tokens struct {
	entries []entry
}

type entry struct {
	digest    [sha256.Size]byte
	principal Principal
}

// TokenIDLength is how many hex digits of a token's SHA-256 name it in
// logs and metrics (Principal.TokenID): enough to tell the entries of a
// file apart, far too few to find the token.
const TokenIDLength = 12

// Len is how many tokens t knows.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Lookup returns the Principal the token names. It compares the token's
// SHA-256 with every entry's in constant time and never stops early, so
// how long it takes tells nothing about which entry, or how much of one,
// matched.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	if t == nil || token == "" {
		return Principal{}, false
	}
	digest := sha256.Sum256([]byte(token))
	// found is chosen without a branch on the comparison; the digests
	// of a file are distinct, so at most one entry matches.
	found := -1
	for i := range t.entries {
		match := subtle.ConstantTimeCompare(digest[:], t.entries[i].digest[:])
		found = subtle.ConstantTimeSelect(match, i, found)
	}
	if found < 0 {
		return Principal{}, false
	}
	return t.entries[found].principal, true
}

// Grants reports whether t still lets p do what it did: the token p was
// read from is in t with the same role, tenant, tenants and kinds. A
// reload ends the calls of every Principal the new file no longer grants.
func (t *Tokens) Grants(p Principal) bool {
	if t == nil {
		return false
	}
	for i := range t.entries {
		q := t.entries[i].principal
		if q.digest == p.digest {
			return q.Role == p.Role && q.Tenant == p.Tenant &&
				slices.Equal(q.Tenants, p.Tenants) && slices.Equal(q.Kinds, p.Kinds)
		}
	}
	return false
}

// Digest is the hex SHA-256 of token, as the tokens file lists it.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// Error is one mistake in a tokens file: where it is and what is wrong,
// printed file:line:col: key: reason, the same type as a configuration
// file's (config.Error), read by the same reader. LoadTokens returns
// every mistake it finds, joined (errors.Join).
type Error = yamlread.Error

// LoadTokens reads and checks the tokens file at path.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return ParseTokens(path, data)
}

// ParseTokens checks data as the tokens file path (docs/SECURITY.md):
//
//	tokens:
//	  - sha256: <64 hex digits: the SHA-256 of the token, never the token>
//	    role: client | worker | admin | metrics
//	    tenant: acme        # client: required; others: refused
//	    tenants: [acme]     # worker only, optional: whose jobs (default all)
//	    kinds: [enrich]     # worker only, optional: which kinds (default all)
//	    name: deploy-bot    # optional: names the token in the history of what
//	                        # it did (default: its TokenID, a prefix of sha256)
//
// Unknown keys, a sha256 listed twice and keys that do not fit the role
// are refused with their line; path only names the file in errors, which
// never quote a value of the file (it may be a token pasted by mistake):
// the file is read by internal/yamlread, as the configuration file is.
//
// A file that lists no token is refused (ErrNoTokens) unless it says so
// on purpose with "tokens: []": an empty or half-written copy must not
// lock every caller out unnoticed. "tokens: []" knows no token: every
// call that needs one is refused until the file lists one again.
func ParseTokens(path string, data []byte) (*Tokens, error) {
	r, root, err := yamlread.Read(path, data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, noTokens(path)
	}
	p := &parser{r: r, t: &Tokens{}, seen: map[[sha256.Size]byte]string{}}
	listed := false // the file has a tokens key, [] included
	r.Mapping(root, "", yamlread.Fields{
		"tokens": func(k string, v *yaml.Node) {
			listed = true
			r.List(v, k, p.token)
		},
	})
	if err := r.Err(); err != nil {
		return nil, err
	}
	if !listed {
		return nil, noTokens(path)
	}
	return p.t, nil
}

// ErrNoTokens is why a tokens file that lists no token, without saying
// so with "tokens: []", is refused (errors.Is finds it in ParseTokens'
// and LoadTokens' error).
var ErrNoTokens = errors.New(`the file lists no token; write "tokens: []" to refuse every caller on purpose`)

func noTokens(path string) error {
	return fmt.Errorf("%s: %w", path, ErrNoTokens)
}

// parser fills t from the tree r walks.
type parser struct {
	r    *yamlread.Reader
	t    *Tokens
	seen map[[sha256.Size]byte]string // digest -> the key that listed it first
}

// token reads one entry of tokens at key.
func (p *parser) token(key string, n *yaml.Node) {
	r := p.r
	var (
		digest                 [sha256.Size]byte
		pr                     Principal
		sha, role              *yaml.Node // nil: the key is left out
		tenant, tenants, kinds *yaml.Node
		mistakesBefore         = r.Mistakes()
		tenantKey, tenantsKey  = key + ".tenant", key + ".tenants"
		kindsKey               = key + ".kinds"
	)
	ok := r.Mapping(n, key, yamlread.Fields{
		"sha256": func(k string, v *yaml.Node) {
			sha = v
			s, ok := r.String(v, k)
			if !ok {
				return
			}
			b, err := hex.DecodeString(s)
			if err != nil || len(b) != sha256.Size {
				// Never quote the value: it may be a token pasted by mistake.
				r.Fail(v, k, "must be 64 hex digits, the SHA-256 of the token (jobwatch token new prints it), not the token itself")
				return
			}
			copy(digest[:], b)
			if first, dup := p.seen[digest]; dup {
				r.Fail(v, k, "the same sha256 as %s: each token is listed once", first)
				return
			}
			p.seen[digest] = k
		},
		"role": func(k string, v *yaml.Node) {
			role = v
			s, _ := r.OneOf(v, k, string(RoleClient), string(RoleWorker), string(RoleAdmin), string(RoleMetrics))
			pr.Role = Role(s)
		},
		"tenant": func(k string, v *yaml.Node) {
			tenant = v
			pr.Tenant, _ = r.Name(v, k, jobtype.NameReason)
		},
		"tenants": func(k string, v *yaml.Node) {
			tenants = v
			pr.Tenants = p.names(v, k)
		},
		"kinds": func(k string, v *yaml.Node) {
			kinds = v
			pr.Kinds = p.names(v, k)
		},
		"name": func(k string, v *yaml.Node) {
			pr.Name, _ = r.Name(v, k, jobtype.NameReason)
		},
	})
	if !ok {
		return
	}
	if sha == nil {
		r.Fail(n, key+".sha256", "is required: the hex SHA-256 of the token")
	}
	switch {
	case role == nil:
		r.Fail(n, key+".role", "is required: client, worker, admin or metrics")
	case pr.Role == RoleClient:
		if tenant == nil {
			r.Fail(n, tenantKey, "is required for a client token: the tenant whose jobs it sees")
		}
		if tenants != nil {
			r.Fail(tenants, tenantsKey, "is for worker tokens; a client token has one tenant")
		}
		if kinds != nil {
			r.Fail(kinds, kindsKey, "is for worker tokens")
		}
	case pr.Role == RoleWorker:
		if tenant != nil {
			r.Fail(tenant, tenantKey, "is for client tokens; a worker token names the tenants it may claim for in tenants")
		}
	case pr.Role == RoleAdmin, pr.Role == RoleMetrics:
		why := "an admin token, which may do everything for every tenant"
		if pr.Role == RoleMetrics {
			why = "a metrics token, which reads /metrics (every tenant's counts) and nothing else"
		}
		for _, k := range []struct {
			n   *yaml.Node
			key string
		}{{tenant, tenantKey}, {tenants, tenantsKey}, {kinds, kindsKey}} {
			if k.n != nil {
				r.Fail(k.n, k.key, "is refused for %s", why)
			}
		}
	}
	if r.Mistakes() > mistakesBefore {
		return
	}
	pr.digest = digest
	pr.TokenID = hex.EncodeToString(digest[:])[:TokenIDLength]
	if pr.Name == "" {
		pr.Name = pr.TokenID
	}
	p.t.entries = append(p.t.entries, entry{digest: digest, principal: pr})
}

// names reads a non-empty list of names; leaving the key out is how a
// worker token says "all". A name listed twice counts once.
func (p *parser) names(n *yaml.Node, key string) []string {
	names, ok := p.r.Names(n, key, jobtype.NameReason)
	if !ok {
		return nil
	}
	if len(n.Content) == 0 {
		p.r.Fail(n, key, "is empty, which would allow nothing; leave the key out to allow all")
		return nil
	}
	var out []string
	for _, s := range names {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
