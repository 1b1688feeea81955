package jobs

import (
	"context"

	"jobwatch/store"
)

// CountByState returns how many stored jobs are in each state (absent:
// none), for metrics and queue summaries.
func (e *Engine) CountByState(ctx context.Context) (map[store.State]int64, error) {
	counts, err := e.store.CountByState(ctx)
	if err != nil {
		return nil, wrap("count", "", err)
	}
	return counts, nil
}
