package server

import (
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
	// 10 ASCII digits, a positive number (0 is refused apart).
	connectTimeout = regexp.MustCompile(`^[0-9]{1,10}$`)
	// grpcTimeout is gRPC's grpc-timeout: 1 to 8 digits and a unit.
	grpcTimeout = regexp.MustCompile(`^[0-9]{1,8}[HMSmun]$`)
)

// checkTimeoutHeaders wraps next with the check of the two deadline
// headers; errors writes the refusal (connect.ErrorWriter).
func checkTimeoutHeaders(errors *connect.ErrorWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err *connect.Error
		if v, ok := r.Header["Connect-Timeout-Ms"]; ok && (len(v) != 1 || !connectTimeout.MatchString(v[0]) || strings.Trim(v[0], "0") == "") {
			err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"the Connect-Timeout-Ms header must be the call's deadline as a whole number of milliseconds, 1 or more (1 to 10 digits, such as 30000), got %q; leave it out for no deadline", strings.Join(v, ", ")))
		} else if v, ok := r.Header["Grpc-Timeout"]; ok && (len(v) != 1 || !grpcTimeout.MatchString(v[0])) {
			err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"the grpc-timeout header must be 1 to 8 digits and a unit (H, M, S, m, u or n), such as 30S, got %q", strings.Join(v, ", ")))
		}
		if err == nil || !errors.IsSupported(r) {
			next.ServeHTTP(w, r)
			return
		}
		_ = errors.Write(w, r, err)
	})
}
