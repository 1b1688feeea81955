// Package config reads the serve configuration file (YAML) into engine
// configuration (jobs.Rules). It decides nothing: it checks the file
// against its format and refuses every mistake with the file, line and
// key at fault; what a rule means is the engine's business.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/jobs"
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

	// keys holds where each key of the file was (by path, such as
	// "queues[0].mode"), for the refusals that come after reading.
	keys map[string]*yaml.Node
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
	MaxRunning   int // parallel only; 0: unbounded
	Uses         []string
}

// Retry is a queue's retry: {...}. Zero fields take the server's flags.
type Retry struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Schedule is one entry of schedules.
type Schedule struct {
	Name    string
	Kind    string
	Queue   string // "": the default queue
	Tenant  string // "": the default tenant
	Every   time.Duration
	Payload json.RawMessage // the payload as JSON; null when left out
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

// Error is one mistake in a file: where it is and what is wrong. Load and
// Rules return every mistake they find, joined (errors.Join), so a user
// fixes them in one go.
type Error struct {
	Path   string // the file
	Line   int    // 1-based; 0 when the mistake has no place (an unreadable file)
	Column int
	Key    string // the key at fault as a path, such as "queues[0].retry.max_backoff"
	Reason string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Column, e.Reason)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.Path, e.Line, e.Column, e.Key, e.Reason)
}

// Load reads and checks the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse checks data as the file path. Every key must be one of the format
// (README "Configuration file"), of its type, and consistent with the
// rest of the file; path only names the file in errors.
func Parse(path string, data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return &File{Path: path, keys: map[string]*yaml.Node{}}, nil // an empty file declares nothing
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &Error{Path: path, Line: more.Line, Column: more.Column, Reason: "a config file holds one YAML document; remove the second"}
	}
	p := &parser{f: &File{Path: path, keys: map[string]*yaml.Node{}}}
	root := doc.Content[0]
	if root.ShortTag() == "!!null" {
		return p.f, nil
	}
	p.mapping(root, "", map[string]func(string, *yaml.Node){
		"retention": func(k string, v *yaml.Node) { p.duration(v, k, &p.f.Retention) },
		"strict":    func(k string, v *yaml.Node) { p.boolean(v, k, &p.f.Strict) },
		"queues":    func(k string, v *yaml.Node) { p.sequence(v, k, p.queue) },
		"pools":     func(k string, v *yaml.Node) { p.pools(v, k) },
		"schedules": func(k string, v *yaml.Node) { p.sequence(v, k, p.schedule) },
		"alerts": func(k string, v *yaml.Node) {
			p.mapping(v, k, map[string]func(string, *yaml.Node){
				"webhook": func(k string, v *yaml.Node) { p.webhook(v, k) },
			})
		},
	})
	p.crossCheck()
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.f, nil
}

// parser walks the YAML tree, filling f and collecting every mistake.
type parser struct {
	f    *File
	errs []error
}

func (p *parser) fail(n *yaml.Node, key, format string, args ...any) {
	p.errs = append(p.errs, &Error{Path: p.f.Path, Line: n.Line, Column: n.Column, Key: key, Reason: fmt.Sprintf(format, args...)})
}

// failAt fails at the key path key, which the walk has recorded.
func (p *parser) failAt(key, format string, args ...any) {
	p.fail(p.f.keys[key], key, format, args...)
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// deref follows an alias (*anchor) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mapping walks the mapping n at path prefix: each key must be one of
// fields, once. A null value (a key with nothing after it) is refused
// too: it is nearly always a line whose value went missing.
func (p *parser) mapping(n *yaml.Node, prefix string, fields map[string]func(key string, v *yaml.Node)) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.fail(n, prefix, "must be a mapping (key: value lines), got %s", describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		key := join(prefix, k.Value)
		field, ok := fields[k.Value]
		switch {
		case !ok:
			p.fail(k, key, "unknown key%s", knownKeys(fields))
			continue
		case seen[k.Value]:
			p.fail(k, key, "given twice")
			continue
		}
		seen[k.Value] = true
		p.f.keys[key] = k
		if v.ShortTag() == "!!null" {
			p.fail(k, key, "has no value")
			continue
		}
		field(key, v)
	}
}

