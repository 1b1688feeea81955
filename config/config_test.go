package config_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/config"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestTheIssuesExampleLoads(t *testing.T) {
	f, err := config.Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatalf("load the example: %v", err)
	}
	want := []config.Queue{
		{Name: "index", Mode: "serial", OnFailure: "block", LeaseTimeout: 30 * time.Second, Timeout: 10 * time.Minute, AlertAfter: 5 * time.Minute,
			Retry: config.Retry{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 5 * time.Minute}},
		{Name: "readme", Mode: "parallel", MaxRunning: 8, Uses: []string{"db"}, AlertAfter: time.Hour, Priority: 5,
			Retry: config.Retry{MaxAttempts: 3, InitialBackoff: 2 * time.Second, MaxBackoff: time.Minute}},
	}
	if f.Retention != 24*time.Hour || f.Strict || !reflect.DeepEqual(f.Queues, want) {
		t.Errorf("read retention %v, strict %v, queues %+v", f.Retention, f.Strict, f.Queues)
	}
	if f.Pools["db"] != 4 || f.Alerts.Webhook != "http://127.0.0.1:9000/hooks/jobwatch" {
		t.Errorf("read pools %v, alerts %+v", f.Pools, f.Alerts)
	}
	s := f.Schedules
	if len(s) != 2 || s[1].Cron != "0 2 * * *" || s[1].Timezone != "Europe/Berlin" || s[0].Name != "update-downloads" || s[0].Kind != "update_downloads" || s[0].Queue != "downloads" ||
		s[0].Tenant != "crates" || s[0].Every != 10*time.Minute || string(s[0].Payload) != "{}" {
		t.Errorf("read schedules %+v", s)
	}
}

