package server

// The send budget: answers are admitted before they are built, and a
// caller that reads gets what it was admitted for.
//
// Every large answer (admittedAnswerBytes, 32 KiB, or more) takes its
// size from one server-wide budget of bytes (Config.MaxPendingSendBytes)
// before the bytes that are its own are made, and gives it back once
// they are handed to the connection:
//   - ListJobs of full jobs takes a whole page's worth before it reads
//     the store (the answer's real size is only known after), and keeps
//     what the answer turns out to need;
//   - a WatchJobLogs stream that reads lines from the store takes what a
//     page of them holds before it reads it (admitRead), and keeps what
//     the page turns out to hold until its last message is written
//     (logs.go);
//   - any other unary answer, and every stream message, takes its size
//     after the handler has built the message and before it is encoded:
//     for an answer shared by the calls one publish woke (shared.go) that
//     is the only copy the call makes of it, so 2,000 woken waiters hold
//     one message and at most the budget's worth of encodings.
//
// The answers of one tenant's clients (or one worker token's) hold at
// most a quarter of the budget (holderShare); past it they wait in a line
// of the tenant's own, so clients that do not read take their tenant's
// share, not everyone's.
//
// A call that finds the budget full waits its turn, first come first
// served, for as long as the answers ahead of it are being sent. When
// none has been sent for sendStall (the budget is held by clients that
// do not read) it gets resource_exhausted instead; so does at once an
// answer already built when the built answers waiting hold as much as
// the budget (admitBuilt), so that they are bounded too. Nothing that was
// admitted is ever cut for another: a write is cut only when it stayed
// blocked for SendTimeout (or past its stream's lifetime) on a client
// that does not read. Such a cut is counted as a failed call
// (deadline_exceeded) in jobwatch_requests_total and logged at warn once
// per episode of cuts.

