// Package config reads the serve configuration file (YAML) into engine
// configuration (jobtype.Rules), without importing the engine. It
// decides nothing: it checks the file against its format and refuses
// every mistake with the file, line and key at fault; what a rule means
// is the engine's business, so a queue's rules are refused by the
// engine's own check (jobtype.CheckQueueRules), reported at the key at
// fault. The file is read by internal/yamlread, which reads the tokens
// file too: a mistake, a syntax error included, reads the same in both.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/internal/yamlread"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// File is a configuration file as read, before the engine sees it. A
// field the file leaves out is the zero value.
type File struct {
	Path      string
	Retention time.Duration // terminal jobs older than this are deleted; 0: the server's
	Strict    bool          // a submission to an undeclared queue is invalid_argument
	Queues    []Queue
	Pools     map[string]int // pool name -> units shared by the queues that use it
	Schedules []Schedule
	Alerts    Alerts
	Tenants   map[string]Tenant // tenant name -> its entry under tenants; nil when the file has none
}

// Tenant is one entry of tenants: the limits and the weight of one
// tenant. A field left out is no limit, or the default weight.
type Tenant struct {
	// MaxQueued bounds the tenant's jobs not yet running (PENDING,
	// WAITING, QUEUED) at once: jobtype.TenantRules.MaxQueued. 0: no
	// limit.
	MaxQueued int
	// MaxRunning bounds the tenant's RUNNING jobs in all queues at
	// once: jobtype.TenantRules.MaxRunning. 0: no limit.
	MaxRunning int
	// Weight is the tenant's share of claims in a queue shared with
	// other tenants: jobtype.TenantRules.Weight. 0: left out, the
	// default 1; the file itself takes 1 to jobtype.MaxTenantWeight.
	Weight int
}

// Queue is one entry of queues.
type Queue struct {
	Name         string
	Mode         string // "parallel" (also when left out) or "serial"
	OnFailure    string // serial only: "block" (also when left out) or "skip"
	Retry        Retry
	LeaseTimeout time.Duration
	Timeout      time.Duration
	AlertAfter   time.Duration
	MaxRunning   int // parallel: 0 is unbounded; serial: 0 or 1 only, as the engine allows (jobtype.CheckQueueRules)
	Uses         []string
	// Priority is given to a job submitted without one:
	// jobtype.MinPriority (most urgent, also when left out) to
	// jobtype.MaxPriority. A serial queue runs its jobs in order whatever
	// their priority, and refuses one above 0 (jobtype.CheckQueueRules).
	Priority int
	// MaxLogBytes bounds the log each job of the queue keeps: past it
	// the oldest lines are dropped. 0: jobtype.DefaultMaxLogBytes.
	MaxLogBytes int
	// Rate caps the queue's claims per window, across every replica
	// (rate: {limit, per}); the zero Rate: none.
	Rate jobtype.Rate
	// MaxRunningPerTenant bounds each tenant's RUNNING jobs in the
	// queue: jobtype.QueueRules.MaxRunningPerTenant. 0: no bound; at
	// most MaxRunning when that is set; serial: 0 or 1 only, as the
	// engine allows.
	MaxRunningPerTenant int
}

// Retry is a queue's retry: {...}. Zero fields take the server's flags.
type Retry struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Schedule is one entry of schedules.
type Schedule struct {
	Name   string
	Kind   string
	Queue  string // "": the default queue
	Tenant string // "": the default tenant
	Every  time.Duration
	// Cron is a cron expression (jobtype.ParseCron), given instead of
	// Every; Timezone the IANA zone it is read in ("": UTC), only with
	// Cron.
	Cron     string
	Timezone string
	Payload  json.RawMessage // the payload as JSON; null when left out
}

// Alerts is the alerts: mapping.
type Alerts struct {
	Webhook string // an http or https URL; "" : none
}

// Modes and failure policies a queue may name.
const (
	ModeParallel   = "parallel"
	ModeSerial     = "serial"
	OnFailureBlock = "block"
	OnFailureSkip  = "skip"
)

// Error is one mistake in a file: where it is and what is wrong, printed
// file:line:col: key: reason. Load and Parse return every mistake they
// find, joined (errors.Join), so a user fixes them in one go. The tokens
// file's mistakes are the same type, read by the same reader.
type Error = yamlread.Error

// Load reads and checks the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// ErrEmpty is a configuration file with no key at all (empty, or only
// comments). To run without rules on purpose, the file says {}.
var ErrEmpty = errors.New("the file is empty or only comments, which would drop every rule; write {} to declare none on purpose")

