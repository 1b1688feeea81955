package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/config"
	"github.com/jobwatch/jobwatch/jobs"
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
// the same type as a configuration file's, printed file:line:col: key:
// reason. LoadTokens returns every mistake it finds, joined (errors.Join).
type Error = config.Error

// LoadTokens reads and checks the tokens file at path.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return ParseTokens(path, data)
}

// ParseTokens checks data as the tokens file path (README "Security"):
//
//	tokens:
//	  - sha256: <64 hex digits: the SHA-256 of the token, never the token>
//	    role: client | worker | admin | metrics
//	    tenant: acme        # client: required; others: refused
//	    tenants: [acme]     # worker only, optional: whose jobs (default all)
//	    kinds: [enrich]     # worker only, optional: which kinds (default all)
//
// Unknown keys, a sha256 listed twice and keys that do not fit the role
// are refused with their line; path only names the file in errors, which
// never quote a value of the file (it may be a token pasted by mistake).
//
// A file that lists no token is refused (ErrNoTokens) unless it says so
// on purpose with "tokens: []": an empty or half-written copy must not
// lock every caller out unnoticed. "tokens: []" knows no token: every
// call that needs one is refused until the file lists one again.
func ParseTokens(path string, data []byte) (*Tokens, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, noTokens(path)
	case err != nil:
		return nil, &Error{Path: path, Reason: "not valid YAML: " + unquoted(err.Error())}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &Error{Path: path, Line: more.Line, Column: more.Column, Reason: "a tokens file holds one YAML document; remove the second"}
	}
	p := &parser{path: path, t: &Tokens{}, seen: map[[sha256.Size]byte]string{}}
	root := doc.Content[0]
	if root.ShortTag() == "!!null" {
		return nil, noTokens(path)
	}
	listed := false // the file has a tokens key, [] included
	p.mapping(root, "", fields{
		"tokens": func(k string, v *yaml.Node) {
			listed = true
			if v.Kind != yaml.SequenceNode {
				p.fail(v, k, "must be a list (lines starting with -), got %s", describe(v))
				return
			}
			for i, item := range v.Content {
				p.token(fmt.Sprintf("%s[%d]", k, i), deref(item))
			}
		},
	})
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
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

type fields map[string]func(key string, v *yaml.Node)

// parser walks the YAML tree, filling t and collecting every mistake.
type parser struct {
	path string
	t    *Tokens
	seen map[[sha256.Size]byte]string // digest -> the key that listed it first
	errs []error
}

func (p *parser) fail(n *yaml.Node, key, format string, args ...any) {
	p.errs = append(p.errs, &Error{Path: p.path, Line: n.Line, Column: n.Column, Key: key, Reason: fmt.Sprintf(format, args...)})
}

// token reads one entry of tokens at key.
func (p *parser) token(key string, n *yaml.Node) {
	var (
		digest                 [sha256.Size]byte
		pr                     Principal
		sha, role              *yaml.Node // nil: the key is left out
		tenant, tenants, kinds *yaml.Node
		errsBefore             = len(p.errs)
		tenantKey, tenantsKey  = key + ".tenant", key + ".tenants"
		kindsKey               = key + ".kinds"
	)
	ok := p.mapping(n, key, fields{
		"sha256": func(k string, v *yaml.Node) {
			sha = v
			var s string
			if !p.str(v, k, &s) {
				return
			}
			b, err := hex.DecodeString(s)
			if err != nil || len(b) != sha256.Size {
				// Never quote the value: it may be a token pasted by mistake.
				p.fail(v, k, "must be 64 hex digits, the SHA-256 of the token (jobwatch token new prints it), not the token itself")
				return
			}
			copy(digest[:], b)
			if first, dup := p.seen[digest]; dup {
				p.fail(v, k, "the same sha256 as %s: each token is listed once", first)
				return
			}
			p.seen[digest] = k
		},
		"role": func(k string, v *yaml.Node) {
			role = v
			var s string
			if !p.str(v, k, &s) {
				return
			}
			switch r := Role(s); r {
			case RoleClient, RoleWorker, RoleAdmin, RoleMetrics:
				pr.Role = r
			default:
				p.fail(v, k, "is not a role: client, worker, admin or metrics")
			}
		},
		"tenant": func(k string, v *yaml.Node) {
			tenant = v
			p.name(v, k, &pr.Tenant)
		},
		"tenants": func(k string, v *yaml.Node) {
			tenants = v
			pr.Tenants = p.names(v, k)
		},
		"kinds": func(k string, v *yaml.Node) {
			kinds = v
			pr.Kinds = p.names(v, k)
		},
	})
	if !ok {
		return
	}
	if sha == nil {
		p.fail(n, key+".sha256", "is required: the hex SHA-256 of the token")
	}
	switch {
	case role == nil:
		p.fail(n, key+".role", "is required: client, worker, admin or metrics")
	case pr.Role == RoleClient:
		if tenant == nil {
			p.fail(n, tenantKey, "is required for a client token: the tenant whose jobs it sees")
		}
		if tenants != nil {
			p.fail(tenants, tenantsKey, "is for worker tokens; a client token has one tenant")
		}
		if kinds != nil {
			p.fail(kinds, kindsKey, "is for worker tokens")
		}
	case pr.Role == RoleWorker:
		if tenant != nil {
			p.fail(tenant, tenantKey, "is for client tokens; a worker token names the tenants it may claim for in tenants")
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
				p.fail(k.n, k.key, "is refused for %s", why)
			}
		}
	}
	if len(p.errs) > errsBefore {
		return
	}
	pr.digest = digest
	pr.TokenID = hex.EncodeToString(digest[:])[:TokenIDLength]
	p.t.entries = append(p.t.entries, entry{digest: digest, principal: pr})
}