import (
	"bufio"
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

const (
	// MinSendBudget is the smallest default send budget (DefaultSendBudget).
	MinSendBudget = 64 << 20
	// admittedAnswerBytes is the smallest answer admitted against the
	// send budget; smaller ones (keepalives, summaries, small jobs,
	// errors) hold too little to matter and never wait for it, so other
	// callers are answered while the budget is full.
	admittedAnswerBytes = 32 << 10
	// sendStall is how long a call waits for room in the send budget
	// while no admitted answer is sent; past it the budget is held by
	// clients that do not read, and the call is refused. It is never
	// longer than SendTimeout, which frees what those clients hold.
	sendStall = 5 * time.Second
	// sendBudgetMemoryShare is the share of the machine's memory the
	// default send budget takes. Answers to clients that read drain at
	// network speed and need little of it; what it bounds is answers
	// held for clients that do not, which the memory of the process
	// (payloads read, connections, parked calls) must not give way to.
	sendBudgetMemoryShare = 64
	// cutEpisodeGap ends an episode of cut sends: the next cut after this
	// long without one is logged again.
	cutEpisodeGap = time.Minute
	// cutReminder is how often a long episode of cuts is logged again,
	// with the number cut meanwhile.
	cutReminder = 10 * time.Minute
)

// DefaultSendBudget is what Config.MaxPendingSendBytes defaults to: a
// sixty-fourth of the memory this process may use (the smallest of the
// machine's memory, its cgroup's limit and GOMEMLIMIT), and at least
// MinSendBudget (64 MiB): 64 MiB up to 4 GiB of memory, 384
// MiB on 24 GiB.
func DefaultSendBudget() int {
	budget := max(MinSendBudget, usableMemory()/sendBudgetMemoryShare)
	return int(min(budget, math.MaxInt))
}

// usableMemory is the memory this process may use, or 0 when unknown.
func usableMemory() int64 {
	limit := int64(0)
	consider := func(n int64) {
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	if n := debug.SetMemoryLimit(-1); n < math.MaxInt64 {
		consider(n)
	}
	consider(memTotal("/proc/meminfo"))
	consider(cgroupLimit("/sys/fs/cgroup/memory.max"))                   // cgroup v2
	consider(cgroupLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes")) // cgroup v1
	return limit
}

func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupLimit reads a cgroup memory limit: "max" (v2) or a value near
// MaxInt64 (v1) is none.
func cgroupLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n >= math.MaxInt64/2 {
		return 0
	}
	return n
}

// sendBudget holds the bytes of answers admitted and not yet sent.
type sendBudget struct {
	limit int64
	stall time.Duration // see sendStall; 0: sendStall
	log   *slog.Logger  // nil: slog.Default()

	mu      sync.Mutex
	held    int64
	waiting list.List // of *admission, first come first served
	// waitingBuilt is the bytes of the answers waiting (in waiting or in
	// a holder's own line) that are already built (admitBuilt): they are
	// held in memory while they wait, so they are bounded by the limit
	// too.
	waitingBuilt int64
	sent         time.Time // when an admitted answer was last sent
	cuts         cutEpisode
	// holders are the tenants and worker tokens whose answers count
	// against a share of the budget, by key (holderOf). None is ever
	// removed: there are at most as many as the tokens files named.
	holders map[string]*holder

	peak    atomic.Int64 // the most held at once, for tests
	waits   atomic.Int64 // calls that waited for room
	refused atomic.Int64 // calls refused for want of room
}

// A holder is whose answers count against one share of the budget, a
// holderShare-th of it: a client token's tenant (every token of it
// together), or a worker token. An answer that would take its holder
// past the share waits in the holder's own line, out of everyone else's
// way, until the holder's answers ahead of it are sent. So the clients of
// one tenant that do not read hold at most its share, and the others'
// large answers keep being admitted from the rest. An admin's calls, and
// every call of a server without tokens, have no holder: they are bounded
// by the budget alone.
type holder struct {
	what         string // `tenant "acme"`, for messages
	held         int64  // admitted and not yet given back
	queued       int64  // in sendBudget.waiting
	waitingBuilt int64  // built answers waiting, in either line
	own          list.List
	sent         time.Time // when one of its admitted answers was last sent
}

// holderShare is how many shares the budget is cut into, one a holder at
// most: a quarter, so callers of one tenant that do not read leave three
// quarters of it to the others, and of three tenants, a quarter.
const holderShare = 4

type admission struct {
	n       int64
	built   bool          // counted in waitingBuilt while it waits
	h       *holder       // nil: bounded by the budget alone
	own     bool          // in h.own rather than waiting; guarded by sendBudget.mu
	el      *list.Element // in its line; nil once granted or gone; guarded by sendBudget.mu
	granted chan struct{}
}

// setUpSends gives the codecs and interceptor of codec.go the send budget
// and the request size limit. It runs in New, before anything is served.
func (s *Server) setUpSends() {
	s.shared.sends = &sendBudget{
		limit: int64(s.cfg.MaxPendingSendBytes),
		stall: min(sendStall, s.cfg.SendTimeout),
		log:   s.log,
	}
	s.shared.maxRequestBytes = int64(s.cfg.MaxRequestBytes)
	s.shared.sends.register(s.cfg.Registry, s.log)
}

// register puts the budget's use on /metrics.
func (b *sendBudget) register(reg *prometheus.Registry, log *slog.Logger) {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "jobwatch_send_budget_bytes",
			Help: "Bytes of answers admitted and not yet sent (limit: --max-pending-send-bytes).",
		}, func() float64 {
			b.mu.Lock()
			defer b.mu.Unlock()
			return float64(b.held)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "jobwatch_send_budget_waits_total",
			Help: "Answers that waited for room in the send budget before being built or encoded.",
		}, func() float64 { return float64(b.waits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "jobwatch_send_budget_refused_total",
			Help: "Calls refused with resource_exhausted because the send budget, or their tenant's share of it, was full and nothing was sent for a while (clients that do not read hold it).",
		}, func() float64 { return float64(b.refused.Load()) }),
	} {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			log.Warn("register metric", "err", err)
		}
	}
}

// holderOf is the holder whose share the answers of the call in ctx count
// against: its client token's tenant, or its worker token; nil for an
// admin and on a server without tokens.
func (b *sendBudget) holderOf(ctx context.Context) *holder {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil
	}
	var key, what string
	switch p.Role {
	case auth.RoleClient:
		key, what = "tenant\x00"+p.Tenant, fmt.Sprintf("tenant %q", p.Tenant)
	case auth.RoleWorker:
		key, what = "worker\x00"+p.TokenID, fmt.Sprintf("worker token %q", p.Name)
	default:
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holders[key]
	if h == nil {
		if b.holders == nil {
			b.holders = make(map[string]*holder)
		}
		h = &holder{what: what}
		b.holders[key] = h
	}
	return h
}