// Parse checks data as the file path. Every key must be one of the format
// (docs/OPERATING.md "The configuration file") and of its type; each queue's rules are
// then checked by the engine's own rule (jobtype.CheckQueueRules), so the
// file refuses exactly what the engine would, at the key at fault. path
// only names the file in errors. Mistakes are reported as
// internal/yamlread reports them: a value the reader could not read is
// not repeated, the line and column say where it is.
func Parse(path string, data []byte) (*File, error) {
	r, root, err := yamlread.Read(path, data)
	if err != nil {
		return nil, err
	}
	p := &parser{r: r, f: &File{Path: path}}
	if root == nil {
		// As the tokens file: a copy that is empty or half-written by a
		// deploy must not drop every rule unnoticed. {} says it on
		// purpose.
		return nil, fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	r.Mapping(root, "", yamlread.Fields{
		"retention": func(k string, v *yaml.Node) {
			p.f.Retention = atLeastASecond(r, v, k, "an ended job is kept this long for its callers to read")
		},
		"strict":    func(k string, v *yaml.Node) { p.f.Strict, _ = r.Bool(v, k) },
		"queues":    func(k string, v *yaml.Node) { r.List(v, k, p.queue) },
		"pools":     func(k string, v *yaml.Node) { p.pools(v, k) },
		"schedules": func(k string, v *yaml.Node) { r.List(v, k, p.schedule) },
		"tenants":   func(k string, v *yaml.Node) { p.tenants(v, k) },
		"alerts": func(k string, v *yaml.Node) {
			r.Mapping(v, k, yamlread.Fields{
				"webhook": func(k string, v *yaml.Node) { p.webhook(v, k) },
			})
		},
	})
	p.crossCheck()
	if err := r.Err(); err != nil {
		return nil, err
	}
	return p.f, nil
}

// parser fills f from the tree r walks.
type parser struct {
	r *yamlread.Reader
	f *File
}

func (p *parser) queue(key string, n *yaml.Node) {
	r := p.r
	var q Queue
	ok := r.Mapping(n, key, yamlread.Fields{
		"name":       func(k string, v *yaml.Node) { q.Name, _ = r.Name(v, k, jobtype.NameReason) },
		"mode":       func(k string, v *yaml.Node) { q.Mode, _ = r.OneOf(v, k, ModeParallel, ModeSerial) },
		"on_failure": func(k string, v *yaml.Node) { q.OnFailure, _ = r.OneOf(v, k, OnFailureBlock, OnFailureSkip) },
		"lease_timeout": func(k string, v *yaml.Node) {
			q.LeaseTimeout = atLeastASecond(r, v, k, "a worker heartbeats at a third of it")
		},
		"timeout": func(k string, v *yaml.Node) {
			q.Timeout = atLeastASecond(r, v, k, "the sweep ends attempts once a second")
		},
		"alert_after": func(k string, v *yaml.Node) { q.AlertAfter = atLeastASecond(r, v, k, "the sweep looks once a second") },
		"max_running": func(k string, v *yaml.Node) { q.MaxRunning, _ = r.Int(v, k, 0, math.MaxInt32) },
		"uses":        func(k string, v *yaml.Node) { q.Uses, _ = r.Names(v, k, jobtype.NameReason) },
		"max_running_per_tenant": func(k string, v *yaml.Node) {
			q.MaxRunningPerTenant, _ = r.Int(v, k, 0, math.MaxInt32)
		},
		"priority": func(k string, v *yaml.Node) {
			q.Priority, _ = r.Int(v, k, jobtype.MinPriority, jobtype.MaxPriority)
		},
		"max_log_bytes": func(k string, v *yaml.Node) {
			q.MaxLogBytes, _ = r.Int(v, k, jobtype.MinMaxLogBytes, jobtype.MaxMaxLogBytes)
		},
		"rate": func(k string, v *yaml.Node) { p.rate(k, v, &q.Rate) },
		"retry": func(k string, v *yaml.Node) {
			r.Mapping(v, k, yamlread.Fields{
				"max_attempts":    func(k string, v *yaml.Node) { q.Retry.MaxAttempts, _ = r.Int(v, k, 1, math.MaxInt32) },
				"initial_backoff": func(k string, v *yaml.Node) { q.Retry.InitialBackoff, _ = r.Duration(v, k) },
				"max_backoff":     func(k string, v *yaml.Node) { q.Retry.MaxBackoff, _ = r.Duration(v, k) },
			})
		},
	})
	if ok && !r.Has(key+".name") {
		r.Fail(n, key, "needs a name")
	}
	p.f.Queues = append(p.f.Queues, q)
}

// rate reads a queue's rate: {limit, per}, both required, and
// per_tenant (a window for each tenant; false when left out).
func (p *parser) rate(key string, n *yaml.Node, rate *jobtype.Rate) {
	r := p.r
	var limitOK, perOK bool
	var read jobtype.Rate
	ok := r.Mapping(n, key, yamlread.Fields{
		"limit":      func(k string, v *yaml.Node) { read.Limit, limitOK = r.Int(v, k, 1, jobtype.MaxRateLimit) },
		"per":        func(k string, v *yaml.Node) { read.Per, perOK = r.Duration(v, k) },
		"per_tenant": func(k string, v *yaml.Node) { read.PerTenant, _ = r.Bool(v, k) },
	})
	for _, field := range []string{"limit", "per"} {
		if ok && !r.Has(key+"."+field) {
			r.Fail(n, key, "needs a %s", field)
		}
	}
	// Kept only whole: a half-read rate would be refused again by the
	// engine's check, at the same key.
	if limitOK && perOK {
		*rate = read
	}
}

func (p *parser) pools(n *yaml.Node, key string) {
	p.f.Pools = map[string]int{}
	p.r.Entries(n, key, jobtype.NameReason, func(k, name string, v *yaml.Node) {
		p.f.Pools[name], _ = p.r.Int(v, k, 1, math.MaxInt32)
	})
}

// tenants reads the tenants mapping: each key a tenant's name, as a
// request would name it, each value that tenant's limits and weight.
func (p *parser) tenants(n *yaml.Node, key string) {
	p.f.Tenants = map[string]Tenant{}
	p.r.Entries(n, key, jobtype.NameReason, func(k, name string, v *yaml.Node) {
		var t Tenant
		p.r.Mapping(v, k, yamlread.Fields{
			"max_queued":  func(k string, v *yaml.Node) { t.MaxQueued, _ = p.r.Int(v, k, 0, math.MaxInt32) },
			"max_running": func(k string, v *yaml.Node) { t.MaxRunning, _ = p.r.Int(v, k, 0, math.MaxInt32) },
			"weight":      func(k string, v *yaml.Node) { t.Weight = p.weight(v, k) },
		})
		p.f.Tenants[name] = t
	})
}

// weight reads a tenant's weight, a whole number from 1 to
// jobtype.MaxTenantWeight. Zero and below are refused with why: a
// weight is a share, and fair claiming serves every tenant (one alone in
// a queue gets every claim, whatever its weight), so a weight of 0
// could only be a mistake; the engine would read it as the default.
func (p *parser) weight(n *yaml.Node, key string) int {
	var w int
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Decode(&w) == nil && w < 1 {
		p.r.Fail(n, key, "must be from 1 to %d, got %d: a weight is the tenant's share of claims in a queue, and every tenant is served (leave weight out for the default, 1)", jobtype.MaxTenantWeight, w)
		return 0
	}
	w, _ = p.r.Int(n, key, 1, jobtype.MaxTenantWeight)
	return w
}

func (p *parser) schedule(key string, n *yaml.Node) {
	r := p.r
	var s Schedule
	var times scheduleTimes
	ok := r.Mapping(n, key, yamlread.Fields{
		"name":   func(k string, v *yaml.Node) { s.Name, _ = r.Name(v, k, jobtype.NameReason) },
		"kind":   func(k string, v *yaml.Node) { s.Kind, _ = r.Name(v, k, jobtype.NameReason) },
		"queue":  func(k string, v *yaml.Node) { s.Queue = p.optionalName(v, k) },
		"tenant": func(k string, v *yaml.Node) { s.Tenant = p.optionalName(v, k) },
		"every": func(k string, v *yaml.Node) {
			s.Every, _ = r.Duration(v, k)
			if s.Every > 0 && s.Every < jobtype.MinScheduleEvery {
				r.Fail(v, k, "must be at least %v (runs are queued by a sweep once a second), got %v", jobtype.MinScheduleEvery, s.Every)
				s.Every = 0
			}
		},
		"cron": func(k string, v *yaml.Node) {
			var ok bool
			if s.Cron, ok = r.String(v, k); ok {
				times.cron = v
			}
		},
		"timezone": func(k string, v *yaml.Node) {
			var ok bool
			if s.Timezone, ok = r.String(v, k); ok && s.Timezone == "" {
				// "" would read as UTC: a zone meant and left empty by
				// a template should not run at UTC's hours unseen.
				r.Fail(v, k, "must name a zone, such as Europe/Berlin or UTC; leave it out for UTC")
			} else if ok {
				times.zone = v
			}
		},
		"payload": func(k string, v *yaml.Node) {
			var payload any
			if err := v.Decode(&payload); err != nil {
				r.Fail(v, k, "cannot be read as JSON: %v", err)
				return
			}
			b, err := json.Marshal(payload)
			if err != nil {
				r.Fail(v, k, "cannot be read as JSON: %v", err)
				return
			}
			// As a submission's payload would be, at the default limit;
			// the engine checks it again at the server's own.
			if err := jobtype.CheckJSON("payload", b, jobtype.DefaultMaxPayloadBytes); err != nil {
				r.Fail(v, k, "%s", payloadReason(err))
				return
			}
			// A run's payload reaches its worker as a Value, as a
			// submitted one does.
			if err := wire.CheckExactJSON(b, "payload"); err != nil {
				r.Fail(v, k, "%v", err)
				return
			}
			s.Payload = b
		},
	})
	if ok {
		for _, required := range []string{"name", "kind"} {
			if !r.Has(key + "." + required) {
				r.Fail(n, key, "needs %s", required)
			}
		}
		p.scheduleTimes(key, n, s, times)
	}
	p.f.Schedules = append(p.f.Schedules, s)
}

// scheduleTimes are the values of a schedule's cron and timezone, each
// nil when left out or refused as it is (not a string): a value refused
// is not read again for what it says.
type scheduleTimes struct{ cron, zone *yaml.Node }

// scheduleTimes checks when the schedule s at key runs: every, or cron
// with its timezone, as the engine reads them (jobtype.ParseCron).
func (p *parser) scheduleTimes(key string, n *yaml.Node, s Schedule, times scheduleTimes) {
	r := p.r
	every, cron, zone := r.Has(key+".every"), r.Has(key+".cron"), r.Has(key+".timezone")
	switch {
	case every && cron:
		r.FailAt(key+".cron", "is given with every; a schedule runs on one of the two")
		return
	case !every && !cron:
		r.Fail(n, key, "needs every or cron")
		return
	case zone && !cron:
		r.FailAt(key+".timezone", "applies to cron schedules only")
		return
	case times.cron == nil || (zone && times.zone == nil):
		return
	}
	_, err := jobtype.ParseCron(s.Cron, s.Timezone)
	var inv *jobtype.InvalidError
	if errors.As(err, &inv) && inv.Field == "timezone" {
		// The zone is read first: the expression is then read in UTC,
		// so that both mistakes are told at once.
		r.Fail(times.zone, key+".timezone", "%s", payloadReason(err))
		_, err = jobtype.ParseCron(s.Cron, "")
	}
	if err != nil {
		r.Fail(times.cron, key+".cron", "%s", payloadReason(err))
	}
}

// optionalName is a name where "" takes the default.
func (p *parser) optionalName(n *yaml.Node, key string) string {
	if s, ok := p.r.String(n, key); !ok || s == "" {
		return ""
	}
	s, _ := p.r.Name(n, key, jobtype.NameReason)
	return s
}

// payloadReason is why the engine refuses a payload, without the field
// name the key already gives.
func payloadReason(err error) string {
	var tooLarge *jobtype.TooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Sprintf("%d bytes as JSON is over the limit of %d", tooLarge.Bytes, tooLarge.Limit)
	}
	var inv *jobtype.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}

