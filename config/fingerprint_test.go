package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jobwatch/jobwatch/config"
)

// Two files that declare the same rules, laid out differently, have one
// fingerprint; a value changed gives another.
func TestAFingerprintNamesTheRulesNotTheFile(t *testing.T) {
	dir := t.TempDir()
	load := func(name, text string) *config.File {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := load("a.yaml", "queues:\n  - name: index\n    mode: serial\n  - name: bulk\n    max_running: 2\n")
	b := load("b.yaml", "# the same, commented and spaced otherwise\nqueues:\n  - {name: index, mode: serial}\n\n  - max_running: 2\n    name: bulk\n")
	c := load("c.yaml", "queues:\n  - name: index\n    mode: serial\n  - name: bulk\n    max_running: 5\n")
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("the same rules laid out otherwise: fingerprints %s and %s", a.Fingerprint(), b.Fingerprint())
	}
	if a.Fingerprint() == c.Fingerprint() {
		t.Errorf("max_running 2 and 5 have one fingerprint, %s", a.Fingerprint())
	}
	if len(a.Fingerprint()) != 12 {
		t.Errorf("fingerprint %q, want 12 hex digits", a.Fingerprint())
	}
}
