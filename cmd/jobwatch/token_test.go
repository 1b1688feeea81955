package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/auth"
)

func TestTokenNewPrintsATokenAndTheEntryServeAccepts(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want auth.Principal
	}{
		{"a client token", []string{"--role", "client", "--tenant", "acme"}, auth.Principal{Role: auth.RoleClient, Tenant: "acme"}},
		{"a worker token with tenants and kinds", []string{"--role", "worker", "--tenants", "acme, 12", "--kinds", "enrich"},
			auth.Principal{Role: auth.RoleWorker, Tenants: []string{"acme", "12"}, Kinds: []string{"enrich"}}},
		{"a worker token for everything", []string{"--role", "worker"}, auth.Principal{Role: auth.RoleWorker}},
		{"an admin token", []string{"--role", "admin"}, auth.Principal{Role: auth.RoleAdmin}},
	}
	tokenLine := regexp.MustCompile(`(?m)^token: (jw_[A-Za-z0-9_-]{43})$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), append([]string{"token", "new"}, tt.args...), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			m := tokenLine.FindStringSubmatch(stdout.String())
			if m == nil {
				t.Fatalf("no token line in %q", stdout.String())
			}
			entry := stdout.String()[strings.Index(stdout.String(), "  - sha256:"):]
			tokens, err := auth.ParseTokens("pasted.yaml", []byte("tokens:\n"+entry))
			if err != nil {
				t.Fatalf("the printed entry is refused: %v\n%s", err, entry)
			}
			got, ok := tokens.Lookup(m[1])
			if !ok {
				t.Fatalf("the printed entry does not know the printed token:\n%s", stdout.String())
			}
			if got.Role != tt.want.Role || got.Tenant != tt.want.Tenant || !slices.Equal(got.Tenants, tt.want.Tenants) || !slices.Equal(got.Kinds, tt.want.Kinds) {
				t.Errorf("the entry grants %+v, want %+v", got, tt.want)
			}
			if strings.Count(stdout.String(), m[1]) != 1 {
				t.Errorf("the token is printed more than once")
			}
		})
	}
}

func TestTokenNewMakesADifferentTokenEachTime(t *testing.T) {
	seen := map[string]bool{}
	for range 5 {
		var stdout bytes.Buffer
		run(context.Background(), []string{"token", "new", "--role", "admin"}, &stdout, io.Discard)
		line, _, _ := strings.Cut(stdout.String(), "\n")
		if seen[line] {
			t.Fatalf("%s twice", line)
		}
		seen[line] = true
	}
}

func TestTokenNewRefusesWhatTheFileWouldRefuse(t *testing.T) {
	tests := []struct {
		name, want string
		args       []string
	}{
		{"no subcommand", "token takes a subcommand", []string{"token"}},
		{"no role", "--role is required", []string{"token", "new"}},
		{"an unknown role", `--role "root"`, []string{"token", "new", "--role", "root"}},
		{"a client without a tenant", "--role client needs --tenant", []string{"token", "new", "--role", "client"}},
		{"a client with kinds", "are for --role worker", []string{"token", "new", "--role", "client", "--tenant", "a", "--kinds", "x"}},
		{"a worker with a tenant", "a worker token takes --tenants", []string{"token", "new", "--role", "worker", "--tenant", "a"}},
		{"an admin with tenants", "--tenant, --tenants and --kinds are refused", []string{"token", "new", "--role", "admin", "--tenants", "a"}},
		{"a tenant that is no name", `--tenant "a b": may only contain`, []string{"token", "new", "--role", "client", "--tenant", "a b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, %q; want exit 2 saying %q", code, stderr.String(), tt.want)
			}
			if strings.Contains(stdout.String(), "jw_") {
				t.Errorf("a refused token new printed a token: %q", stdout.String())
			}
		})
	}
}
