package config_test

import (
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/config"
)

func TestRemovedSinceNamesWhatTheFileBeforeDeclaredAndThisOneDoesNot(t *testing.T) {
	parse := func(t *testing.T, text string) *config.File {
		t.Helper()
		f, err := config.Parse("jobwatch.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	const full = "queues:\n  - name: index\n  - name: bulk\n    uses: [gpu]\npools:\n  gpu: 2\n" +
		"schedules:\n  - name: digest\n    kind: digest\n    every: 1h\n" +
		"alerts:\n  webhook: https://hooks.example/s3cret\ntenants:\n  globex: {weight: 3}\n  acme: {max_queued: 10}\n"
	manyQueues := "queues:\n"
	for _, q := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		manyQueues += "  - name: " + q + "\n"
	}
	for _, tt := range []struct {
		name          string
		before, after string
		want          string
	}{
		{"a file cut off after its first queue names every kind that went, not the webhook's URL", full, "queues:\n  - name: index\n",
			"queues bulk; pools gpu; schedules digest; tenants acme, globex; alerts.webhook"},
		{"values changed in the entries both declare are no removal", full,
			strings.NewReplacer("every: 1h", "every: 2h", "gpu: 2", "gpu: 5", "{weight: 3}", "{}", "s3cret", "other").Replace(full), ""},
		{"an entry added is no removal", "{}", full, ""},
		{"more names of a kind than it lists are counted", manyQueues, "{}", "queues a, b, c, d, e and 3 more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := parse(t, tt.after).RemovedSince(parse(t, tt.before))
			if got := r.String(); got != tt.want || r.Empty() != (tt.want == "") {
				t.Errorf("removed %q (empty %v), want %q", got, r.Empty(), tt.want)
			}
		})
	}
}
