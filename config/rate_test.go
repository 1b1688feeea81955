package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/config"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestAQueuesRateReachesTheEngine(t *testing.T) {
	f, err := config.Parse("c.yaml", []byte("queues:\n  - name: metered\n    rate: {limit: 100, per: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := f.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rules.Queues["metered"].Rate, (jobtype.Rate{Limit: 100, Per: time.Minute}); got != want {
		t.Fatalf("rate = %+v, want %+v", got, want)
	}
	f, err = config.Parse("c.yaml", []byte("queues:\n  - name: metered\n    rate: {limit: 100, per: 1m, per_tenant: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rules, err = f.Rules(); err != nil {
		t.Fatal(err)
	}
	if got, want := rules.Queues["metered"].Rate, (jobtype.Rate{Limit: 100, Per: time.Minute, PerTenant: true}); got != want {
		t.Fatalf("rate per tenant = %+v, want %+v", got, want)
	}
}

func TestAMistakenRateIsRefusedWithItsLineAndKey(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"a zero period", "queues:\n  - name: a\n    rate: {limit: 5, per: 0s}\n", "c.yaml:3:27: queues[0].rate.per: must be positive"},
		{"a period below a millisecond", "queues:\n  - name: a\n    rate: {limit: 5, per: 10us}\n", "queues[0].rate.per: must be 1ms to 24h0m0s, got 10µs"},
		{"a period over a day", "queues:\n  - name: a\n    rate: {limit: 5, per: 48h}\n", "queues[0].rate.per: must be 1ms to 24h0m0s, got 48h0m0s"},
		{"a zero limit", "queues:\n  - name: a\n    rate: {limit: 0, per: 1s}\n", "c.yaml:3:19: queues[0].rate.limit: must be from 1 to 1000000, got 0"},
		{"a negative limit", "queues:\n  - name: a\n    rate: {limit: -3, per: 1s}\n", "queues[0].rate.limit: must be from 1 to 1000000, got -3"},
		{"no period", "queues:\n  - name: a\n    rate: {limit: 5}\n", "c.yaml:3:11: queues[0].rate: needs a per"},
		{"no limit", "queues:\n  - name: a\n    rate: {per: 1s}\n", "c.yaml:3:11: queues[0].rate: needs a limit"},
		{"a window per tenant on a serial queue", "queues:\n  - name: a\n    mode: serial\n    rate: {limit: 5, per: 1s, per_tenant: true}\n", "c.yaml:4:31: queues[0].rate.per_tenant: a serial queue runs one job of each tenant at a time: its rate is kept for the whole queue; leave per_tenant out"},
		{"per_tenant given as a word", "queues:\n  - name: a\n    rate: {limit: 5, per: 1s, per_tenant: often}\n", "queues[0].rate.per_tenant:"},
		{"an unknown key", "queues:\n  - name: a\n    rate: {limit: 5, per: 1s, burst: 9}\n", "queues[0].rate.burst: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte(tc.text))
			var cerr *config.Error
			if err == nil || !errors.As(err, &cerr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTheDocsDocumentAQueuesRate(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "OPERATING.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "| `queues[].rate`") {
		t.Error("docs/OPERATING.md's table of configuration keys lacks `queues[].rate`")
	}
}