// share is the most one holder's answers may hold.
func (b *sendBudget) share() int64 { return max(b.limit/holderShare, 1) }

// admit takes n bytes of the budget for an answer of h's (nil: no
// holder), waiting for room first come first served while answers ahead
// are being sent, and returns what it took: n, or the whole budget (or
// h's whole share) for an answer larger than all of it, which then goes
// alone. give must return it.
func (b *sendBudget) admit(ctx context.Context, h *holder, n int64) (took int64, err error) {
	return b.admitAs(ctx, h, n, false)
}

// admitBuilt is admit for an answer already built, which its call holds
// while it waits: when the answers already built and waiting hold the
// limit's worth (or h's share's worth), it is refused at once rather than
// held too. So what callers that do not read can make the server hold is
// the budget admitted and as much again waiting, however many calls they
// make.
func (b *sendBudget) admitBuilt(ctx context.Context, h *holder, n int64) (took int64, err error) {
	return b.admitAs(ctx, h, n, true)
}

func (b *sendBudget) admitAs(ctx context.Context, h *holder, n int64, built bool) (took int64, err error) {
	n = min(max(n, 0), b.limit)
	if h != nil {
		n = min(n, b.share())
	}
	b.mu.Lock()
	if b.waiting.Len() == 0 && b.held+n <= b.limit && b.inShare(h, n) {
		b.take(h, n)
		b.mu.Unlock()
		return n, nil
	}
	if built && b.waitingBuilt+n > b.limit {
		b.mu.Unlock()
		return 0, b.refuse(nil, "as many more wait for room")
	}
	if built && h != nil && h.waitingBuilt+n > b.share() {
		b.mu.Unlock()
		return 0, b.refuse(h, "as many more wait for room")
	}
	a := &admission{n: n, built: built, h: h, granted: make(chan struct{})}
	if built {
		b.waitingBuilt += n
		if h != nil {
			h.waitingBuilt += n
		}
	}
	if b.inShare(h, n) {
		b.line(a)
	} else {
		a.own = true
		a.el = h.own.PushBack(a)
	}
	since := time.Now()
	b.mu.Unlock()
	b.waits.Add(1)

	stall := b.stall
	if stall <= 0 {
		stall = sendStall
	}
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		select {
		case <-a.granted:
			return n, nil
		case <-ctx.Done():
			if !b.leave(a) {
				b.give(h, n)
			}
			code := connect.CodeCanceled
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				code = connect.CodeDeadlineExceeded
			}
			return 0, connect.NewError(code, fmt.Errorf(
				"the call ended while its answer waited for room in the send budget: %w", ctx.Err()))
		case <-timer.C:
			// In its holder's own line it waits for the holder's answers,
			// so it is their sends that count.
			b.mu.Lock()
			last, own := b.sent, a.own
			if own {
				last = h.sent
			}
			if last.Before(since) {
				last = since
			}
			idle := time.Since(last)
			b.mu.Unlock()
			if idle < stall {
				timer.Reset(stall - idle)
				continue
			}
			if !b.leave(a) {
				return n, nil // granted just now
			}
			by := (*holder)(nil)
			if own {
				by = h
			}
			return 0, b.refuse(by, fmt.Sprintf("none of them has been sent for %v", stall))
		}
	}
}

// refuse counts and makes the refusal of an answer for want of room in
// the budget, or in h's share of it when h is not nil.
func (b *sendBudget) refuse(h *holder, why string) error {
	b.refused.Add(1)
	if h != nil {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"the answers of %s not yet sent hold its share of %d bytes (a %s of --max-pending-send-bytes), "+
				"and %s: its clients that do not read hold it; retry later with backoff, "+
				"ask for smaller pages, or ask the operator to raise the limit", h.what, b.share(), shareName, why))
	}
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"the server holds its limit of %d bytes of answers not yet sent (--max-pending-send-bytes), "+
			"and %s: clients that do not read hold it; retry later with backoff, "+
			"ask for smaller pages, or ask the operator to raise the limit", b.limit, why))
}

// shareName names holderShare's fraction in messages.
const shareName = "quarter"

// inShare reports whether n more bytes of h's fit its share, behind those
// of its that wait already; b.mu is held.
func (b *sendBudget) inShare(h *holder, n int64) bool {
	return h == nil || h.own.Len() == 0 && h.held+h.queued+n <= b.share()
}

