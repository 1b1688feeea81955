package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

// ratesCollector reports, for each queue the rules give a rate
// (rate: {limit, per}), the claims in its window now and whether it is
// held back by it: at its limit, handing out no claims until the window
// has room.
type ratesCollector struct {
	rates *lastRead[map[string]jobs.QueueRate]
}

var (
	queueRateStartedDesc = prometheus.NewDesc("jobwatch_queue_rate_started",
		"Claims of the queue's jobs in its rate window (the configuration's rate.per) that ends now; for the queues the configuration gives a rate.",
		[]string{"queue"}, nil)
	queueRateLimitDesc = prometheus.NewDesc("jobwatch_queue_rate_limit",
		"The queue's rate.limit: at most this many claims in any window of rate.per; for the queues the configuration gives a rate.",
		[]string{"queue"}, nil)
	queueRateHeldDesc = prometheus.NewDesc("jobwatch_queue_rate_held",
		"1 while the queue's rate window is at its limit (it holds rate.limit claims, of some tenant's jobs for a per_tenant rate: no more are handed out until one leaves the window), whether or not jobs wait, else 0; for the queues the configuration gives a rate.",
		[]string{"queue"}, nil)
)

func (c *ratesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueRateStartedDesc
	ch <- queueRateLimitDesc
	ch <- queueRateHeldDesc
}

func (c *ratesCollector) Collect(ch chan<- prometheus.Metric) {
	rates, err := c.rates.get()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queueRateHeldDesc, err)
		return
	}
	for name, r := range rates {
		held := 0.0
		if !r.HeldUntil.IsZero() {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(queueRateStartedDesc, prometheus.GaugeValue, float64(r.Started), name)
		ch <- prometheus.MustNewConstMetric(queueRateLimitDesc, prometheus.GaugeValue, float64(r.Rate.Limit), name)
		ch <- prometheus.MustNewConstMetric(queueRateHeldDesc, prometheus.GaugeValue, held, name)
	}
}

// withRates sets rate on ListQueues' rows of the queues the rules give a
// rate, from one read of their windows. held_until is set only while a
// ready job waits (the row's oldest_queued_age): a window at its limit
// holds nothing back from an empty queue, and an operator reading "held"
// there would look for work that is not there. /metrics'
// jobwatch_queue_rate_held says only that the window is at its limit.
func (h *queueService) withRates(ctx context.Context, queues []*jobwatchv1.Queue) error {
	rates, err := h.s.engine.QueueRates(ctx)
	if err != nil || len(rates) == 0 {
		return err
	}
	for _, row := range queues {
		r, ok := rates[row.Name]
		if !ok {
			continue
		}
		row.Rate = &jobwatchv1.QueueRate{Limit: int32(r.Rate.Limit), Per: durationpb.New(r.Rate.Per), Started: int32(r.Started), PerTenant: r.Rate.PerTenant}
		if !r.HeldUntil.IsZero() && row.GetOldestQueuedAge() != nil {
			row.Rate.HeldUntil = timestamppb.New(r.HeldUntil)
		}
	}
	return nil
}
