package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// queueService adapts QueueService to the engine.
type queueService struct{ s *Server }

var _ jobwatchv1connect.QueueServiceHandler = (*queueService)(nil)

// ListQueues reports one row per queue that has QUEUED or RUNNING jobs,
// per queue the rules declare, and "default" always, sorted by name.
//
// The counts (and the tenants' below) come from reads over every
// unfinished job's index entry, which callers share (Server.queueStats,
// Server.tenantDepths): a read that took more than 20 ms answers the
// calls of the next ten times as long (at most 5 s), so that pages
// polling a server with a million queued jobs cost it one read per that
// gap, not one each; the counts are then that much older.
//
// oldest_queued_age is how long the oldest ready job has waited (unset
// when none waits: a job scheduled for later is not waiting), at most 100
// years (queuedAge).
//
// last_drained_at, alerting and alerting_since are kept for queues with
// an alert_after only (see package jobs, alerts.go): last_drained_at is
// now for an idle queue, the last drain the sweep saw for a busy one, and
// unset when none was ever seen; alerting_since is when the alert began
// (the last drain, or when this server began watching a queue never seen
// drained, plus alert_after), set only while alerting. All are unset for
// queues without alert_after, and so is alert_after.
//
// mode, max_running, max_running_per_tenant, pools and
// default_priority are the queue's claim rules from the configuration
// file: a queue it does not declare is PARALLEL with max_running and
// max_running_per_tenant 0 (no limit), no pools and default priority 0.
//
// depth_history is the queue's depth over the last 15 minutes as this
// server sampled it (one sample per depth_interval, kept in memory: see
// package jobs, depth.go), and last its depth in this answer.
//
// paused, paused_at and paused_by are set for a paused queue
// (PauseQueue), which has a row even with no job and no rule.
//
// rate is the queue's rate limit and its window now (rates.go), for a
// queue the rules give one.
//
// tenants and tenants_left_out are each queue's busiest tenants
// (jobs.Busiest, req's tenants_per_queue of them), for an
// admin token or a server without tokens; QueueService refuses every
// other token (see may), and should that change, other callers get
// none: they name every tenant of a shared queue.
func (h *queueService) ListQueues(ctx context.Context, req *jobwatchv1.ListQueuesRequest) (*jobwatchv1.ListQueuesResponse, error) {
	if n := req.GetTenantsPerQueue(); n < 0 {
		return nil, invalid("tenants_per_queue", fmt.Sprintf("must not be negative (0 means the default, 10; more than 100 means 100), got %d", n))
	}
	if n := req.GetMaxQueues(); n < 0 {
		return nil, invalid("max_queues", fmt.Sprintf("must not be negative (0 means the default, %d; more than %d means %d), got %d",
			defaultMaxQueues, maxMaxQueues, maxMaxQueues, n))
	}
	stats, _, _, err := h.s.queueStats.get(ctx)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list queues", err)
	}
	queues := make([]*jobwatchv1.Queue, 0, len(stats))
	for _, q := range stats {
		row := &jobwatchv1.Queue{
			Name:       q.Name,
			Mode:       jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL,
			MaxRunning: int32(q.MaxRunning),
			Queued:     q.Queued,
			Running:    q.Running,

			MaxRunningPerTenant: int32(q.MaxRunningPerTenant),
		}
		if q.Serial {
			row.Mode = jobwatchv1.QueueMode_QUEUE_MODE_SERIAL
		}
		for _, p := range q.Pools {
			row.Pools = append(row.Pools, &jobwatchv1.PoolUse{Name: p.Name, Units: int32(p.Units), InUse: p.InUse})
		}
		if q.Waiting() {
			row.OldestQueuedAge = durationpb.New(queuedAge(q.OldestQueuedAge))
		}
		if q.AlertAfter > 0 {
			row.AlertAfter = durationpb.New(q.AlertAfter)
		}
		if !q.LastDrainedAt.IsZero() {
			row.LastDrainedAt = timestamppb.New(q.LastDrainedAt)
		}
		row.Alerting = q.Alerting
		if q.Alerting {
			row.AlertingSince = timestamppb.New(q.AlertingSince)
		}
		row.DepthHistory = make([]*jobwatchv1.QueueDepth, 0, len(q.DepthHistory))
		for _, d := range q.DepthHistory {
			row.DepthHistory = append(row.DepthHistory, &jobwatchv1.QueueDepth{At: timestamppb.New(d.At), Queued: d.Queued, Running: d.Running})
		}
		queues = append(queues, row)
	}
	queues, err = h.s.withPauses(ctx, queues) // pauses.go
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list queues", err)
	}
	// default_priority is the queue's priority rule (0 without one), from
	// one read of the rules, for every row, a paused queue's too.
	rules := h.s.engine.Rules()
	for _, row := range queues {
		row.DefaultPriority = rules.Queues[row.Name].Priority
	}
	if err := h.withRates(ctx, queues); err != nil { // rates.go
		return nil, h.s.toConnectError(ctx, "list queues", err)
	}
	queues, leftOut := mostPressing(queues, int(req.GetMaxQueues()), rules)
	if p, ok := callerOf(ctx); !ok || p.Role == auth.RoleAdmin {
		if err := h.withTenants(ctx, queues, int(req.GetTenantsPerQueue())); err != nil {
			return nil, h.s.toConnectError(ctx, "list queues", err)
		}
	}
	return &jobwatchv1.ListQueuesResponse{
		Queues:        queues,
		DepthInterval: durationpb.New(h.s.engine.Config().DepthInterval),
		QueuesLeftOut: int32(leftOut),
	}, nil
}

