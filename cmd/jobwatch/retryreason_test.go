package main

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// A connection cut in the middle of an answer, which the client retries,
// is not reported as a bug of the server's ("internal").
func TestRetryReasonSaysACutIsACut(t *testing.T) {
	cut := connect.NewError(connect.CodeInternal, errors.New("protocol error: incomplete envelope: unexpected EOF"))
	if got := retryReason(cut); strings.HasPrefix(got, "internal") || !strings.Contains(got, "connection to the server was cut") {
		t.Errorf("a cut reads %q", got)
	}
	refused := connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	if got := retryReason(refused); got != refused.Error() {
		t.Errorf("unavailable reads %q, want it as it is", got)
	}
}
