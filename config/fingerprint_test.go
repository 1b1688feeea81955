package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/config"
)

// Files that declare the same rules, laid out or spelled differently
// (comments, key order, flow style, a default said or left out, the
// order of the queues), have one fingerprint; a value changed gives
// another, and so does a retention other than the one in effect.
func TestAFingerprintNamesTheRulesNotTheFile(t *testing.T) {
	dir := t.TempDir()
	fingerprint := func(text string) string {
		t.Helper()
		path := filepath.Join(dir, "jobwatch.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		rules, err := f.Rules()
		if err != nil {
			t.Fatal(err)
		}
		retention := 24 * time.Hour // the server's, unless the file says
		if rules.Retention > 0 {
			retention = rules.Retention
		}
		return config.Fingerprint(rules, retention)
	}
	base := fingerprint("queues:\n  - name: index\n    mode: serial\n  - name: bulk\n    max_running: 2\n" +
		"schedules:\n  - {name: digest, kind: mail.digest, every: 10m}\n  - {name: nightly, kind: report, cron: \"0 2 * * *\"}\n" +
		"tenants:\n  acme: {max_queued: 50}\n")
	for _, same := range []string{
		"# the same, said otherwise\nqueues:\n  - {name: bulk, max_running: 2, mode: parallel}\n\n  - mode: serial\n    name: index\n    on_failure: block\n" +
			"schedules:\n  - {name: nightly, kind: report, cron: \"0 2 * * *\", timezone: UTC, queue: default}\n  - {name: digest, kind: mail.digest, every: 600s}\n" +
			"tenants:\n  acme: {max_queued: 50, weight: 1}\n  zeta: {}\nretention: 24h\n",
	} {
		if got := fingerprint(same); got != base {
			t.Errorf("the same rules said otherwise: fingerprint %s, want %s", got, base)
		}
	}
	for what, other := range map[string]string{
		"another max_running": "queues:\n  - name: index\n    mode: serial\n  - name: bulk\n    max_running: 5\n" +
			"schedules:\n  - {name: digest, kind: mail.digest, every: 10m}\n  - {name: nightly, kind: report, cron: \"0 2 * * *\"}\n" +
			"tenants:\n  acme: {max_queued: 50}\n",
		"a parallel index": "queues:\n  - name: index\n  - name: bulk\n    max_running: 2\n" +
			"schedules:\n  - {name: digest, kind: mail.digest, every: 10m}\n  - {name: nightly, kind: report, cron: \"0 2 * * *\"}\n" +
			"tenants:\n  acme: {max_queued: 50}\n",
		"another retention": "retention: 48h\nqueues:\n  - name: index\n    mode: serial\n  - name: bulk\n    max_running: 2\n" +
			"schedules:\n  - {name: digest, kind: mail.digest, every: 10m}\n  - {name: nightly, kind: report, cron: \"0 2 * * *\"}\n" +
			"tenants:\n  acme: {max_queued: 50}\n",
	} {
		if got := fingerprint(other); got == base {
			t.Errorf("%s: the same fingerprint %s", what, got)
		}
	}
	if len(base) != 12 {
		t.Errorf("fingerprint %q, want 12 hex digits", base)
	}
}
