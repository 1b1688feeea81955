package auth_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/config"
)

// The example file: the digests of "acme-client-token",
// "worker-token" and "admin-token".
const exampleFile = `tokens:
  - sha256: 6702afda86bf2e55d06d328eed0fc08aecd8b7243a764e86e2a7c70d077773f9
    tenant: acme
    role: client
  - sha256: dedd02022dba76562722a9463558e4124c82c5e6a09e925e6b11eec9a7042bf7
    role: worker
    tenants: [acme]
    kinds: [enrich]
  - sha256: 10a4c7c9fc5206d6f36dc6944a81bb6f4a3cb0e25014ae3b12e6c3e52712292a
    role: admin
`

func TestLookupFindsThePrincipalOfEachTokenOfTheFile(t *testing.T) {
	tokens, err := auth.ParseTokens("tokens.yaml", []byte(exampleFile))
	if err != nil {
		t.Fatal(err)
	}
	if tokens.Len() != 3 {
		t.Fatalf("Len = %d, want 3", tokens.Len())
	}
	tests := []struct {
		token   string
		want    auth.Principal
		matches bool
	}{
		{"acme-client-token", auth.Principal{Role: auth.RoleClient, Tenant: "acme", TokenID: "6702afda86bf"}, true},
		{"worker-token", auth.Principal{Role: auth.RoleWorker, Tenants: []string{"acme"}, Kinds: []string{"enrich"}, TokenID: "dedd02022dba"}, true},
		{"admin-token", auth.Principal{Role: auth.RoleAdmin, TokenID: "10a4c7c9fc52"}, true},
		{"acme-client-token ", auth.Principal{}, false},
		{"6702afda86bf2e55d06d328eed0fc08aecd8b7243a764e86e2a7c70d077773f9", auth.Principal{}, false},
		{"", auth.Principal{}, false},
	}
	for _, tt := range tests {
		got, ok := tokens.Lookup(tt.token)
		if ok != tt.matches {
			t.Errorf("Lookup(%q) found = %v, want %v", tt.token, ok, tt.matches)
			continue
		}
		if got.Role != tt.want.Role || got.Tenant != tt.want.Tenant || got.TokenID != tt.want.TokenID ||
			strings.Join(got.Tenants, ",") != strings.Join(tt.want.Tenants, ",") || strings.Join(got.Kinds, ",") != strings.Join(tt.want.Kinds, ",") {
			t.Errorf("Lookup(%q) = %+v, want %+v", tt.token, got, tt.want)
		}
	}
}

func TestDigestIsWhatTheFileLists(t *testing.T) {
	if got := auth.Digest("acme-client-token"); got != "6702afda86bf2e55d06d328eed0fc08aecd8b7243a764e86e2a7c70d077773f9" {
		t.Errorf("Digest = %s", got)
	}
}

