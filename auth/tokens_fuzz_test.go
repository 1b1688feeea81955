package auth_test

import (
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/auth"
)

// FuzzParseTokens: no file makes the parser panic, an accepted file
// knows no more tokens than it has sha256 keys, and a refusal never
// quotes a value of the file, which may be a token pasted by mistake.
func FuzzParseTokens(f *testing.F) {
	f.Add(exampleFile)
	f.Add("")
	f.Add("tokens: []\n")
	f.Add("tokens:\n  - {sha256: jw_secret-token-pasted-here, role: admin}\n")
	f.Add("jw_secret-token-pasted-here\n")
	f.Add("tokens:\n  - {sha256: " + auth.Digest("z") + ", role: jw_secret, tenant: \"jw_secret \"}\n")
	f.Add("tokens:\n  - {jw_secret: 1}\n")
	// Found by the fuzzer: YAML's own error quoted an anchor's name, and
	// an unknown key was echoed.
	f.Add("*0jw_secret0")
	f.Add("0jw_secret:")
	f.Add("tokens:\n  - &a {sha256: " + auth.Digest("x") + ", role: admin}\n  - *a\n")
	f.Add("tokens:\n  - {sha256: " + auth.Digest("y") + ", role: worker, tenants: [a, a], kinds: [k]}\n")
	f.Fuzz(func(t *testing.T, data string) {
		tokens, err := auth.ParseTokens("t.yaml", []byte(data))
		if err != nil {
			if strings.Contains(err.Error(), "jw_secret") {
				t.Fatalf("the refusal quotes the pasted token: %v", err)
			}
			return
		}
		if n := strings.Count(data, "sha256"); tokens.Len() > n {
			t.Fatalf("%d tokens from a file with %d sha256 keys", tokens.Len(), n)
		}
	})
}
