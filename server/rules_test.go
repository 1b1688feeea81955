package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// nestedJSON is a JSON array nested depth levels deep: [[[...]]].
func nestedJSON(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// nestedValue is nestedJSON as a google.protobuf.Value, built without
// a decoder (which would give up first).
func nestedValue(depth int) *structpb.Value {
	v := structpb.NewListValue(&structpb.ListValue{})
	for range depth - 1 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

func TestAPayloadNestedTooDeepIsRefusedOverEveryWireNamingTheFieldAndTheLimit(t *testing.T) {
	ts := startServer(t, serverOptions{})
	limit := "128"
	wantRefusal := func(t *testing.T, err error, field string) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("got %v, want invalid_argument", err)
		}
		var ce *connect.Error
		if errors.As(err, &ce); !strings.HasPrefix(ce.Message(), field+": ") || !strings.Contains(ce.Message(), limit) {
			t.Fatalf("message %q, want it to name %s and the limit %s", ce.Message(), field, limit)
		}
	}

	t.Run("JSON, as curl sends it", func(t *testing.T) {
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json",
			[]byte(`{"kind":"k","payload":`+nestedJSON(5000)+`}`))
		var got connectError
		if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusBadRequest ||
			got.Code != "invalid_argument" || !strings.HasPrefix(got.Message, "payload: ") || !strings.Contains(got.Message, limit) {
			t.Fatalf("= %d %s, want 400 invalid_argument naming payload and the limit %s", status, body, limit)
		}
	})
	for name, protocol := range map[string]client.Protocol{"Connect": client.ProtocolConnect, "gRPC": client.ProtocolGRPC} {
		t.Run("the Go client over "+name, func(t *testing.T) {
			c := client.New(ts.url, client.WithProtocol(protocol))
			defer c.Close()
			_, err := c.Submit(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "k", Payload: nestedValue(5000)})
			wantRefusal(t, err, "payload")

			// A worker's result is held to the same rule.
			submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "deep-result-" + name})
			lease := claim(t, ts.h2c(), "deep-result-"+name)
			_, err = c.WorkerService().CompleteJob(ctxTimeout(t, callBound), &jobwatchv1.CompleteJobRequest{
				JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(), Result: nestedValue(5000),
			})
			wantRefusal(t, err, "result")
		})
	}

	t.Run("a payload at the limit is kept and read back by the Go client", func(t *testing.T) {
		c := client.New(ts.url)
		defer c.Close()
		sent := nestedValue(jobtype.MaxJSONDepth)
		j, err := c.Submit(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "k", Payload: sent})
		if err != nil {
			t.Fatalf("submit at the limit: %v", err)
		}
		got, err := c.Get(ctxTimeout(t, callBound), j.GetId())
		if err != nil || !proto.Equal(got.GetPayload(), sent) {
			t.Fatalf("get = %v (payload equal: %v), want the payload as sent", err, proto.Equal(got.GetPayload(), sent))
		}
	})

	// The server still serves everyone.
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"kind":"k","payload":[[1]]}`))
	if status != http.StatusOK {
		t.Fatalf("a submit after the refusals = %d %s, want OK", status, body)
	}
}

// Every limit is the engine's: a caller of the engine in the same process
// is refused exactly as one over the wire, with the same code and words.
func TestTheEngineAndTheWireRefuseAlike(t *testing.T) {
	ts := startServer(t, serverOptions{engine: jobs.Config{MaxPayloadBytes: 1000}})
	c := ts.h2c()
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("x", n) }
	bigJSON := `"` + long(1000) + `"`
	tests := []struct {
		name   string
		engine func(lease *jobwatchv1.ClaimJobResponse) error
		wire   func(lease *jobwatchv1.ClaimJobResponse) error
		code   connect.Code
	}{
		{"a kind over 128 bytes", func(*jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: long(129)})
			return err
		}, func(*jobwatchv1.ClaimJobResponse) error {
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: long(129)})
			return err
		}, connect.CodeInvalidArgument},
		{"a unique key over 128 bytes", func(*jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: "k", UniqueKey: long(129)})
			return err
		}, func(*jobwatchv1.ClaimJobResponse) error {
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", UniqueKey: long(129)})
			return err
		}, connect.CodeInvalidArgument},
		{"a payload over the size limit", func(*jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: "k", Payload: json.RawMessage(bigJSON)})
			return err
		}, func(*jobwatchv1.ClaimJobResponse) error {
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", Payload: structpb.NewStringValue(long(1000))})
			return err
		}, connect.CodeResourceExhausted},
		{"a payload too deep", func(*jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: "k", Payload: json.RawMessage(nestedJSON(129))})
			return err
		}, func(*jobwatchv1.ClaimJobResponse) error {
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", Payload: nestedValue(129)})
			return err
		}, connect.CodeInvalidArgument},
		{"a step over 1024 bytes", func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Heartbeat(ctx, l.GetJob().GetId(), l.GetLeaseId(), 1, long(1025))
			return err
		}, func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: l.GetJob().GetId(), LeaseId: l.GetLeaseId(), Step: long(1025)})
			return err
		}, connect.CodeInvalidArgument},
		{"an error type over 256 bytes", func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Fail(ctx, l.GetJob().GetId(), l.GetLeaseId(), jobtype.JobError{Type: long(257)}, false)
			return err
		}, func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: l.GetJob().GetId(), LeaseId: l.GetLeaseId(),
				Error: &jobwatchv1.JobError{Type: long(257)}})
			return err
		}, connect.CodeInvalidArgument},
		{"an error message over 4096 bytes", func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Fail(ctx, l.GetJob().GetId(), l.GetLeaseId(), jobtype.JobError{Type: "E", Message: long(4097)}, false)
			return err
		}, func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: l.GetJob().GetId(), LeaseId: l.GetLeaseId(),
				Error: &jobwatchv1.JobError{Type: "E", Message: long(4097)}})
			return err
		}, connect.CodeInvalidArgument},
		{"a result over the size limit", func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Complete(ctx, l.GetJob().GetId(), l.GetLeaseId(), json.RawMessage(bigJSON))
			return err
		}, func(l *jobwatchv1.ClaimJobResponse) error {
			_, err := c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: l.GetJob().GetId(), LeaseId: l.GetLeaseId(),
				Result: structpb.NewStringValue(long(1000))})
			return err
		}, connect.CodeResourceExhausted},
		{"a claim naming 101 kinds", func(*jobwatchv1.ClaimJobResponse) error {
			_, err := ts.engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: strings.Split(strings.Repeat("k,", 100)+"k", ",")}, time.Now())
			return err
		}, func(*jobwatchv1.ClaimJobResponse) error {
			_, err := c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: strings.Split(strings.Repeat("k,", 100)+"k", ",")})
			return err
		}, connect.CodeInvalidArgument},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind := "parity-" + strconv.Itoa(i)
			submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind})
			lease := claim(t, c, kind)
			engineErr, wireErr := tt.engine(lease), tt.wire(lease)
			if engineErr == nil || connect.CodeOf(wireErr) != tt.code {
				t.Fatalf("engine: %v; wire: %v; want both refused, the wire with %v", engineErr, wireErr, tt.code)
			}
			var ce *connect.Error
			if errors.As(wireErr, &ce); ce.Message() != engineErr.Error() {
				t.Errorf("the wire says %q, the engine %q; want the same words", ce.Message(), engineErr.Error())
			}
		})
	}
}