// mapping walks the mapping n at path prefix: each key must be one of
// fs, once, and have a value. It reports false when n is no mapping.
func (p *parser) mapping(n *yaml.Node, prefix string, fs fields) bool {
	if n.Kind != yaml.MappingNode {
		p.fail(n, prefix, "must be a mapping (key: value lines), got %s", describe(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		field, ok := fs[k.Value]
		switch {
		case !ok && looksLikeToken(k.Value):
			p.fail(k, prefix, "an unknown key that looks like a token (not shown)%s", knownKeys(fs))
			continue
		case !ok:
			p.fail(k, key, "unknown key%s", knownKeys(fs))
			continue
		case seen[k.Value]:
			p.fail(k, key, "given twice")
			continue
		}
		seen[k.Value] = true
		if v.ShortTag() == "!!null" {
			p.fail(k, key, "has no value")
			continue
		}
		field(key, v)
	}
	return true
}

// looksLikeToken reports whether a key may be a token pasted in the
// wrong place: one with jobwatch token new's prefix, or longer than any
// key.
func looksLikeToken(key string) bool {
	return strings.Contains(key, "jw_") || len(key) > 32
}

func knownKeys(fs fields) string {
	names := make([]string, 0, len(fs))
	for name := range fs {
		names = append(names, name)
	}
	slices.Sort(names)
	return " (known here: " + strings.Join(names, " ") + ")"
}

func (p *parser) str(n *yaml.Node, key string, dst *string) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.fail(n, key, "must be a string (quote it if it looks like a number), got %s", describe(n))
		return false
	}
	*dst = n.Value
	return true
}

// name reads a tenant or kind name: one the API would accept.
func (p *parser) name(n *yaml.Node, key string, dst *string) {
	var s string
	if !p.str(n, key, &s) {
		return
	}
	if s == "" {
		p.fail(n, key, "must not be empty")
		return
	}
	if err := jobs.CheckName(key, s); err != nil {
		p.fail(n, key, "%s", reasonOf(err))
		return
	}
	*dst = s
}

// names reads a non-empty list of names; leaving the key out is how a
// worker token says "all".
func (p *parser) names(n *yaml.Node, key string) []string {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, key, "must be a list such as [a, b], got %s", describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.fail(n, key, "is empty, which would allow nothing; leave the key out to allow all")
		return nil
	}
	var out []string
	for i, v := range n.Content {
		var s string
		p.name(deref(v), fmt.Sprintf("%s[%d]", key, i), &s)
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func reasonOf(err error) string {
	var inv *jobs.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}

// quotedRE is what YAML's syntax errors quote from the file (an anchor's
// name, a character).
var quotedRE = regexp.MustCompile(`'[^']*'`)

// unquoted is a YAML syntax error without what it quotes of the file.
func unquoted(msg string) string {
	return quotedRE.ReplaceAllString(strings.TrimPrefix(msg, "yaml: "), "'…'")
}

// deref follows an alias (*anchor) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describe says what n is without quoting it: a value in the wrong place
// of a tokens file may be a token pasted by mistake, and errors go to
// logs. The line and column show where it is.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	}
	return "a value"
}