func TestAnUppercaseDigestMatchesToo(t *testing.T) {
	tokens, err := auth.ParseTokens("t.yaml", []byte("tokens:\n  - sha256: "+strings.ToUpper(auth.Digest("x"))+"\n    role: admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Lookup("x"); !ok {
		t.Error("an uppercase sha256 does not match its token")
	}
}

func TestGrantsKnowsWhetherAReloadKeptAToken(t *testing.T) {
	old, err := auth.ParseTokens("t.yaml", []byte(exampleFile))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := old.Lookup("acme-client-token")
	worker, _ := old.Lookup("worker-token")
	reloaded, err := auth.ParseTokens("t.yaml", []byte(`tokens:
  - sha256: 6702afda86bf2e55d06d328eed0fc08aecd8b7243a764e86e2a7c70d077773f9
    tenant: acme
    role: client
  - sha256: dedd02022dba76562722a9463558e4124c82c5e6a09e925e6b11eec9a7042bf7
    role: worker
    kinds: [enrich, resize]
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reloaded.Grants(client) {
		t.Error("a token kept as it was is no longer granted")
	}
	if reloaded.Grants(worker) {
		t.Error("a token whose kinds changed is still granted as it was")
	}
	admin, _ := old.Lookup("admin-token")
	if reloaded.Grants(admin) {
		t.Error("a removed token is still granted")
	}
	var none *auth.Tokens
	if none.Grants(client) || none.Len() != 0 {
		t.Error("a nil Tokens grants a token")
	}
}

// TestAFileThatListsNoTokenIsRefusedUnlessItSaysSo: an empty or
// half-written file (nothing, a comment, a document with no tokens key)
// is refused, naming the file and how to lock everyone out on purpose;
// "tokens: []" is that purpose and knows no token.
func TestAFileThatListsNoTokenIsRefusedUnlessItSaysSo(t *testing.T) {
	for _, data := range []string{"", "# nothing yet\n", "---\n", "{}\n", "~\n"} {
		tokens, err := auth.ParseTokens("t.yaml", []byte(data))
		if !errors.Is(err, auth.ErrNoTokens) || tokens != nil {
			t.Errorf("%q: %v, %v; want ErrNoTokens", data, tokens, err)
			continue
		}
		if !strings.Contains(err.Error(), "t.yaml: the file lists no token") || !strings.Contains(err.Error(), `"tokens: []"`) {
			t.Errorf("%q: the refusal %q does not say what to write", data, err)
		}
	}
	for _, data := range []string{"tokens: []\n", "# everyone locked out while we rotate\ntokens: []\n"} {
		tokens, err := auth.ParseTokens("t.yaml", []byte(data))
		if err != nil || tokens.Len() != 0 {
			t.Errorf("%q: %v tokens, %v; want an explicit empty set", data, tokens.Len(), err)
		}
	}
	if _, err := auth.ParseTokens("t.yaml", []byte("tokens:\n")); err == nil || !strings.Contains(err.Error(), "tokens: has no value") {
		t.Errorf("tokens with no value: %v, want refused", err)
	}
}

func TestAMetricsTokenTakesNoTenantOrKinds(t *testing.T) {
	digest := auth.Digest("scraper-token")
	tokens, err := auth.ParseTokens("t.yaml", []byte("tokens:\n  - {sha256: "+digest+", role: metrics}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tokens.Lookup("scraper-token"); !ok || p.Role != auth.RoleMetrics {
		t.Errorf("Lookup = %+v, %v; want the metrics role", p, ok)
	}
	_, err = auth.ParseTokens("t.yaml", []byte("tokens:\n  - {sha256: "+digest+", role: metrics, tenant: acme}\n"))
	if err == nil || !strings.Contains(err.Error(), "tokens[0].tenant: is refused for a metrics token") {
		t.Errorf("a metrics token with a tenant: %v", err)
	}
}

func TestParseTokensRefusesEveryMistakeWithItsLineAndKey(t *testing.T) {
	const digest = "6702afda86bf2e55d06d328eed0fc08aecd8b7243a764e86e2a7c70d077773f9"
	tests := []struct {
		name string
		data string
		want []string
	}{
		{"an unknown top-level key", "tokenz: []\n", []string{"t.yaml:1:1: tokenz: unknown key (known here: tokens)"}},
		{"an unknown key in an entry", "tokens:\n  - sha256: " + digest + "\n    role: admin\n    label: ops\n",
			[]string{"t.yaml:4:5: tokens[0].label: unknown key (known here: kinds name role sha256 tenant tenants)"}},
		{"the token instead of its digest", "tokens:\n  - sha256: acme-client-token\n    role: admin\n",
			[]string{"t.yaml:2:13: tokens[0].sha256: must be 64 hex digits"}},
		{"a digest too short", "tokens:\n  - sha256: 6702afda\n    role: admin\n", []string{"tokens[0].sha256: must be 64 hex digits"}},
		{"a digest listed twice", "tokens:\n  - {sha256: " + digest + ", role: admin}\n  - {sha256: " + strings.ToUpper(digest) + ", role: admin}\n",
			[]string{"t.yaml:3:14: tokens[1].sha256: the same sha256 as tokens[0].sha256"}},
		{"no sha256", "tokens:\n  - role: admin\n", []string{"t.yaml:2:5: tokens[0].sha256: is required"}},
		{"no role", "tokens:\n  - sha256: " + digest + "\n", []string{"tokens[0].role: is required"}},
		{"an unknown role", "tokens:\n  - {sha256: " + digest + ", role: root}\n", []string{`t.yaml:2:86: tokens[0].role: must be client, worker, admin or metrics`}},
		{"a client without a tenant", "tokens:\n  - {sha256: " + digest + ", role: client}\n", []string{"tokens[0].tenant: is required for a client token"}},
		{"a client with kinds", "tokens:\n  - {sha256: " + digest + ", role: client, tenant: acme, kinds: [a]}\n", []string{"tokens[0].kinds: is for worker tokens"}},
		{"a client with tenants", "tokens:\n  - {sha256: " + digest + ", role: client, tenant: acme, tenants: [a]}\n", []string{"tokens[0].tenants: is for worker tokens"}},
		{"a worker with a tenant", "tokens:\n  - {sha256: " + digest + ", role: worker, tenant: acme}\n", []string{"tokens[0].tenant: is for client tokens"}},
		{"an admin with a tenant", "tokens:\n  - {sha256: " + digest + ", role: admin, tenant: acme}\n", []string{"tokens[0].tenant: is refused for an admin token"}},
		{"an admin with kinds", "tokens:\n  - {sha256: " + digest + ", role: admin, kinds: [a]}\n", []string{"tokens[0].kinds: is refused for an admin token"}},
		{"an empty kinds list", "tokens:\n  - {sha256: " + digest + ", role: worker, kinds: []}\n", []string{"tokens[0].kinds: is empty"}},
		{"a tenant that is no name", "tokens:\n  - {sha256: " + digest + ", role: client, tenant: \"a b\"}\n", []string{`tokens[0].tenant: may only contain ASCII letters`}},
		{"a number for a tenant", "tokens:\n  - {sha256: " + digest + ", role: client, tenant: 12}\n", []string{"tokens[0].tenant: must be a string"}},
		{"a key given twice", "tokens:\n  - sha256: " + digest + "\n    role: admin\n    role: client\n", []string{"t.yaml:4:5: tokens[0].role: given twice"}},
		{"tokens not a list", "tokens: {}\n", []string{"tokens: must be a list"}},
		{"two documents", "tokens: []\n---\ntokens: []\n", []string{"one YAML document"}},
		{"two mistakes at once", "tokens:\n  - {sha256: x, role: admin}\n  - {sha256: " + digest + ", role: boss}\n",
			[]string{"tokens[0].sha256: must be 64 hex digits", `t.yaml:3:86: tokens[1].role: must be client, worker, admin or metrics`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokens, err := auth.ParseTokens("t.yaml", []byte(tt.data))
			if err == nil {
				t.Fatalf("accepted, with %d tokens", tokens.Len())
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "acme-client-token") || strings.Contains(err.Error(), "root") || strings.Contains(err.Error(), "boss") {
				t.Errorf("the error %q repeats what may be a token", err)
			}
		})
	}
}

func TestLoadTokensReadsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(exampleFile), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(path)
	if err != nil || tokens.Len() != 3 {
		t.Fatalf("LoadTokens = %d tokens, %v", tokens.Len(), err)
	}
	if _, err := auth.LoadTokens(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

// BenchmarkLookup is the cost of checking one call's token against files
// of growing size: Lookup compares with every entry.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("%d tokens", n), func(b *testing.B) {
			var file strings.Builder
			file.WriteString("tokens:\n")
			for i := range n {
				fmt.Fprintf(&file, "  - {sha256: %s, role: admin}\n", auth.Digest(fmt.Sprint("token-", i)))
			}
			tokens, err := auth.ParseTokens("t.yaml", []byte(file.String()))
			if err != nil {
				b.Fatal(err)
			}
			token := fmt.Sprint("token-", n/2)
			for b.Loop() {
				if _, ok := tokens.Lookup(token); !ok {
					b.Fatal("not found")
				}
			}
		})
	}
}

func TestASyntaxErrorInTheTokensFileNamesTheFileLineAndColumn(t *testing.T) {
	_, err := auth.ParseTokens("tokens.yaml", []byte("tokens:\n  - sha256: "+auth.Digest("x")+"\n    role: admin\n  - {sha256: jw_secret, role: [admin\n"))
	var e *auth.Error
	if !errors.As(err, &e) || e.Path != "tokens.yaml" || e.Line != 4 || e.Column == 0 {
		t.Fatalf("error %v (%+v); want an *auth.Error at tokens.yaml line 4 with a column", err, e)
	}
	if !strings.HasPrefix(err.Error(), "tokens.yaml:4:") || !strings.Contains(err.Error(), ": not valid YAML: ") || strings.Contains(err.Error(), "jw_secret") {
		t.Errorf("error %q, want tokens.yaml:4:col: not valid YAML: …, without the file's text", err)
	}
}

// TestTheTokensAndConfigFilesReportAMistakeTheSameWay: a mistake either
// file can make reads the same in both, value unquoted and aliases
// followed, because one reader reads both.
func TestTheTokensAndConfigFilesReportAMistakeTheSameWay(t *testing.T) {
	d := auth.Digest("x")
	tests := []struct {
		name           string
		config, tokens string
		want           string // the reason both give
	}{
		{"a name no request could use",
			"schedules:\n  - {name: s, kind: k, every: 1m, tenant: \"my secret\"}\n",
			"tokens:\n  - {sha256: " + d + ", role: client, tenant: \"my secret\"}\n",
			"may only contain ASCII letters, digits and . _ - : / @"},
		{"a number for a name",
			"schedules:\n  - {name: s, kind: k, every: 1m, tenant: 123456}\n",
			"tokens:\n  - {sha256: " + d + ", role: client, tenant: 123456}\n",
			"must be a string (quote it if it looks like a number), got a whole number"},
		{"an alias to a list for a name",
			"pools: {db: 1}\nqueues:\n  - {name: a, uses: &secret [db]}\nschedules:\n  - {name: s, kind: k, every: 1m, tenant: *secret}\n",
			"tokens:\n  - {sha256: " + d + ", role: worker, kinds: &secret [db]}\n  - {sha256: " + auth.Digest("y") + ", role: client, tenant: *secret}\n",
			"must be a string (quote it if it looks like a number), got a list"},
		{"an alias to an empty name in a list",
			"schedules:\n  - {name: s, kind: k, every: 1m, queue: &secret \"\"}\npools: {db: 1}\nqueues:\n  - {name: b, uses: [db, *secret]}\n",
			"tokens:\n  - {sha256: " + d + ", role: worker, tenants: [&secret \"\"], kinds: [a, *secret]}\n",
			"must not be empty"},
		{"a key given twice", "strict: true\nstrict: true\n", "tokens: []\ntokens: []\n", "given twice"},
		{"a key with no value", "strict:\n", "tokens:\n", "has no value"},
		{"a merge key", "alerts: &secret {}\n<<: *secret\n", "tokens: &secret []\n<<: *secret\n", "merge keys (<<) are not read here; write the keys out"},
		{"an unknown key that looks like a token", "jw_secret: 1\n", "jw_secret: 1\n", "an unknown key that looks like a token (not shown)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, configErr := config.Parse("f.yaml", []byte(tt.config))
			_, tokensErr := auth.ParseTokens("f.yaml", []byte(tt.tokens))
			for file, err := range map[string]error{"config": configErr, "tokens": tokensErr} {
				var e *auth.Error
				if !errors.As(err, &e) || !strings.HasPrefix(e.Reason, tt.want) || e.Line == 0 {
					t.Errorf("the %s file's refusal %v; want %q at a line", file, err, tt.want)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the %s file's refusal %q repeats the file's text", file, err)
				}
			}
		})
	}
	// A syntax error reads the same, to the column.
	for _, text := range []string{"a: 1\nb: [1, 2\n", "a:\n\t- b\n", "a: *secret\n"} {
		_, configErr := config.Parse("f.yaml", []byte(text))
		_, tokensErr := auth.ParseTokens("f.yaml", []byte(text))
		if configErr == nil || tokensErr == nil || configErr.Error() != tokensErr.Error() {
			t.Errorf("%q: the config file says %v, the tokens file %v; want one refusal", text, configErr, tokensErr)
		}
	}
}

func TestATokenIsNamedByItsNameOrElseItsID(t *testing.T) {
	named, unnamed := auth.Digest("named-token"), auth.Digest("unnamed-token")
	tokens, err := auth.ParseTokens("t.yaml", []byte("tokens:\n  - {sha256: "+named+", role: client, tenant: acme, name: deploy-bot}\n  - {sha256: "+unnamed+", role: admin}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ token, want string }{
		{"named-token", "deploy-bot (client, tenant acme)"},
		{"unnamed-token", unnamed[:auth.TokenIDLength] + " (admin)"},
	}
	for _, tc := range tests {
		p, ok := tokens.Lookup(tc.token)
		if !ok {
			t.Fatalf("%s: not found", tc.token)
		}
		if got := p.Describe(); got != tc.want {
			t.Errorf("%s: Describe() = %q, want %q", tc.token, got, tc.want)
		}
		if got := auth.DescribeCaller(auth.WithPrincipal(t.Context(), p)); got != tc.want {
			t.Errorf("%s: DescribeCaller = %q, want %q", tc.token, got, tc.want)
		}
	}
	if got := auth.DescribeCaller(t.Context()); got != auth.Anonymous {
		t.Errorf("DescribeCaller without a principal = %q, want %q", got, auth.Anonymous)
	}
	_, err = auth.ParseTokens("t.yaml", []byte("tokens:\n  - {sha256: "+named+", role: admin, name: \"has space\"}\n"))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:2:") || !strings.Contains(err.Error(), "tokens[0].name") {
		t.Errorf("a name that is not a name: %v, want a file:line:col error on tokens[0].name", err)
	}
}