func (p *parser) webhook(n *yaml.Node, key string) {
	s, ok := p.r.String(n, key)
	if !ok || s == "" {
		return
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The value is not quoted: a webhook's path or query is often
		// its secret, and this message reaches the log on a reload.
		p.r.Fail(n, key, "is not an http:// or https:// URL (the value is not shown: a webhook URL may hold a secret)")
		return
	}
	p.f.Alerts.Webhook = s
}

// crossCheck refuses what each key allows alone but the file does not
// allow together. What a queue's rules may be is the engine's to decide
// (jobtype.CheckQueueRules), reported at the key at fault; what is left
// here is the file's own shape: a name declared twice, a key that has
// no meaning where it is, a pool listed twice, strict's declared queues.
func (p *parser) crossCheck() {
	r := p.r
	queues := map[string]bool{}
	for i, q := range p.f.Queues {
		key := fmt.Sprintf("queues[%d]", i)
		if q.Name != "" && queues[q.Name] {
			r.FailAt(key+".name", "queue %q is declared twice", q.Name)
		}
		queues[q.Name] = true
		// on_failure: skip on a parallel queue is what the engine does
		// anyway, so only the file can tell the key is misplaced.
		if q.Mode != ModeSerial && q.OnFailure != "" {
			r.FailAt(key+".on_failure", "applies to serial queues only")
		}
		used := map[string]bool{}
		for j, pool := range q.Uses {
			if used[pool] {
				r.FailAt(fmt.Sprintf("%s.uses[%d]", key, j), "pool %q is listed twice", pool)
			}
			used[pool] = true
		}
		p.engineCheck(key, q)
	}
	schedules := map[string]bool{}
	for i, s := range p.f.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if s.Name != "" && schedules[s.Name] {
			r.FailAt(key+".name", "schedule %q is declared twice", s.Name)
		}
		schedules[s.Name] = true
		queue := s.Queue
		if queue == "" {
			queue = jobtype.DefaultQueue
		}
		if p.f.Strict && !queues[queue] {
			at := key + ".queue"
			if s.Queue == "" {
				at = key
			}
			r.FailAt(at, "queue %q is not declared, and strict is true", queue)
		}
	}
}