func knownKeys(fields map[string]func(string, *yaml.Node)) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	s := " (known here:"
	for _, name := range names {
		s += " " + name
	}
	return s + ")"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return strconv.Quote(n.Value)
}

// sequence calls item for each entry of the list n at key.
func (p *parser) sequence(n *yaml.Node, key string, item func(key string, v *yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, key, "must be a list (lines starting with -), got %s", describe(n))
		return
	}
	for i, v := range n.Content {
		k := fmt.Sprintf("%s[%d]", key, i)
		p.f.keys[k] = v
		item(k, deref(v))
	}
}

func (p *parser) scalar(n *yaml.Node, key, tag, want string) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		p.fail(n, key, "must be %s, got %s", want, describe(n))
		return false
	}
	return true
}

func (p *parser) str(n *yaml.Node, key string, dst *string) {
	if p.scalar(n, key, "!!str", "a string (quote it if it looks like a number)") {
		*dst = n.Value
	}
}

func (p *parser) name(n *yaml.Node, key string, dst *string) {
	var s string
	p.str(n, key, &s)
	if s == "" {
		return
	}
	if err := jobs.CheckName(key, s); err != nil {
		p.fail(n, key, "%q: %s", s, reasonOf(err))
		return
	}
	*dst = s
}

// requiredName is name where "" is refused rather than taken for the
// default.
func (p *parser) requiredName(n *yaml.Node, key string, dst *string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value == "" {
		p.fail(n, key, "must not be empty")
		return
	}
	p.name(n, key, dst)
}

func reasonOf(err error) string {
	var inv *jobs.InvalidError
	if errors.As(err, &inv) {
		return inv.Reason
	}
	return err.Error()
}

func (p *parser) boolean(n *yaml.Node, key string, dst *bool) {
	if p.scalar(n, key, "!!bool", "true or false") {
		_ = n.Decode(dst)
	}
}

// integer reads a whole number from least to most.
func (p *parser) integer(n *yaml.Node, key string, least, most int, dst *int) {
	if !p.scalar(n, key, "!!int", "a whole number") {
		return
	}
	v, err := strconv.Atoi(n.Value)
	switch {
	case err != nil:
		p.fail(n, key, "%q is not a whole number this server can hold", n.Value)
	case v < least || v > most:
		p.fail(n, key, "must be from %d to %d, got %d", least, most, v)
	default:
		*dst = v
	}
}

// duration reads a positive Go duration with a unit: 30s, 5m, 24h.
func (p *parser) duration(n *yaml.Node, key string, dst *time.Duration) {
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		p.fail(n, key, "%s needs a unit, such as %ss or %sm", n.Value, n.Value, n.Value)
		return
	}
	if !p.scalar(n, key, "!!str", "a duration such as 30s, 5m or 24h") {
		return
	}
	d, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		p.fail(n, key, "%q is not a duration such as 30s, 5m or 24h", n.Value)
	case d <= 0:
		p.fail(n, key, "must be positive, got %s", n.Value)
	default:
		*dst = d
	}
}

func (p *parser) names(n *yaml.Node, key string, dst *[]string) {
	p.sequence(n, key, func(k string, v *yaml.Node) {
		var s string
		p.requiredName(v, k, &s)
		if s != "" {
			*dst = append(*dst, s)
		}
	})
}

