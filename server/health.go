package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
)

// The procedures of gRPC health.
const (
	healthCheckProcedure = "/" + grpchealth.HealthV1ServiceName + "/Check"
	healthWatchProcedure = "/" + grpchealth.HealthV1ServiceName + "/Watch"
	healthListProcedure  = "/" + grpchealth.HealthV1ServiceName + "/List"
)

// newHealthHandler serves gRPC health (grpc.health.v1.Health: Check,
// Watch and List) for the services named, their statuses kept by
// checker. It is grpchealth.NewHandler with two differences a caller
// sees. Its messages are the health protocol's own
// (google.golang.org/grpc/health/grpc_health_v1), so in JSON a status
// reads "SERVING", as the protocol and reflection name it, where
// grpchealth's internal copy of the messages writes
// "SERVING_STATUS_SERVING". And it does all the protocol says: List, and
// a Watch of a service it does not know answers SERVICE_UNKNOWN and stays
// open, rather than ending with not_found.
func newHealthHandler(checker *grpchealth.StaticChecker, services []string, opts ...connect.HandlerOption) (string, http.Handler) {
	h := &healthHandler{checker: checker, services: services}
	mux := http.NewServeMux()
	mux.Handle(healthCheckProcedure, connect.NewUnaryHandler(healthCheckProcedure, h.check, opts...))
	mux.Handle(healthWatchProcedure, connect.NewServerStreamHandler(healthWatchProcedure, h.watch, opts...))
	mux.Handle(healthListProcedure, connect.NewUnaryHandler(healthListProcedure, h.list, opts...))
	return "/" + grpchealth.HealthV1ServiceName + "/", mux
}

// healthzPath answers a GET with the whole server's health for probes
// that read only an HTTP status (healthz).
const healthzPath = "/healthz"

// healthz answers GET /healthz for the probes that read only an HTTP
// status (a Kubernetes httpGet probe, a cloud load balancer's target
// check), which take gRPC health's answer, HTTP 200 with NOT_SERVING in
// its body, for healthy: 200 and SERVING while the server serves, 503
// and NOT_SERVING while its store refuses writes or it is shutting down,
// as Check of the whole server says; like Check, without a token.
func (h *healthHandler) healthz(w http.ResponseWriter, r *http.Request) {
	status, err := h.status(r.Context(), "")
	code := http.StatusOK
	if err != nil || status != healthv1.HealthCheckResponse_SERVING {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, status)
}

type healthHandler struct {
	checker  *grpchealth.StaticChecker
	services []string // besides "", the whole server
}

func (h *healthHandler) status(ctx context.Context, service string) (healthv1.HealthCheckResponse_ServingStatus, error) {
	resp, err := h.checker.Check(ctx, &grpchealth.CheckRequest{Service: service})
	if err != nil {
		return healthv1.HealthCheckResponse_UNKNOWN, err
	}
	// grpchealth's statuses have the protocol's numbers.
	return healthv1.HealthCheckResponse_ServingStatus(resp.Status), nil
}

// check answers Check. A service it does not know is not_found naming
// the ones it does, with at most the first 100 bytes of the name asked
// for: grpchealth's message repeats the whole name, which a caller
// without a token could make larger than a gRPC answer's trailers may be.
func (h *healthHandler) check(ctx context.Context, req *connect.Request[healthv1.HealthCheckRequest]) (*connect.Response[healthv1.HealthCheckResponse], error) {
	if name := req.Msg.GetService(); name != "" && !slices.Contains(h.services, name) {
		if len(name) > 100 {
			name = strings.ToValidUTF8(name[:100], "") + "…"
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf(`unknown service %q: Check knows "" (the whole server) and %s`,
			name, strings.Join(h.services, ", ")))
	}
	status, err := h.status(ctx, req.Msg.GetService())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&healthv1.HealthCheckResponse{Status: status}), nil
}

func (h *healthHandler) list(ctx context.Context, _ *connect.Request[healthv1.HealthListRequest]) (*connect.Response[healthv1.HealthListResponse], error) {
	resp := &healthv1.HealthListResponse{Statuses: map[string]*healthv1.HealthCheckResponse{}}
	for _, service := range append([]string{""}, h.services...) {
		status, err := h.status(ctx, service)
		if err != nil {
			return nil, err
		}
		resp.Statuses[service] = &healthv1.HealthCheckResponse{Status: status}
	}
	return connect.NewResponse(resp), nil
}

// watch sends the service's status at once and again each time it
// changes, until the call ends (the stream's lifetime, the caller, or
// shutdown: streamGuard).
func (h *healthHandler) watch(ctx context.Context, req *connect.Request[healthv1.HealthCheckRequest], stream *connect.ServerStream[healthv1.HealthCheckResponse]) error {
	service := req.Msg.GetService()
	changed := make(chan struct{}, 1)
	stop, err := h.checker.Watch(ctx, &grpchealth.CheckRequest{Service: service}, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if connect.CodeOf(err) == connect.CodeNotFound {
		// The services are fixed, so this one will never be known.
		if err := stream.Send(&healthv1.HealthCheckResponse{Status: healthv1.HealthCheckResponse_SERVICE_UNKNOWN}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	defer stop()
	last := healthv1.HealthCheckResponse_ServingStatus(-1)
	for {
		status, err := h.status(ctx, service)
		if err != nil {
			return err
		}
		if status != last {
			if err := stream.Send(&healthv1.HealthCheckResponse{Status: status}); err != nil {
				return err
			}
			last = status
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}