// engineKeys are the file's keys, under a queue, of the rules
// jobtype.CheckQueueRules names differently.
var engineKeys = map[string]string{
	"max_attempts":     "retry.max_attempts",
	"initial_backoff":  "retry.initial_backoff",
	"max_backoff":      "retry.max_backoff",
	"block_on_failure": "on_failure",
}

// engineCheck refuses the queue q, at key, as the engine would refuse
// its rules, at the keys the engine names: every problem, not the first.
func (p *parser) engineCheck(key string, q Queue) {
	for _, inv := range jobtype.QueueRuleProblems(queueRules(q), p.f.Pools) {
		at := inv.Field
		if k, ok := engineKeys[at]; ok {
			at = k
		}
		at = key + "." + at
		if !p.r.Has(at) {
			at = key
		}
		p.r.FailAt(at, "%s", inv.Reason)
	}
}

// Rules returns what the engine enforces from the file: every key. The
// error is kept for a key the engine may not enforce yet, which must be
// refused, each with its line, rather than accepted and ignored: a user
// who declares a serial queue must not believe it is serial.
func (f *File) Rules() (jobtype.Rules, error) {
	// Callers refused by strict see the file's name, not the server's
	// directory layout.
	r := jobtype.Rules{Source: "config " + filepath.Base(f.Path), Retention: f.Retention, Strict: f.Strict, Queues: map[string]jobtype.QueueRules{}, AlertWebhook: f.Alerts.Webhook}
	for _, q := range f.Queues {
		r.Queues[q.Name] = queueRules(q)
	}
	if len(f.Pools) > 0 {
		r.Pools = f.Pools
	}
	if len(f.Tenants) > 0 {
		r.Tenants = make(map[string]jobtype.TenantRules, len(f.Tenants))
		for name, t := range f.Tenants {
			r.Tenants[name] = jobtype.TenantRules{MaxQueued: t.MaxQueued, MaxRunning: t.MaxRunning, Weight: t.Weight}
		}
	}
	for _, s := range f.Schedules {
		r.Schedules = append(r.Schedules, jobtype.Schedule{Name: s.Name, Kind: s.Kind, Queue: s.Queue, Tenant: s.Tenant, Every: s.Every, Cron: s.Cron, Timezone: s.Timezone, Payload: s.Payload})
	}
	return r, nil
}