func (p *parser) queue(key string, n *yaml.Node) {
	var q Queue
	p.mapping(n, key, map[string]func(string, *yaml.Node){
		"name":          func(k string, v *yaml.Node) { p.requiredName(v, k, &q.Name) },
		"mode":          func(k string, v *yaml.Node) { p.oneOf(v, k, &q.Mode, ModeParallel, ModeSerial) },
		"on_failure":    func(k string, v *yaml.Node) { p.oneOf(v, k, &q.OnFailure, OnFailureBlock, OnFailureSkip) },
		"lease_timeout": func(k string, v *yaml.Node) { p.duration(v, k, &q.LeaseTimeout) },
		"timeout":       func(k string, v *yaml.Node) { p.duration(v, k, &q.Timeout) },
		"alert_after":   func(k string, v *yaml.Node) { p.duration(v, k, &q.AlertAfter) },
		"max_running":   func(k string, v *yaml.Node) { p.integer(v, k, 0, math.MaxInt32, &q.MaxRunning) },
		"uses":          func(k string, v *yaml.Node) { p.names(v, k, &q.Uses) },
		"retry": func(k string, v *yaml.Node) {
			p.mapping(v, k, map[string]func(string, *yaml.Node){
				"max_attempts":    func(k string, v *yaml.Node) { p.integer(v, k, 1, math.MaxInt32, &q.Retry.MaxAttempts) },
				"initial_backoff": func(k string, v *yaml.Node) { p.duration(v, k, &q.Retry.InitialBackoff) },
				"max_backoff":     func(k string, v *yaml.Node) { p.duration(v, k, &q.Retry.MaxBackoff) },
			})
		},
	})
	if _, ok := p.f.keys[key+".name"]; !ok && n.Kind == yaml.MappingNode {
		p.fail(n, key, "needs a name")
	}
	p.f.Queues = append(p.f.Queues, q)
}

func (p *parser) oneOf(n *yaml.Node, key string, dst *string, allowed ...string) {
	var s string
	p.str(n, key, &s)
	for _, a := range allowed {
		if s == a {
			*dst = s
			return
		}
	}
	if n.ShortTag() == "!!str" {
		p.fail(n, key, "must be %s or %s, got %q", allowed[0], allowed[1], s)
	}
}

func (p *parser) pools(n *yaml.Node, key string) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, key, "must be a mapping of pool names to sizes, such as db: 4; got %s", describe(n))
		return
	}
	p.f.Pools = map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		pk := join(key, k.Value)
		var name string
		p.name(k, pk, &name)
		if _, dup := p.f.Pools[name]; dup && name != "" {
			p.fail(k, pk, "given twice")
			continue
		}
		p.f.keys[pk] = k
		size := 0
		p.integer(v, pk, 1, math.MaxInt32, &size)
		if name != "" {
			p.f.Pools[name] = size
		}
	}
}

func (p *parser) schedule(key string, n *yaml.Node) {
	var s Schedule
	p.mapping(n, key, map[string]func(string, *yaml.Node){
		"name":   func(k string, v *yaml.Node) { p.requiredName(v, k, &s.Name) },
		"kind":   func(k string, v *yaml.Node) { p.requiredName(v, k, &s.Kind) },
		"queue":  func(k string, v *yaml.Node) { p.name(v, k, &s.Queue) },
		"tenant": func(k string, v *yaml.Node) { p.name(v, k, &s.Tenant) },
		"every": func(k string, v *yaml.Node) {
			p.duration(v, k, &s.Every)
			if s.Every > 0 && s.Every < jobs.MinScheduleEvery {
				p.fail(v, k, "must be at least %v (runs are queued by a sweep once a second), got %s", jobs.MinScheduleEvery, v.Value)
				s.Every = 0
			}
		},
		"payload": func(k string, v *yaml.Node) {
			var payload any
			if err := v.Decode(&payload); err != nil {
				p.fail(v, k, "cannot be read as JSON: %v", err)
				return
			}
			b, err := json.Marshal(payload)
			if err != nil {
				p.fail(v, k, "cannot be read as JSON: %v", err)
				return
			}
			// As a submission's payload would be, at the default limit;
			// the engine checks it again at the server's own.
			if err := jobs.CheckPayload(b, jobs.DefaultMaxPayloadBytes); err != nil {
				p.fail(v, k, "%s", payloadReason(err))
				return
			}
			s.Payload = b
		},
	})
	if n.Kind == yaml.MappingNode {
		for _, required := range []string{"name", "kind", "every"} {
			if _, ok := p.f.keys[key+"."+required]; !ok {
				p.fail(n, key, "needs %s", required)
			}
		}
	}
	p.f.Schedules = append(p.f.Schedules, s)
}