// The bound of ListQueues' answer (ListQueuesRequest.max_queues). Queue
// names are the clients': one tenant that names 50,000 queues made an
// admin's ListQueues 17 MB, and the page, which asks for it every few
// seconds, drew 200,000 rows and stopped answering.
const (
	defaultMaxQueues = 500
	maxMaxQueues     = 10_000
)

// mostPressing keeps at most bound rows of queues (0: defaultMaxQueues,
// capped at maxMaxQueues), in their order (by name): first those an
// operator must see (paused, alerting or held back by their rate), then
// those with rules in the configuration (and default), then the others,
// the busiest first within each, and the first by name among equals. It
// returns them and how many it left out.
func mostPressing(queues []*jobwatchv1.Queue, bound int, rules jobtype.Rules) ([]*jobwatchv1.Queue, int) {
	if bound <= 0 {
		bound = defaultMaxQueues
	}
	bound = min(bound, maxMaxQueues)
	if len(queues) <= bound {
		return queues, 0
	}
	// rank: 0 for a queue in trouble or stopped, 1 for one the operator
	// declared (and default), 2 for any other.
	rank := func(q *jobwatchv1.Queue) int {
		if q.GetPausedAt() != nil || q.GetAlerting() || q.GetRate().GetHeldUntil() != nil {
			return 0
		}
		if _, declared := rules.Queues[q.GetName()]; declared || q.GetName() == jobtype.DefaultQueue {
			return 1
		}
		return 2
	}
	ranked := slices.Clone(queues)
	slices.SortStableFunc(ranked, func(a, b *jobwatchv1.Queue) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(b.GetQueued()+b.GetRunning(), a.GetQueued()+a.GetRunning()))
	})
	keep := make(map[*jobwatchv1.Queue]bool, bound)
	for _, q := range ranked[:bound] {
		keep[q] = true
	}
	kept := slices.DeleteFunc(queues, func(q *jobwatchv1.Queue) bool { return !keep[q] })
	return kept, len(ranked) - bound
}

// withTenants sets tenants and tenants_left_out on ListQueues' rows,
// perQueue tenants at most (0: the engine's default), from a read of
// their own after the queues': a queue whose first job arrived in
// between has no row in this answer, so its tenants wait for the next.
func (h *queueService) withTenants(ctx context.Context, queues []*jobwatchv1.Queue, perQueue int) error {
	depths, _, _, err := h.s.tenantDepths.get(ctx)
	if err != nil {
		return err
	}
	busiest := jobs.Busiest(depths, perQueue)
	for _, row := range queues {
		q := busiest[row.Name]
		row.TenantsLeftOut = int32(q.LeftOut)
		row.Tenants = make([]*jobwatchv1.TenantDepth, 0, len(q.Busiest))
		for _, d := range q.Busiest {
			td := &jobwatchv1.TenantDepth{Tenant: d.Tenant, Queued: d.Queued, Running: d.Running}
			if d.Waiting() {
				td.OldestQueuedAge = durationpb.New(queuedAge(d.OldestQueuedAge))
			}
			row.Tenants = append(row.Tenants, td)
		}
	}
	return nil
}

// queuedAge is a queue's oldest queued age as ListQueues answers it:
// never below zero (a job that became ready a moment ago on another
// replica's reading of the clock) and never above jobtype.MaxTimeOffset.
// Callers cannot give a run_at further back than that, but a job stored
// before that rule may have one (1700-01-01), and the age the engine
// computes from it saturates at the largest time.Duration
// (9223372036.854775807s), a figure that means nothing; it reads 100
// years instead.
func queuedAge(age time.Duration) time.Duration {
	return min(max(age, 0), jobtype.MaxTimeOffset)
}

// ListSchedules reports the schedules of the configuration in effect, in
// the file's order, each with its next run: next_run_at is unset while a
// run is unfinished (its end decides the next), now for an every
// schedule that has never run (the next sweep queues it), a cron
// schedule's first time for one never run, and may be in the past when
// the sweep has yet to queue a run that is due. A cron schedule has
// next_run_local too: the same instant in its time zone. The latest run's state and end outlive its job's retention.
func (h *queueService) ListSchedules(ctx context.Context, _ *jobwatchv1.ListSchedulesRequest) (*jobwatchv1.ListSchedulesResponse, error) {
	schedules, err := h.s.engine.Schedules(ctx)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list schedules", err)
	}
	rows := make([]*jobwatchv1.Schedule, 0, len(schedules))
	for _, s := range schedules {
		row := &jobwatchv1.Schedule{
			Name:         s.Name,
			Kind:         s.Kind,
			Queue:        s.Queue,
			Tenant:       s.Tenant,
			LastJobId:    s.LastJobID,
			LastJobState: wire.State(s.LastJobState),
		}
		if s.Cron == "" {
			row.Every = durationpb.New(s.Every)
		}
		if !s.NextRunAt.IsZero() {
			row.NextRunAt = timestamppb.New(s.NextRunAt)
		}
		if s.Cron != "" && s.Location != nil {
			row.Cron, row.Timezone = s.Cron, s.Location.String()
			if !s.NextRunAt.IsZero() {
				row.NextRunLocal = s.NextRunAt.In(s.Location).Format(time.RFC3339)
			}
		}
		if !s.LastEndedAt.IsZero() {
			row.LastEndedAt = timestamppb.New(s.LastEndedAt)
		}
		rows = append(rows, row)
	}
	return &jobwatchv1.ListSchedulesResponse{Schedules: rows}, nil
}