// queueRules are q's rules as the engine keeps them.
func queueRules(q Queue) jobtype.QueueRules {
	return jobtype.QueueRules{
		MaxAttempts:    int32(q.Retry.MaxAttempts),
		InitialBackoff: q.Retry.InitialBackoff,
		MaxBackoff:     q.Retry.MaxBackoff,
		LeaseTimeout:   q.LeaseTimeout,
		Serial:         q.Mode == ModeSerial,
		// A serial queue promises order, so a failed head holds it
		// unless the file says skip.
		BlockOnFailure: q.Mode == ModeSerial && q.OnFailure != OnFailureSkip,
		MaxRunning:     q.MaxRunning,
		Uses:           q.Uses,
		Timeout:        q.Timeout,
		AlertAfter:     q.AlertAfter,
		Priority:       int32(q.Priority),
		MaxLogBytes:    int64(q.MaxLogBytes),
		Rate:           q.Rate,

		MaxRunningPerTenant: q.MaxRunningPerTenant,
	}
}

// atLeastASecond reads the duration at key, refusing one under a second
// (why says what the key's value is for): "1ns" or "500ms" there is a
// slip (every job LOST at once, every ended job deleted at once), never
// a setting.
func atLeastASecond(r *yamlread.Reader, v *yaml.Node, key, why string) time.Duration {
	d, ok := r.Duration(v, key)
	if ok && d < time.Second {
		r.Fail(v, key, "must be at least 1s (%s), got %v", why, d)
		return 0
	}
	return d
}