func TestTheIssuesExampleGivesTheEngineEveryKey(t *testing.T) {
	f, err := config.Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Rules()
	if err != nil {
		t.Fatalf("the example is refused: %v", err)
	}
	want := []jobtype.Schedule{{Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates", Every: 10 * time.Minute, Payload: []byte("{}")},
		{Name: "nightly-report", Kind: "report", Cron: "0 2 * * *", Timezone: "Europe/Berlin"}}
	if !reflect.DeepEqual(r.Schedules, want) {
		t.Errorf("schedules %+v\nwant %+v", r.Schedules, want)
	}
	if len(r.Queues) != 2 || r.Pools["db"] != 4 || r.AlertWebhook == "" || r.Retention != 24*time.Hour {
		t.Errorf("rules %+v; want the example's queues, pool, webhook and retention", r)
	}
	if want := map[string]jobtype.TenantRules{"crates": {MaxQueued: 10000, Weight: 3}}; !reflect.DeepEqual(r.Tenants, want) {
		t.Errorf("tenants %+v, want %+v", r.Tenants, want)
	}
}

func TestRulesCarryEachTenantsLimitsAndWeight(t *testing.T) {
	f, err := config.Parse("jobwatch.yaml", []byte(`
tenants:
  acme:
    max_queued: 10000
    max_running: 20
    weight: 3
  globex: {max_queued: 0, max_running: 0}   # no limit, as when left out
  initech: {}
  hooli: {weight: 1000}
  umbrella: {max_running: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]config.Tenant{"acme": {MaxQueued: 10000, MaxRunning: 20, Weight: 3}, "globex": {}, "initech": {}, "hooli": {Weight: 1000}, "umbrella": {MaxRunning: 1}}; !reflect.DeepEqual(f.Tenants, want) {
		t.Errorf("tenants %+v, want %+v", f.Tenants, want)
	}
	r, err := f.Rules()
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	want := map[string]jobtype.TenantRules{"acme": {MaxQueued: 10000, MaxRunning: 20, Weight: 3}, "globex": {}, "initech": {}, "hooli": {Weight: 1000}, "umbrella": {MaxRunning: 1}}
	if !reflect.DeepEqual(r.Tenants, want) {
		t.Fatalf("rules' tenants %+v\nwant %+v", r.Tenants, want)
	}
	e := jobs.New(testdb.OpenT(t, testdb.New(t)), jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(e.Shutdown)
	if err := e.SetRules(r); err != nil {
		t.Fatalf("the engine refuses the file's tenants: %v", err)
	}
	if got := e.Rules().Tenants; !reflect.DeepEqual(got, want) {
		t.Errorf("the engine's tenants %+v, want %+v", got, want)
	}
}

// The engine refuses what the file cannot say, so an embedder that
// builds jobtype.Rules by hand meets the same rule.
func TestTheEngineRefusesATenantTheFileWouldRefuse(t *testing.T) {
	e := jobs.New(testdb.OpenT(t, testdb.New(t)), jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(e.Shutdown)
	if err := e.SetRules(jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"acme": {MaxQueued: 5}}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		tenants map[string]jobtype.TenantRules
		says    string
	}{
		{"a negative max_queued", map[string]jobtype.TenantRules{"acme": {MaxQueued: -1}}, "tenant acme: max_queued: must not be negative, got -1"},
		{"a negative max_running", map[string]jobtype.TenantRules{"acme": {MaxRunning: -2}}, "tenant acme: max_running: must not be negative, got -2"},
		{"a negative weight", map[string]jobtype.TenantRules{"acme": {Weight: -1}}, "tenant acme: weight: must be 1 to 1000 (or 0 for the default, 1), got -1"},
		{"a weight past the largest", map[string]jobtype.TenantRules{"acme": {Weight: 1001}}, "tenant acme: weight: must be 1 to 1000 (or 0 for the default, 1), got 1001"},
		{"a tenant name no request could use", map[string]jobtype.TenantRules{"a b": {MaxQueued: 1}}, `tenant "a b": tenant: may only contain`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := e.SetRules(jobtype.Rules{Tenants: tt.tenants})
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("SetRules: %v, want it refused saying %q", err, tt.says)
			}
			if got := e.Rules().Tenants["acme"].MaxQueued; got != 5 {
				t.Errorf("after the refusal acme's max_queued is %d, want the rules before (5)", got)
			}
		})
	}
}

func TestRulesCarrySchedulesInTheFilesOrder(t *testing.T) {
	f, err := config.Parse("jobwatch.yaml", []byte(`
schedules:
  - name: nightly
    kind: report
    every: 24h
    payload: {format: pdf, pages: [1, 2]}
  - {name: tick, kind: tick, every: 1s}
  - name: backup
    kind: backup
    cron: "0 2 * * *"
    timezone: Europe/Berlin
  - {name: hourly, kind: sync, cron: "@hourly"}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Rules()
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	want := []jobtype.Schedule{
		{Name: "nightly", Kind: "report", Every: 24 * time.Hour, Payload: []byte(`{"format":"pdf","pages":[1,2]}`)},
		{Name: "tick", Kind: "tick", Every: time.Second}, // no payload: none, not null
		{Name: "backup", Kind: "backup", Cron: "0 2 * * *", Timezone: "Europe/Berlin"},
		{Name: "hourly", Kind: "sync", Cron: "@hourly"}, // no timezone: UTC
	}
	if !reflect.DeepEqual(r.Schedules, want) {
		t.Fatalf("schedules %+v\nwant %+v", r.Schedules, want)
	}
}

func TestRulesCarryWhatTheEngineEnforces(t *testing.T) {
	f, err := config.Parse("jobwatch.yaml", []byte(`
retention: 2h
strict: true
queues:
  - name: index
    mode: parallel
    max_running: 0
    retry: {max_attempts: 10, initial_backoff: 1s, max_backoff: 5m}
    lease_timeout: 45s
    timeout: 10m
    alert_after: 5m
    priority: 3
    max_log_bytes: 4194304
  - name: mail
pools: {}
schedules: []
alerts:
  webhook: http://127.0.0.1:9000/hooks/jobwatch
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Rules()
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	want := jobtype.Rules{Source: "config jobwatch.yaml", Retention: 2 * time.Hour, Strict: true, AlertWebhook: "http://127.0.0.1:9000/hooks/jobwatch", Queues: map[string]jobtype.QueueRules{
		"index": {MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 5 * time.Minute, LeaseTimeout: 45 * time.Second, Timeout: 10 * time.Minute, AlertAfter: 5 * time.Minute, Priority: 3, MaxLogBytes: 4 << 20},
		"mail":  {},
	}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("rules %+v\nwant %+v", r, want)
	}
}

func TestRulesCarryQueueLimitsAndPools(t *testing.T) {
	f, err := config.Parse("jobwatch.yaml", []byte(`
queues:
  - name: index
    mode: serial
  - name: git
    mode: serial
    on_failure: skip
  - name: readme
    max_running: 8
    uses: [db]
  - name: reports
    max_running: 4
    max_running_per_tenant: 1
  - name: exports
    max_running_per_tenant: 2    # without max_running: each tenant 2, the queue unbounded
pools:
  db: 4
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Rules()
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	want := jobtype.Rules{Source: "config jobwatch.yaml", Pools: map[string]int{"db": 4}, Queues: map[string]jobtype.QueueRules{
		"index":   {Serial: true, BlockOnFailure: true}, // block when on_failure is left out
		"git":     {Serial: true},
		"readme":  {MaxRunning: 8, Uses: []string{"db"}},
		"reports": {MaxRunning: 4, MaxRunningPerTenant: 1},
		"exports": {MaxRunningPerTenant: 2},
	}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("rules %+v\nwant %+v", r, want)
	}
}

// An empty file is refused, as the tokens file is: a deploy that copied
// half a file must not drop every rule on SIGHUP. {} declares nothing.
func TestAnEmptyFileIsRefusedAndBracesDeclareNothing(t *testing.T) {
	for _, text := range []string{"", "  \n", "# nothing yet\n"} {
		if _, err := config.Parse("empty.yaml", []byte(text)); !errors.Is(err, config.ErrEmpty) ||
			!strings.HasPrefix(err.Error(), "empty.yaml: ") || !strings.Contains(err.Error(), "write {}") {
			t.Errorf("%q: %v; want ErrEmpty naming the file and saying to write {}", text, err)
		}
	}
	for _, text := range []string{"{}", "{} # no rules yet\n"} {
		f, err := config.Parse("none.yaml", []byte(text))
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if r, err := f.Rules(); err != nil || r.Strict || len(r.Queues) != 0 || r.Retention != 0 {
			t.Fatalf("%q: rules %+v, %v; want none", text, r, err)
		}
	}
}

func TestEveryMistakeIsRefusedWithItsLineAndKey(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // file:line:column: key: reason, or a part of it
	}{
		{"an unknown top-level key", "retention: 1h\nretension: 2h\n", "c.yaml:2:1: retension: unknown key"},
		{"an unknown key in a queue", "queues:\n  - name: a\n    max_runing: 3\n", "c.yaml:3:5: queues[0].max_runing: unknown key"},
		{"an unknown key in retry", "queues:\n  - name: a\n    retry: {attempts: 3}\n", "c.yaml:3:13: queues[0].retry.attempts: unknown key"},
		{"a key given twice", "strict: true\nstrict: false\n", "c.yaml:2:1: strict: given twice"},
		{"a key with no value", "retention:\n", "c.yaml:1:1: retention: has no value"},
		{"a duration without a unit", "retention: 30\n", "c.yaml:1:12: retention: a number needs a unit"},
		{"a duration that does not parse", "queues:\n  - name: a\n    lease_timeout: soon\n", `c.yaml:3:20: queues[0].lease_timeout: is not a duration such as 30s`},
		{"a duration too long to hold", "queues:\n  - name: a\n    lease_timeout: 9999999999h\n", `c.yaml:3:20: queues[0].lease_timeout: is longer than a duration can be`},
		{"a negative duration", "retention: -1h\n", "c.yaml:1:12: retention: must be positive"},
		{"a zero duration", "queues:\n  - name: a\n    retry: {initial_backoff: 0s}\n", "queues[0].retry.initial_backoff: must be positive"},
		{"strict that is not a boolean", "strict: yes please\n", `c.yaml:1:9: strict: must be true or false`},
		{"a number given as text", "queues:\n  - name: a\n    max_running: eight\n", `c.yaml:3:18: queues[0].max_running: must be a whole number`},
		{"a negative max_running", "queues:\n  - name: a\n    max_running: -1\n", "queues[0].max_running: must be from 0"},
		{"a negative max_running_per_tenant", "queues:\n  - name: a\n    max_running_per_tenant: -1\n", "c.yaml:3:29: queues[0].max_running_per_tenant: must be from 0 to 2147483647, got -1"},
		{"a max_running_per_tenant given as a word", "queues:\n  - name: a\n    max_running_per_tenant: one\n", "c.yaml:3:29: queues[0].max_running_per_tenant: must be a whole number"},
		{"max_running_per_tenant above max_running", "queues:\n  - name: a\n    max_running: 4\n    max_running_per_tenant: 5\n", "c.yaml:4:5: queues[0].max_running_per_tenant: 5 is above the queue's max_running 4, so it would bound nothing: at most 4"},
		{"max_running_per_tenant 2 on a serial queue", "queues:\n  - name: a\n    mode: serial\n    max_running_per_tenant: 2\n", "c.yaml:4:5: queues[0].max_running_per_tenant: a serial queue runs one job of each tenant at a time already: 0 or 1 (or left out), got 2"},
		{"a priority past the least urgent", "queues:\n  - name: a\n    priority: 10\n", "c.yaml:3:15: queues[0].priority: must be from 0 to 9, got 10"},
		{"a negative priority", "queues:\n  - name: a\n    priority: -1\n", "c.yaml:3:15: queues[0].priority: must be from 0 to 9, got -1"},
		{"a priority given as a word", "queues:\n  - name: a\n    priority: high\n", "c.yaml:3:15: queues[0].priority: must be a whole number"},
		{"a log bound below its least", "queues:\n  - name: a\n    max_log_bytes: 1000\n", "c.yaml:3:20: queues[0].max_log_bytes: must be from 65536 to 67108864, got 1000"},
		{"zero max_attempts", "queues:\n  - name: a\n    retry: {max_attempts: 0}\n", "c.yaml:3:27: queues[0].retry.max_attempts: must be from 1"},
		{"max_attempts beyond the wire's int32", "queues:\n  - name: a\n    retry: {max_attempts: 3000000000}\n", "queues[0].retry.max_attempts: must be from 1 to 2147483647"},
		{"queues that are not a list", "queues:\n  name: a\n", "c.yaml:2:3: queues: must be a list"},
		{"a queue without a name", "queues:\n  - mode: parallel\n", "c.yaml:2:5: queues[0]: needs a name"},
		{"a queue name no request could use", "queues:\n  - name: my queue\n", `c.yaml:2:11: queues[0].name: may only contain`},
		{"an empty queue name", "queues:\n  - name: \"\"\n", `c.yaml:2:11: queues[0].name: must not be empty`},
		{"an empty pool name in uses", "pools:\n  db: 4\nqueues:\n  - name: a\n    uses: [db, \"\"]\n", `c.yaml:5:16: queues[0].uses[1]: must not be empty`},
		{"a queue name that is a number", "queues:\n  - name: 2024\n", "queues[0].name: must be a string (quote it"},
		{"a queue declared twice", "queues:\n  - name: a\n  - name: b\n  - name: a\n", `c.yaml:4:5: queues[2].name: queue "a" is declared twice`},
		{"an unknown mode", "queues:\n  - name: a\n    mode: seriel\n", `c.yaml:3:11: queues[0].mode: must be parallel or serial`},
		{"an unknown on_failure", "queues:\n  - name: a\n    mode: serial\n    on_failure: retry\n", `queues[0].on_failure: must be block or skip`},
		{"on_failure on a parallel queue", "queues:\n  - name: a\n    on_failure: skip\n", "c.yaml:3:5: queues[0].on_failure: applies to serial queues only"},
		{"priority on a serial queue", "queues:\n  - name: a\n    mode: serial\n    priority: 3\n", "c.yaml:4:5: queues[0].priority: a serial queue runs its jobs first in, first out, whatever their priority: leave priority out (or 0), got 3"},
		{"max_running on a serial queue", "queues:\n  - name: a\n    mode: serial\n    max_running: 2\n", "c.yaml:4:5: queues[0].max_running: a serial queue runs one job of each tenant at a time (0, or left out) or one job at a time across tenants (1), got 2"},
		{"max_backoff below initial_backoff", "queues:\n  - name: a\n    retry:\n      initial_backoff: 1m\n      max_backoff: 1s\n", "c.yaml:5:7: queues[0].retry.max_backoff: 1s is below initial_backoff 1m0s"},
		{"uses naming an undeclared pool", "pools:\n  db: 4\nqueues:\n  - name: a\n    uses: [db, cache]\n", `c.yaml:5:16: queues[0].uses[1]: pool "cache" is not declared`},
		{"uses naming a pool twice", "pools:\n  db: 4\nqueues:\n  - name: a\n    uses: [db, db]\n", `queues[0].uses[1]: pool "db" is listed twice`},
		{"a pool of zero", "pools:\n  db: 0\n", "c.yaml:2:7: pools.db: must be from 1"},
		{"pools given as a list", "pools: [db]\n", "c.yaml:1:8: pools: must be a mapping (key: value lines), got a list"},
		{"a schedule with neither every nor cron", "schedules:\n  - name: s\n    kind: k\n", "c.yaml:2:5: schedules[0]: needs every or cron"},
		{"a schedule with both every and cron", "schedules:\n  - {name: s, kind: k, every: 1m, cron: '* * * * *'}\n", "c.yaml:2:35: schedules[0].cron: is given with every; a schedule runs on one of the two"},
		{"a cron expression of three fields", "schedules:\n  - name: s\n    kind: k\n    cron: \"0 2 *\"\n", "c.yaml:4:11: schedules[0].cron: does not parse (expected exactly 5 fields, found 3); give five fields"},
		{"a cron expression with a minute out of range", "schedules:\n  - name: s\n    kind: k\n    cron: \"61 2 * * *\"\n", "c.yaml:4:11: schedules[0].cron: does not parse (end of range (61) above maximum (59))"},
		{"a cron expression with a word for a field", "schedules:\n  - name: s\n    kind: k\n    cron: \"secret-token * * * *\"\n", "c.yaml:4:11: schedules[0].cron: does not parse (a field holds something other than numbers"},
		{"an unknown cron descriptor", "schedules:\n  - {name: s, kind: k, cron: '@nightly'}\n", "c.yaml:2:30: schedules[0].cron: does not parse (unknown descriptor)"},
		{"a cron expression naming no day that exists", "schedules:\n  - {name: s, kind: k, cron: '0 0 30 2 *'}\n", "c.yaml:2:30: schedules[0].cron: names no time that exists"},
		{"a cron @every", "schedules:\n  - {name: s, kind: k, cron: '@every 1h'}\n", "c.yaml:2:30: schedules[0].cron: must not be @every; give the period as every"},
		{"a cron expression with its own zone", "schedules:\n  - {name: s, kind: k, cron: 'CRON_TZ=UTC 0 2 * * *'}\n", "c.yaml:2:30: schedules[0].cron: must not name a time zone; give it as timezone"},
		{"an empty cron expression", "schedules:\n  - {name: s, kind: k, cron: ''}\n", "c.yaml:2:30: schedules[0].cron: must not be empty"},
		{"a cron expression that is a number", "schedules:\n  - {name: s, kind: k, cron: 5}\n", "c.yaml:2:30: schedules[0].cron: must be a string"},
		{"an unknown time zone", "schedules:\n  - name: s\n    kind: k\n    cron: \"0 2 * * *\"\n    timezone: Europe/Berlni\n", "c.yaml:5:15: schedules[0].timezone: is not a known IANA time zone name, such as Europe/Berlin or UTC"},
		// Both mistakes at once: the expression is read in UTC when the zone is refused.
		{"an unknown time zone and an hour out of range", "schedules:\n  - name: s\n    kind: k\n    cron: \"0 25 * * *\"\n    timezone: Europe/Nowhere\n",
			"c.yaml:4:11: schedules[0].cron: does not parse (end of range (25) above maximum (23))"},
		{"an hour out of range and an unknown time zone", "schedules:\n  - name: s\n    kind: k\n    cron: \"0 25 * * *\"\n    timezone: Europe/Nowhere\n",
			"c.yaml:5:15: schedules[0].timezone: is not a known IANA time zone name"},
		{"the machine's local zone", "schedules:\n  - {name: s, kind: k, cron: '0 2 * * *', timezone: Local}\n", "schedules[0].timezone: must name a zone"},
		{"an empty zone", "schedules:\n  - {name: s, kind: k, cron: '0 2 * * *', timezone: ''}\n", "c.yaml:2:53: schedules[0].timezone: must name a zone, such as Europe/Berlin or UTC; leave it out for UTC"},
		{"a time zone on an every schedule", "schedules:\n  - {name: s, kind: k, every: 1h, timezone: UTC}\n", "c.yaml:2:35: schedules[0].timezone: applies to cron schedules only"},
		{"a schedule declared twice", "schedules:\n  - {name: s, kind: k, every: 1m}\n  - {name: s, kind: k, every: 1m}\n", `c.yaml:3:6: schedules[1].name: schedule "s" is declared twice`},
		{"a schedule without a name", "schedules:\n  - {kind: k, every: 1m}\n", "c.yaml:2:5: schedules[0]: needs name"},
		{"a schedule without a kind", "schedules:\n  - {name: s, every: 1m}\n", "c.yaml:2:5: schedules[0]: needs kind"},
		{"a schedule every zero", "schedules:\n  - {name: s, kind: k, every: 0s}\n", "c.yaml:2:31: schedules[0].every: must be positive"},
		{"a schedule every below a second", "schedules:\n  - name: s\n    kind: k\n    every: 500ms\n", "c.yaml:4:12: schedules[0].every: must be at least 1s"},
		{"a lease below a second", "queues:\n  - name: a\n    lease_timeout: 1ns\n", "c.yaml:3:20: queues[0].lease_timeout: must be at least 1s (a worker heartbeats at a third of it), got 1ns"},
		{"a timeout below a second", "queues:\n  - name: a\n    timeout: 500ms\n", "c.yaml:3:14: queues[0].timeout: must be at least 1s"},
		{"an alert_after below a second", "queues:\n  - name: a\n    alert_after: 1ns\n", "c.yaml:3:18: queues[0].alert_after: must be at least 1s"},
		{"a retention below a second", "retention: 1ns\n", "c.yaml:1:12: retention: must be at least 1s"},
		{"a schedule name no request could use", "schedules:\n  - {name: nightly report, kind: k, every: 1m}\n", `c.yaml:2:12: schedules[0].name: may only contain`},
		{"a schedule with an empty kind", "schedules:\n  - {name: s, kind: \"\", every: 1m}\n", "c.yaml:2:21: schedules[0].kind: must not be empty"},
		{"a schedule tenant no request could use", "schedules:\n  - {name: s, kind: k, tenant: a b, every: 1m}\n", `c.yaml:2:32: schedules[0].tenant: may only contain`},
		{"a schedule payload nested too deep", "schedules:\n  - name: s\n    kind: k\n    every: 1m\n    payload: " + strings.Repeat("[", 129) + strings.Repeat("]", 129) + "\n", "c.yaml:5:14: schedules[0].payload: nests arrays and objects more than 128 levels deep"},
		{"a schedule payload with an integer a double cannot hold", "schedules:\n  - name: s\n    kind: k\n    every: 1m\n    payload: {id: 9007199254740993}\n", "c.yaml:5:14: schedules[0].payload: payload.id: 9007199254740993 is an integer beyond ±2^53"},
		{"a schedule payload over the limit", "schedules:\n  - name: s\n    kind: k\n    every: 1m\n    payload: " + strings.Repeat("x", jobtype.DefaultMaxPayloadBytes) + "\n", "c.yaml:5:14: schedules[0].payload: 262146 bytes as JSON is over the limit of 262144"},
		{"a schedule with an unknown key", "schedules:\n  - {name: s, kind: k, every: 1m, at: '02:00'}\n", "c.yaml:2:35: schedules[0].at: unknown key"},
		{"a schedule with no default queue declared under strict", "strict: true\nqueues:\n  - name: a\nschedules:\n  - {name: s, kind: k, every: 1m}\n", `c.yaml:5:5: schedules[0]: queue "default" is not declared, and strict is true`},
		{"a schedule on an undeclared queue under strict", "strict: true\nschedules:\n  - {name: s, kind: k, queue: q, every: 1m}\n", `c.yaml:3:24: schedules[0].queue: queue "q" is not declared, and strict is true`},
		{"a negative max_queued", "tenants:\n  acme:\n    max_queued: -1\n", "c.yaml:3:17: tenants.acme.max_queued: must be from 0 to 2147483647, got -1"},
		{"a max_queued that is not a whole number", "tenants:\n  acme: {max_queued: 1.5}\n", "c.yaml:2:22: tenants.acme.max_queued: must be a whole number, got a floating-point number"},
		{"a max_queued given as a word", "tenants:\n  acme: {max_queued: lots}\n", "c.yaml:2:22: tenants.acme.max_queued: must be a whole number, got a string"},
		{"a max_queued past the largest", "tenants:\n  acme: {max_queued: 3000000000}\n", "tenants.acme.max_queued: must be from 0 to 2147483647, got 3000000000"},
		{"a tenant with an empty name", "tenants:\n  \"\": {weight: 3}\n", `c.yaml:2:3: tenants: has an empty key (""): each key must be a name`},
		{"a weight of zero", "tenants:\n  acme:\n    weight: 0\n", "c.yaml:3:13: tenants.acme.weight: must be from 1 to 1000, got 0: a weight is the tenant's share of claims in a queue, and every tenant is served (leave weight out for the default, 1)"},
		{"a negative weight", "tenants:\n  acme: {weight: -2}\n", "c.yaml:2:18: tenants.acme.weight: must be from 1 to 1000, got -2: a weight is the tenant's share"},
		{"a weight past the largest", "tenants:\n  acme: {weight: 1001}\n", "c.yaml:2:18: tenants.acme.weight: must be from 1 to 1000, got 1001"},
		{"a weight past any whole number", "tenants:\n  acme: {weight: 99999999999999999999}\n", "c.yaml:2:18: tenants.acme.weight: must be"},
		{"a weight that is not a whole number", "tenants:\n  acme: {weight: 0.5}\n", "c.yaml:2:18: tenants.acme.weight: must be a whole number, got a floating-point number"},
		{"a weight given as a word", "tenants:\n  acme: {weight: heavy}\n", "c.yaml:2:18: tenants.acme.weight: must be a whole number, got a string"},
		{"a weight with no value", "tenants:\n  acme: {weight: }\n", "tenants.acme.weight: has no value"},
		{"a negative max_running", "tenants:\n  acme:\n    max_running: -1\n", "c.yaml:3:18: tenants.acme.max_running: must be from 0 to 2147483647, got -1"},
		{"a max_running that is not a whole number", "tenants:\n  acme: {max_running: 2.5}\n", "c.yaml:2:23: tenants.acme.max_running: must be a whole number, got a floating-point number"},
		{"an unknown key under a tenant", "tenants:\n  acme: {max_queud: 10}\n", "c.yaml:2:10: tenants.acme.max_queud: unknown key (known here: max_queued max_running weight)"},
		{"a tenant name no request could use", "tenants:\n  acme corp: {max_queued: 10}\n", "c.yaml:2:3: tenants: may only contain"},
		{"a tenant given twice", "tenants:\n  acme: {max_queued: 1}\n  acme: {max_queued: 2}\n", "c.yaml:3:3: tenants.acme: given twice"},
		{"a tenant with no value", "tenants:\n  acme:\n", "c.yaml:2:3: tenants.acme: has no value"},
		{"a tenant given a number", "tenants:\n  acme: 10\n", "c.yaml:2:9: tenants.acme: must be a mapping (key: value lines), got a whole number"},
		{"tenants given as a list", "tenants: [acme]\n", "c.yaml:1:10: tenants: must be a mapping (key: value lines), got a list"},
		{"a webhook that is not a URL", "alerts:\n  webhook: localhost:9000\n", `c.yaml:2:12: alerts.webhook: is not an http:// or https:// URL (the value is not shown: a webhook URL may hold a secret)`},
		{"an unknown key under alerts", "alerts:\n  email: ops@example.org\n", "c.yaml:2:3: alerts.email: unknown key (known here: webhook)"},
		{"a file that is not a mapping", "- a\n- b\n", "c.yaml:1:1: must be a mapping"},
		{"two documents", "strict: true\n---\nstrict: false\n", "c.yaml:2:1: the file holds one YAML document"},
		{"YAML that does not parse", "a: 1\nb: 2\n  c: 3\n", "c.yaml:3:4: not valid YAML: mapping values are not allowed in this context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte(tt.text))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestAllMistakesAreReportedAtOnce(t *testing.T) {
	_, err := config.Parse("c.yaml", []byte("retention: 30\nstrict: maybe\nqueues:\n  - name: a\n    mode: fast\n"))
	var first *config.Error
	if !errors.As(err, &first) || first.Line != 1 || first.Key != "retention" {
		t.Fatalf("first error %+v, want line 1, key retention", first)
	}
	for _, key := range []string{"retention:", "strict:", "queues[0].mode:"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("errors do not mention %s:\n%v", key, err)
		}
	}
}

// A queue's rules that the engine refuses are all reported too, each at
// its key, not only the first the engine would name (an outside probe
// fixed max_running to be told of priority next).
func TestEveryRuleOfAQueueTheEngineRefusesIsReportedAtOnce(t *testing.T) {
	_, err := config.Parse("c.yaml", []byte("queues:\n  - name: s\n    mode: serial\n    priority: 3\n    max_running: 5\n    rate: {limit: 5, per: 1m, per_tenant: true}\n"))
	if err == nil {
		t.Fatal("a serial queue with a priority, a max_running of 5 and a rate per tenant was taken")
	}
	for _, want := range []string{"c.yaml:4:5: queues[0].priority:", "c.yaml:5:5: queues[0].max_running:", "c.yaml:6:31: queues[0].rate.per_tenant:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the errors do not say %q:\n%v", want, err)
		}
	}
}

// The mistakes are listed in the order of their lines, however late
// each was found (a zone before its expression, a queue declared after
// the schedule that names it).
func TestMistakesAreListedInTheOrderOfTheirLines(t *testing.T) {
	_, err := config.Parse("c.yaml", []byte("strict: true\nschedules:\n  - name: s\n    kind: k\n    queue: q\n    cron: \"0 25 * * *\"\n    timezone: Europe/Nowhere\nqueues:\n  - name: a\n    mode: fast\n"))
	if err == nil {
		t.Fatal("a file with four mistakes was taken")
	}
	var lines []int
	for _, l := range strings.Split(err.Error(), "\n") {
		var line, col int
		if _, scanErr := fmt.Sscanf(l, "c.yaml:%d:%d:", &line, &col); scanErr != nil {
			t.Fatalf("a mistake without its place: %q", l)
		}
		lines = append(lines, line)
	}
	if !slices.Equal(lines, []int{5, 6, 7, 10}) {
		t.Fatalf("mistakes at lines %v, want 5, 6, 7, 10 in that order:\n%v", lines, err)
	}
}

// TestTheREADMEAndDocsDocumentTheWholeFormat: the example in the
// operator's guide (docs/OPERATING.md, "The configuration file", linked
// from README.md) is the one this package is tested with, and every key
// the format knows is in its table.
func TestTheREADMEAndDocsDocumentTheWholeFormat(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "docs", "OPERATING.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(example)+"```\n") {
		t.Errorf("docs/OPERATING.md's configuration example is not testdata/example.yaml")
	}
	for _, key := range []string{"`retention`", "`strict`", "`queues[].name`", "`queues[].retry.max_attempts`", "`queues[].retry.initial_backoff`, `queues[].retry.max_backoff`",
		"`queues[].lease_timeout`", "`queues[].mode`", "`queues[].max_running`",
		"`queues[].on_failure`", "`queues[].uses`", "`queues[].timeout`", "`queues[].alert_after`", "`pools`",
		"`queues[].priority`", "`queues[].max_log_bytes`", "`schedules[]`", "`schedules[].cron`", "`schedules[].timezone`", "`alerts.webhook`",
		"`queues[].max_running_per_tenant`", "`tenants`", "`tenants.<name>.max_queued`", "`tenants.<name>.max_running`", "`tenants.<name>.weight`"} {
		if !strings.Contains(string(readme), "| "+key) {
			t.Errorf("docs/OPERATING.md's table of configuration keys lacks %s", key)
		}
	}
}

func TestASyntaxErrorNamesTheFileLineAndColumn(t *testing.T) {
	_, err := config.Parse("jobwatch.yaml", []byte("retention: 24h\nqueues:\n  - name: index\n    mode: [serial\n"))
	var e *config.Error
	if !errors.As(err, &e) || e.Path != "jobwatch.yaml" || e.Line != 4 || e.Column == 0 {
		t.Fatalf("error %v (%+v); want a *config.Error at jobwatch.yaml line 4 with a column", err, e)
	}
	if want := "jobwatch.yaml:4:"; !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), ": not valid YAML: ") {
		t.Errorf("error %q, want it to start %q and say the YAML is not valid", err, want)
	}
}

func TestAliasesAreFollowed(t *testing.T) {
	f, err := config.Parse("c.yaml", []byte(`
queues:
  - name: index
    retry: &retry {max_attempts: 3, initial_backoff: 1s}
  - name: mail
    retry: *retry
`))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Retry{MaxAttempts: 3, InitialBackoff: time.Second}
	if len(f.Queues) != 2 || f.Queues[0].Retry != want || f.Queues[1].Retry != want {
		t.Errorf("queues %+v; want both with retry %+v", f.Queues, want)
	}
}

// TestTheFileRefusesAQueueExactlyAsTheEngineDoes: for each queue, the
// file is refused if and only if the engine refuses the same rules given
// to SetRules, the serial queue's max_running included (0 and 1 are one
// job at a time; 2 is not).
func TestTheFileRefusesAQueueExactlyAsTheEngineDoes(t *testing.T) {
	e := jobs.New(testdb.OpenT(t, testdb.New(t)), jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(e.Shutdown)
	tests := []struct {
		name  string
		queue string // a queues entry, in flow style
		rules jobtype.QueueRules
		key   string // where the file's refusal is, when refused
	}{
		{"a serial queue without max_running", "{name: q, mode: serial}", jobtype.QueueRules{Serial: true, BlockOnFailure: true}, ""},
		{"a serial queue of max_running 1", "{name: q, mode: serial, max_running: 1}", jobtype.QueueRules{Serial: true, BlockOnFailure: true, MaxRunning: 1}, ""},
		{"a serial queue of max_running 2", "{name: q, mode: serial, max_running: 2}", jobtype.QueueRules{Serial: true, BlockOnFailure: true, MaxRunning: 2}, "queues[0].max_running"},
		{"a parallel queue of max_running 2", "{name: q, max_running: 2}", jobtype.QueueRules{MaxRunning: 2}, ""},
		{"max_backoff below initial_backoff", "{name: q, retry: {initial_backoff: 1m, max_backoff: 1s}}", jobtype.QueueRules{InitialBackoff: time.Minute, MaxBackoff: time.Second}, "queues[0].retry.max_backoff"},
		{"a pool not declared", "{name: q, uses: [db, cache]}", jobtype.QueueRules{Uses: []string{"db", "cache"}}, "queues[0].uses[1]"},
		{"the least urgent priority", "{name: q, priority: 9}", jobtype.QueueRules{Priority: 9}, ""},
		{"a priority past the least urgent", "{name: q, priority: 10}", jobtype.QueueRules{Priority: 10}, "queues[0].priority"},
		{"a serial queue with a priority", "{name: q, mode: serial, priority: 2}", jobtype.QueueRules{Serial: true, BlockOnFailure: true, Priority: 2}, "queues[0].priority"},
		{"a serial queue with priority 0", "{name: q, mode: serial, priority: 0}", jobtype.QueueRules{Serial: true, BlockOnFailure: true}, ""},
		{"a per-tenant bound within max_running", "{name: q, max_running: 4, max_running_per_tenant: 1}", jobtype.QueueRules{MaxRunning: 4, MaxRunningPerTenant: 1}, ""},
		{"a per-tenant bound equal to max_running", "{name: q, max_running: 4, max_running_per_tenant: 4}", jobtype.QueueRules{MaxRunning: 4, MaxRunningPerTenant: 4}, ""},
		{"a per-tenant bound above max_running", "{name: q, max_running: 4, max_running_per_tenant: 5}", jobtype.QueueRules{MaxRunning: 4, MaxRunningPerTenant: 5}, "queues[0].max_running_per_tenant"},
		{"a per-tenant bound without max_running", "{name: q, max_running_per_tenant: 50}", jobtype.QueueRules{MaxRunningPerTenant: 50}, ""},
		{"a serial queue of one per tenant", "{name: q, mode: serial, max_running_per_tenant: 1}", jobtype.QueueRules{Serial: true, BlockOnFailure: true, MaxRunningPerTenant: 1}, ""},
		{"a serial queue of two per tenant", "{name: q, mode: serial, max_running_per_tenant: 2}", jobtype.QueueRules{Serial: true, BlockOnFailure: true, MaxRunningPerTenant: 2}, "queues[0].max_running_per_tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools := map[string]int{"db": 2}
			engineErr := e.SetRules(jobtype.Rules{Pools: pools, Queues: map[string]jobtype.QueueRules{"q": tt.rules}})
			f, fileErr := config.Parse("c.yaml", []byte("pools: {db: 2}\nqueues:\n  - "+tt.queue+"\n"))
			if (engineErr == nil) != (fileErr == nil) {
				t.Fatalf("the engine says %v, the file %v; want both to refuse or both to accept", engineErr, fileErr)
			}
			if fileErr != nil {
				var first *config.Error
				if !errors.As(fileErr, &first) || first.Key != tt.key || first.Line != 3 {
					t.Errorf("refused as %v; want it at line 3, key %s", fileErr, tt.key)
				}
				return
			}
			r, err := f.Rules()
			if err == nil {
				err = e.SetRules(r)
			}
			if err != nil || !reflect.DeepEqual(r.Queues["q"], tt.rules) {
				t.Errorf("the file's rules %+v, %v; want %+v, which the engine accepts", r.Queues["q"], err, tt.rules)
			}
		})
	}
}
