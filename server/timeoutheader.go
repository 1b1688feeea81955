package server

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"connectrpc.com/connect"
)

// Malformed deadline headers are answered here, in the caller's
// protocol, with what a well-formed one looks like: connect-go's own
// answer to Connect-Timeout-Ms: abc is `parse timeout:
// strconv.ParseInt: parsing "abc": invalid syntax`, which names Go's
// function rather than the header. Well-formed values, however large,
// go on to connect-go, which keeps to the protocols' rules for them.
var (
	// connectTimeout is the Connect protocol's Connect-Timeout-Ms: 1 to
	// 10 ASCII digits (0: no time left, answered deadline_exceeded).
	connectTimeout = regexp.MustCompile(`^[0-9]{1,10}$`)
	// grpcTimeout is gRPC's grpc-timeout: 1 to 8 digits and a unit.
	grpcTimeout = regexp.MustCompile(`^[0-9]{1,8}[HMSmun]$`)
)

// checkTimeoutHeaders wraps next with the check of the two deadline
// headers; refusals writes the refusal (connect.ErrorWriter).
func checkTimeoutHeaders(refusals *connect.ErrorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err *connect.Error
		v, ok := r.Header["Connect-Timeout-Ms"]
		switch {
		case ok && (len(v) != 1 || !connectTimeout.MatchString(v[0])):
			err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"the Connect-Timeout-Ms header must be the call's deadline as a whole number of milliseconds (1 to 10 digits, such as 30000), got %q; leave it out for no deadline", strings.Join(v, ", ")))
		case ok && strings.Trim(v[0], "0") == "":
			// A caller (or a proxy passing on what is left) with no
			// time left: the call's own answer, in words.
			err = connect.NewError(connect.CodeDeadlineExceeded, errors.New(
				"the call's deadline had passed when the server read it (Connect-Timeout-Ms: 0)"))
		}
		if g, ok := r.Header["Grpc-Timeout"]; err == nil && ok {
			switch {
			case len(g) != 1 || !grpcTimeout.MatchString(g[0]):
				err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
					"the grpc-timeout header must be 1 to 8 digits and a unit (H, M, S, m, u or n), such as 30S, got %q", strings.Join(g, ", ")))
			case strings.Trim(g[0][:len(g[0])-1], "0") == "":
				err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
					"the call's deadline had passed when the server read it (grpc-timeout: %s)", g[0]))
			case underAMillisecond(g[0]):
				// It passes before any call could be answered, and
				// connect-go would say so in Go's words.
				err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
					"the call's deadline (grpc-timeout: %s) is under a millisecond: it passed before the server could answer", g[0]))
			}
		}
		if err == nil || !refusals.IsSupported(r) {
			next.ServeHTTP(w, r)
			return
		}
		noteRefusal(r, err.Code(), err.Message())
		_ = refusals.Write(w, r, err)
	})
}

// underAMillisecond reports whether a well-formed grpc-timeout is less
// than a millisecond: fewer than 1,000 microseconds or 1,000,000
// nanoseconds.
func underAMillisecond(timeout string) bool {
	digits, unit := strings.TrimLeft(timeout[:len(timeout)-1], "0"), timeout[len(timeout)-1]
	switch unit {
	case 'u':
		return len(digits) <= 3
	case 'n':
		return len(digits) <= 6
	}
	return false
}