// payloadReason is why the engine refuses a payload, without the field
// name the key already gives.
func payloadReason(err error) string {
	var tooLarge *jobs.TooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Sprintf("%d bytes as JSON is over the limit of %d", tooLarge.Bytes, tooLarge.Limit)
	}
	return reasonOf(err)
}

func (p *parser) webhook(n *yaml.Node, key string) {
	var s string
	p.str(n, key, &s)
	if s == "" {
		return
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The value is not quoted: a webhook's path or query is often
		// its secret, and this message reaches the log on a reload.
		p.fail(n, key, "is not an http:// or https:// URL (the value is not shown: a webhook URL may hold a secret)")
		return
	}
	p.f.Alerts.Webhook = s
}

// crossCheck refuses what each key allows alone but the file does not
// allow together.
func (p *parser) crossCheck() {
	queues := map[string]bool{}
	for i, q := range p.f.Queues {
		key := fmt.Sprintf("queues[%d]", i)
		if q.Name != "" && queues[q.Name] {
			p.failAt(key+".name", "queue %q is declared twice", q.Name)
		}
		queues[q.Name] = true
		if q.Mode != ModeSerial && q.OnFailure != "" {
			p.failAt(key+".on_failure", "applies to serial queues only")
		}
		if q.Mode == ModeSerial && q.MaxRunning > 0 {
			p.failAt(key+".max_running", "a serial queue runs one job at a time; max_running applies to parallel queues")
		}
		if r := q.Retry; r.InitialBackoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.InitialBackoff {
			p.failAt(key+".retry.max_backoff", "%v is below initial_backoff %v", r.MaxBackoff, r.InitialBackoff)
		}
		used := map[string]bool{}
		for j, pool := range q.Uses {
			k := fmt.Sprintf("%s.uses[%d]", key, j)
			if _, ok := p.f.Pools[pool]; !ok {
				p.failAt(k, "pool %q is not declared under pools", pool)
			}
			if used[pool] {
				p.failAt(k, "pool %q is listed twice", pool)
			}
			used[pool] = true
		}
	}
	schedules := map[string]bool{}
	for i, s := range p.f.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if s.Name != "" && schedules[s.Name] {
			p.failAt(key+".name", "schedule %q is declared twice", s.Name)
		}
		schedules[s.Name] = true
		queue := s.Queue
		if queue == "" {
			queue = jobs.DefaultQueue
		}
		if p.f.Strict && !queues[queue] {
			at := key + ".queue"
			if s.Queue == "" {
				at = key
			}
			p.failAt(at, "queue %q is not declared, and strict is true", queue)
		}
	}
}

// Rules returns what the engine enforces from the file: every key. The
// error is kept for a key the engine may not enforce yet, which must be
// refused, each with its line, rather than accepted and ignored: a user
// who declares a serial queue must not believe it is serial.
func (f *File) Rules() (jobs.Rules, error) {
	// Callers refused by strict see the file's name, not the server's
	// directory layout.
	r := jobs.Rules{Source: "config " + filepath.Base(f.Path), Retention: f.Retention, Strict: f.Strict, Queues: map[string]jobs.QueueRules{}, AlertWebhook: f.Alerts.Webhook}
	for _, q := range f.Queues {
		r.Queues[q.Name] = jobs.QueueRules{
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
		}
	}
	if len(f.Pools) > 0 {
		r.Pools = f.Pools
	}
	for _, s := range f.Schedules {
		r.Schedules = append(r.Schedules, jobs.Schedule{Name: s.Name, Kind: s.Kind, Queue: s.Queue, Tenant: s.Tenant, Every: s.Every, Payload: s.Payload})
	}
	return r, nil
}
