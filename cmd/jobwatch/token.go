package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/jobtype"
)

const tokenUsage = `Usage: jobwatch token new --role client|worker|admin|metrics [flags]

Prints a fresh random bearer token, once, and the entry to paste into the
tokens file (serve --tokens) under "tokens:". The file keeps only the
token's SHA-256, so the token cannot be shown again: hand it to its user
now. SIGHUP makes serve read the file again (see docs/SECURITY.md).

  jobwatch token new --role client --tenant acme
  jobwatch token new --role worker --tenants acme,globex --kinds enrich
  jobwatch token new --role admin
  jobwatch token new --role metrics   # for a Prometheus scraper of /metrics

Flags:
`

// tokenPrefix starts every token jobwatch makes, so one found in a log or
// a repository is recognised as jobwatch's (secret scanners match on it).
const tokenPrefix = "jw_"

// tokenBytes is a token's randomness: 256 bits.
const tokenBytes = 32

func token(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var role, tenant, tenants, kinds string
	fs := newFlagSet("token new", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenUsage); fs.PrintDefaults() }
	fs.StringVar(&role, "role", "", "`role`: what the token may do: client (its tenant's jobs), worker (WorkerService), admin (everything) or metrics (read /metrics only)")
	fs.StringVar(&tenant, "tenant", "", "a client token's `tenant` (required with --role client)")
	fs.Var(listFlag{&tenants}, "tenants", "a worker token's comma-separated `tenants` whose jobs it may claim (default: all)")
	fs.Var(listFlag{&kinds}, "kinds", "a worker token's comma-separated job `kinds` it may claim (default: all)")
	if len(args) == 0 || args[0] != "new" {
		if err := parseFlags(fs, args); err != nil { // -h prints the usage
			return err
		}
		return usageError{`token takes a subcommand: "jobwatch token new --role ..." (see jobwatch help token)`}
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("token new takes no arguments, got %q", fs.Args())}
	}
	secret := make([]byte, tokenBytes)
	rand.Read(secret) // never fails (crypto/rand); it crashes the program first
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret)
	entry, err := tokenEntry(auth.Digest(tok), auth.Role(role), tenant, splitList(tenants), splitList(kinds))
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "token: %s\n\n", tok)
	fmt.Fprintln(stdout, "Give the token to its user now: it is not stored and cannot be shown again.")
	fmt.Fprintln(stdout, `Paste this entry under "tokens:" in the tokens file, then run jobwatch reload --pid-file FILE (or send serve a SIGHUP):`)
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, entry)
	return nil
}

// tokenEntry is the entry of the tokens file for the token whose SHA-256
// is digest, checked by the parser serve uses, so what it prints is what
// serve accepts.
func tokenEntry(digest string, role auth.Role, tenant string, tenants, kinds []string) (string, error) {
	switch role {
	case auth.RoleClient:
		if tenant == "" {
			return "", usageError{"--role client needs --tenant: the tenant whose jobs the token sees"}
		}
		if len(tenants) > 0 || len(kinds) > 0 {
			return "", usageError{"--tenants and --kinds are for --role worker"}
		}
	case auth.RoleWorker:
		if tenant != "" {
			return "", usageError{"--tenant is for --role client; a worker token takes --tenants"}
		}
	case auth.RoleAdmin:
		if tenant != "" || len(tenants) > 0 || len(kinds) > 0 {
			return "", usageError{"an admin token may do everything for every tenant: --tenant, --tenants and --kinds are refused"}
		}
	case auth.RoleMetrics:
		if tenant != "" || len(tenants) > 0 || len(kinds) > 0 {
			return "", usageError{"a metrics token reads /metrics, every tenant's counts, and nothing else: --tenant, --tenants and --kinds are refused"}
		}
	case "":
		return "", usageError{"--role is required: client, worker, admin or metrics"}
	default:
		return "", usageError{fmt.Sprintf("--role %q: client, worker, admin or metrics", role)}
	}
	for flag, names := range map[string][]string{"tenant": {tenant}, "tenants": tenants, "kinds": kinds} {
		for _, name := range names {
			if reason := jobtype.NameReason(name); name != "" && reason != "" {
				return "", usageError{fmt.Sprintf("--%s %q: %s", flag, name, reason)}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - sha256: %s   # token id %s\n", digest, digest[:auth.TokenIDLength])
	fmt.Fprintf(&b, "    role: %s\n", role)
	if tenant != "" {
		fmt.Fprintf(&b, "    tenant: %s\n", yamlString(tenant))
	}
	for _, list := range []struct {
		key   string
		names []string
	}{{"tenants", tenants}, {"kinds", kinds}} {
		if len(list.names) == 0 {
			continue
		}
		quoted := make([]string, len(list.names))
		for i, n := range list.names {
			quoted[i] = yamlString(n)
		}
		fmt.Fprintf(&b, "    %s: [%s]\n", list.key, strings.Join(quoted, ", "))
	}
	if _, err := auth.ParseTokens("the new entry", []byte("tokens:\n"+b.String())); err != nil {
		return "", fmt.Errorf("the entry does not read back (a bug): %w", err)
	}
	return b.String(), nil
}

// yamlString writes s as YAML reads it back as the string s: bare when
// it can be, quoted when YAML would read a number, a boolean or syntax.
func yamlString(s string) string {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("["+s+"]"), &n); err == nil && len(n.Content) == 1 {
		if seq := n.Content[0]; len(seq.Content) == 1 && seq.Content[0].ShortTag() == "!!str" && seq.Content[0].Value == s && seq.Content[0].Style == 0 {
			return s
		}
	}
	return strconv.Quote(s)
}
