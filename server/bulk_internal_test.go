package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

// A bulk page cut by its caller's deadline says so in a page's words, not
// a single change's ("whole or not at all"), and how many jobs it
// changed, none included.
func TestABulkPageCutByItsDeadlineSaysWhatItDid(t *testing.T) {
	cancel := jobs.BulkAction{Name: "cancel", Done: "cancelled"}
	cut := connect.NewError(connect.CodeDeadlineExceeded, errCallersDeadline)
	for _, tc := range []struct {
		r    jobs.BulkResult
		want string
	}{
		{jobs.BulkResult{Matched: 869, Changed: 8}, "before it, this page cancelled 8 of the 869 jobs it matched; those changes stand, and the same call goes on from there"},
		{jobs.BulkResult{}, "before this page changed any job: run the same call again"},
		{jobs.BulkResult{Matched: 1000}, "before this page changed any job: run the same call again"},
	} {
		err := bulkStopped(cancel, tc.r, context.DeadlineExceeded, cut)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded {
			t.Fatalf("bulkStopped(%+v) = %v, want deadline_exceeded", tc.r, err)
		}
		if msg := ce.Message(); !strings.HasPrefix(msg, "the call's deadline passed before its page was done") ||
			!strings.Contains(msg, tc.want) || strings.Contains(msg, "whole or not at all") || strings.Contains(msg, "context deadline exceeded") {
			t.Errorf("bulkStopped(%+v) says %q; want a page's words and %q", tc.r, msg, tc.want)
		}
		var stopped *jobwatchv1.BulkStopped
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if b, ok := v.(*jobwatchv1.BulkStopped); ok {
					stopped = b
				}
			}
		}
		if stopped == nil || stopped.GetMatched() != int64(tc.r.Matched) || stopped.GetChanged() != int64(tc.r.Changed) {
			t.Errorf("bulkStopped(%+v) detail = %v, want its counts", tc.r, stopped)
		}
	}
	// Another refusal of a page never read has nothing to add.
	other := connect.NewError(connect.CodeInvalidArgument, errors.New("filter.states[0]: nope"))
	if err := bulkStopped(cancel, jobs.BulkResult{}, other, other); err != other {
		t.Errorf("bulkStopped of a refusal before any read = %v, want it as it is", err)
	}
}