// line puts a at the end of the line for the budget; b.mu is held.
func (b *sendBudget) line(a *admission) {
	a.own = false
	a.el = b.waiting.PushBack(a)
	if a.h != nil {
		a.h.queued += a.n
	}
}

// take counts n more bytes held, of h's; b.mu is held.
func (b *sendBudget) take(h *holder, n int64) {
	b.held += n
	if h != nil {
		h.held += n
	}
	if b.held > b.peak.Load() {
		b.peak.Store(b.held)
	}
}

// leave takes a out of its line and reports true, or false when it had
// been granted meanwhile (its bytes are then held, and the caller gives
// them back).
func (b *sendBudget) leave(a *admission) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.el == nil {
		return false
	}
	if a.own {
		a.h.own.Remove(a.el)
	} else {
		b.waiting.Remove(a.el)
		if a.h != nil {
			a.h.queued -= a.n
		}
	}
	a.el = nil
	b.unwait(a)
	if a.h != nil {
		b.promote(a.h)
	}
	b.grant() // a first in line that leaves lets those behind it in
	return true
}

// unwait counts a out of waitingBuilt; b.mu is held.
func (b *sendBudget) unwait(a *admission) {
	if a.built {
		b.waitingBuilt -= a.n
		if a.h != nil {
			a.h.waitingBuilt -= a.n
		}
	}
}

// promote moves the first of h's own line that fit its share now to the
// end of the budget's line; b.mu is held.
func (b *sendBudget) promote(h *holder) {
	for front := h.own.Front(); front != nil; front = h.own.Front() {
		a := front.Value.(*admission)
		if h.held+h.queued+a.n > b.share() {
			return
		}
		h.own.Remove(front)
		b.line(a)
	}
}

// grant admits the waiting calls that fit, in order; b.mu is held.
func (b *sendBudget) grant() {
	for front := b.waiting.Front(); front != nil; front = b.waiting.Front() {
		a := front.Value.(*admission)
		if b.held+a.n > b.limit {
			return
		}
		b.waiting.Remove(front)
		a.el = nil
		b.unwait(a)
		if a.h != nil {
			a.h.queued -= a.n
		}
		b.take(a.h, a.n)
		close(a.granted)
	}
}

// give returns n bytes of h's: their answer was sent (or will never be).
func (b *sendBudget) give(h *holder, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	b.sent = time.Now()
	if h != nil {
		h.held -= n
		h.sent = b.sent
		b.promote(h)
	}
	b.grant()
}

// sendAdmission is the interceptor that admits answers against the send
// budget (see the top of this file).
type sendAdmission struct{ shared *sharedResponses }

func (a sendAdmission) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		b := a.shared.sends
		if b == nil {
			return next(ctx, req)
		}
		var (
			held int64
			h    *holder
		)
		if est := buildEstimate(req.Any()); est > 0 {
			h = b.holderOf(ctx)
			took, err := b.admit(ctx, h, est)
			if err != nil {
				return nil, err
			}
			held = took
		}
		resp, err := next(ctx, req)
		if err != nil || resp == nil {
			b.give(h, held)
			return resp, err
		}
		need := a.shared.cost(resp.Any(), acceptsGzip(req.Header()))
		switch {
		case held > need: // a page smaller than the largest
			b.give(h, held-need)
			held = need
		case held > 0 && need > held: // one job larger than a page
			took, err := a.shared.admitBuilt(ctx, h, resp.Any(), need-held)
			if err != nil {
				b.give(h, held)
				return nil, err
			}
			held += took
		case held == 0 && need >= admittedAnswerBytes:
			h = b.holderOf(ctx)
			took, err := a.shared.admitBuilt(ctx, h, resp.Any(), need)
			if err != nil {
				return nil, err
			}
			held = took
		}
		if held > 0 {
			// connect encodes and writes the answer after this returns;
			// the call's context ends once it is written (or cut).
			context.AfterFunc(ctx, func() { b.give(h, held) })
		}
		return resp, nil
	}
}

func (sendAdmission) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a sendAdmission) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if a.shared.sends == nil {
			return next(ctx, conn)
		}
		return next(ctx, &admittedStream{StreamingHandlerConn: conn, ctx: ctx, shared: a.shared, gzip: acceptsGzip(conn.RequestHeader())})
	}
}

