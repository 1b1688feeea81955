package main

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// A connection cut in the middle of an answer, which the client retries,
// is not reported as a bug of the server's ("internal"), nor a reset as
// a cancel the caller never asked for ("canceled").
func TestRetryReasonSaysACutIsACut(t *testing.T) {
	for _, cut := range []error{
		connect.NewError(connect.CodeInternal, errors.New("protocol error: incomplete envelope: unexpected EOF")),
		connect.NewError(connect.CodeCanceled, errors.New(`Post "http://127.0.0.1:8080/jobwatch.v1.JobService/GetJobLogs": read tcp: read: connection reset by peer`)),
	} {
		if got := retryReason(cut); strings.HasPrefix(got, "internal") || strings.HasPrefix(got, "canceled") || !strings.Contains(got, "connection to the server was cut") {
			t.Errorf("a cut reads %q", got)
		}
	}
	refused := connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	if got := retryReason(refused); got != refused.Error() {
		t.Errorf("unavailable reads %q, want it as it is", got)
	}
}
