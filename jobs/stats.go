package jobs

import (
	"context"

	"jobwatch/store"
)

// CountByState returns how many stored jobs are in each state, for metrics
// and queue summaries.
func (e *Engine) CountByState(ctx context.Context) (map[store.State]int64, error) {
	return e.store.CountByState(ctx)
}