// admittedStream admits each large message of a stream before it is
// encoded, and gives its bytes back once it is written.
type admittedStream struct {
	connect.StreamingHandlerConn
	ctx    context.Context
	shared *sharedResponses
	gzip   bool // the caller accepts gzip

	h        *holder // looked up with the stream's first large message
	holderOf bool    // h was looked up
}

func (s *admittedStream) Send(msg any) error {
	need := s.shared.cost(msg, s.gzip)
	if need < admittedAnswerBytes {
		return s.StreamingHandlerConn.Send(msg)
	}
	if !s.holderOf {
		s.h, s.holderOf = s.shared.sends.holderOf(s.ctx), true
	}
	took, err := s.shared.admitBuilt(s.ctx, s.h, msg, need)
	if err != nil {
		return err
	}
	defer s.shared.sends.give(s.h, took)
	return s.StreamingHandlerConn.Send(msg)
}

// admitRead takes n bytes from the budget for what the stream is about
// to read and send, before it reads it: a stream that reads its messages
// from the store (WatchJobLogs) reads only once their bytes are
// admitted, so the streams that wait hold nothing. The stream sends what
// it read with sendHeld, and gives back with give.
func (s *admittedStream) admitRead(n int64) (took int64, err error) {
	if !s.holderOf {
		s.h, s.holderOf = s.shared.sends.holderOf(s.ctx), true
	}
	return s.shared.sends.admit(s.ctx, s.h, n)
}

// encodings is how many copies of a message sending it makes, as cost
// counts them beside the message: its encoding, and its gzip form when
// the caller accepts gzip.
func (s *admittedStream) encodings() int64 {
	if s.gzip {
		return 2
	}
	return 1
}

// sendHeld sends msg, whose bytes the stream took with admitRead: it is
// not admitted again.
func (s *admittedStream) sendHeld(msg any) error { return s.StreamingHandlerConn.Send(msg) }

// give returns n bytes the stream took with admitRead.
func (s *admittedStream) give(n int64) { s.shared.sends.give(s.h, n) }

// admitBuilt admits need bytes for msg, an answer of h's built: an answer
// many calls share (shared.go) is held once however many of them wait, so
// it waits as one not yet built does (admit); any other is held by its
// call while it waits (sendBudget.admitBuilt).
func (r *sharedResponses) admitBuilt(ctx context.Context, h *holder, msg any, need int64) (int64, error) {
	if r.lookup(msg) != nil {
		return r.sends.admit(ctx, h, need)
	}
	return r.sends.admitBuilt(ctx, h, need)
}

// buildEstimate is what a request may make the server build, taken from
// the budget before it is built: a page of full jobs for ListJobs with the
// full view (the jobs read from the store and their wire form). Other
// answers hold one job or a batch the engine bounds, and are admitted
// once built.
func buildEstimate(req any) int64 {
	if r, ok := req.(*jobwatchv1.ListJobsRequest); ok && r.GetView() == jobwatchv1.JobView_JOB_VIEW_FULL {
		return 2 * jobs.MaxPageBytes
	}
	return 0
}

// cost is what sending msg holds: its encoding, its gzip form when the
// caller accepts gzip (connect-go compresses into a buffer of its own),
// and the message itself unless many calls share it (then it is held
// once, whoever sends it).
func (r *sharedResponses) cost(msg any, gzip bool) int64 {
	var size, copies int64
	if e := r.lookup(msg); e != nil {
		if size = e.size.Load(); size == 0 {
			size = max(int64(proto.Size(msg.(proto.Message))), 1)
			e.size.Store(size)
		}
		copies = 1
	} else if m, ok := msg.(proto.Message); ok && m != nil {
		size, copies = int64(proto.Size(m)), 2
	}
	if gzip {
		copies++ // at most the size: gzip does not grow what it cannot shrink by much
	}
	return copies * size
}

// acceptsGzip reports whether the caller of a call with these request
// headers takes gzip answers (gRPC and gRPC-Web, Connect unary, Connect
// streaming).
func acceptsGzip(h http.Header) bool {
	for _, key := range []string{"Grpc-Accept-Encoding", "Accept-Encoding", "Connect-Accept-Encoding"} {
		for _, v := range h.Values(key) {
			if strings.Contains(v, "gzip") {
				return true
			}
		}
	}
	return false
}

// cutEpisode logs cut sends at warn: the first of an episode (cuts less
// than cutEpisodeGap apart), and a reminder with a count every
// cutReminder while it lasts.
type cutEpisode struct {
	last     time.Time // the last cut
	logged   time.Time // the last line
	unlogged int64     // cuts since the last line
}

// noteCut logs, when it starts an episode or is due, a send that was cut.
func (b *sendBudget) noteCut(reason, procedure, peer string) {
	b.mu.Lock()
	now := time.Now()
	c := &b.cuts
	c.unlogged++
	fresh := c.last.IsZero() || now.Sub(c.last) > cutEpisodeGap
	c.last = now
	if !fresh && now.Sub(c.logged) < cutReminder {
		b.mu.Unlock()
		return
	}
	n := c.unlogged
	c.unlogged, c.logged = 0, now
	b.mu.Unlock()
	log := b.log
	if log == nil {
		log = slog.Default()
	}
	why := "its write stayed blocked for --send-timeout"
	switch reason {
	case "stream_lifetime":
		why = "its write was still blocked at the end of the stream's --stream-lifetime"
	case "stalled":
		why = "its write stayed blocked while its connection, or the server, held as many blocked answers as it may"
	}
	log.Warn("answer cut: a client did not read it ("+why+"); counted as deadline_exceeded in jobwatch_requests_total",
		"reason", reason, "procedure", procedure, "peer", peer, "cut", n)
}

// exchangeOf finds the exchange under w, or nil.
func exchangeOf(w http.ResponseWriter) *exchange {
	for {
		switch x := w.(type) {
		case *exchange:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// sendCut is what a call counts as when its answer was cut: the Connect
// code, and whether it was.
func sendCut(ex *exchange) (string, bool) {
	if ex == nil || ex.cutReason == "" {
		return "", false
	}
	return connect.CodeDeadlineExceeded.String(), true
}

// streamOutcome is the code a stream counts as: deadline_exceeded when a
// write of it was cut, else code.
func streamOutcome(ctx context.Context, code string) string {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	if cut, ok := sendCut(ex); ok {
		return cut
	}
	return code
}

// countWhenSent leaves the counting of a unary call to countEarlyAnswers,
// which runs once the answer is written and calls sent: connect writes a
// unary answer after the interceptors return, and a cut answer is a
// failed call. It reports false when ctx holds no such call (a stream, or
// a call outside jobwatch's services).
func countWhenSent(ctx context.Context, code string, count func(code string)) bool {
	c, ok := ctx.Value(countedCallKey{}).(*countedCall)
	if !ok || !c.unary {
		return false
	}
	c.code, c.count = code, count
	return true
}

// sent counts the call whose count countWhenSent left, as a failure if
// its answer was cut.
func (c *countedCall) sent(w http.ResponseWriter) {
	if c.count == nil {
		return
	}
	code := c.code
	if cut, ok := sendCut(exchangeOf(w)); ok {
		code = cut
	}
	c.count(code)
}

// noteSendCut logs a request whose answer was cut, once it is over.
func (s *Server) noteSendCut(w http.ResponseWriter, r *http.Request) {
	ex := exchangeOf(w)
	if ex == nil || ex.cutReason == "" || s.shared.sends == nil {
		return
	}
	s.shared.sends.noteCut(ex.cutReason, r.URL.Path, r.RemoteAddr)
}

// wrote notes a write's outcome: one that failed at its deadline, or at
// the HTTP/2 connection's WriteByteTimeout, was blocked on a client that
// does not read, and its answer is cut.
func (ex *exchange) wrote(err error) {
	if err == nil || ex.cutReason != "" || ex.deadline.IsZero() {
		return
	}
	stalled := ex.stallCut.Load()
	if !stalled && time.Now().Before(ex.deadline) && !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	switch {
	case stalled:
		ex.cutReason = "stalled"
	case ex.deadline.Equal(ex.streamEnd) && !time.Now().Before(ex.deadline):
		ex.cutReason = "stream_lifetime"
	default:
		ex.cutReason = "send_timeout"
	}
	ex.limits.metrics.sendsCut.WithLabelValues(ex.cutReason).Inc()
}

func (ex *exchange) Write(p []byte) (int, error) {
	ex.arm()
	ex.pending += len(p)
	w := ex.sending()
	n, err := ex.ResponseWriter.Write(p)
	w.end()
	ex.wrote(err)
	return n, err
}
