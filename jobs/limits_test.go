package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// nested returns a JSON array nested depth levels deep: [[[...]]].
func nested(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}

func TestTheEngineRefusesWhatNoReaderCouldTakeNamingTheFieldAndTheLimit(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{MaxPayloadBytes: 64 << 10})
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name  string
		call  func(j jobtype.Job) error
		field string
		limit string // in the reason
	}{
		{"a payload nested 5,000 levels deep", func(jobtype.Job) error {
			_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Payload: nested(5000)})
			return err
		}, "payload", "128"},
		{"a payload one level over the limit", func(jobtype.Job) error {
			_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Payload: nested(jobtype.MaxJSONDepth + 1)})
			return err
		}, "payload", "128"},
		{"a result nested 5,000 levels deep", func(j jobtype.Job) error {
			_, err := e.Complete(ctx, j.ID, j.LeaseID, nested(5000))
			return err
		}, "result", "128"},
		{"a unique key over 128 bytes", func(jobtype.Job) error {
			_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", UniqueKey: long(129)})
			return err
		}, "unique_key", "128 bytes"},
		{"a step over 1024 bytes", func(j jobtype.Job) error {
			_, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 1, long(1025))
			return err
		}, "step", "1024 bytes"},
		{"a step that is not UTF-8", func(j jobtype.Job) error {
			_, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 1, "a\xffb")
			return err
		}, "step", "UTF-8"},
		{"an error type over 256 bytes", func(j jobtype.Job) error {
			_, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: long(257)}, false)
			return err
		}, "error.type", "256 bytes"},
		{"an error message over 4096 bytes", func(j jobtype.Job) error {
			_, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "E", Message: long(4097)}, false)
			return err
		}, "error.message", "4096 bytes"},
		{"a worker id over 128 bytes", func(jobtype.Job) error {
			_, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: long(129)}, soon())
			return err
		}, "worker_id", "128 bytes"},
		{"a claim naming 101 kinds", func(jobtype.Job) error {
			_, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: strings.Split(strings.Repeat("k,", 100)+"k", ",")}, soon())
			return err
		}, "kinds", "100 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := running(t, e, jobs.SubmitRequest{})
			err := tt.call(j)
			var inv *jobtype.InvalidError
			if !errors.As(err, &inv) || inv.Field != tt.field || !strings.Contains(inv.Reason, tt.limit) {
				t.Fatalf("got %v, want an InvalidError for %q naming %q", err, tt.field, tt.limit)
			}
			if got := get(t, e, j.ID); got.State != jobtype.Running || got.Version != j.Version {
				t.Errorf("the refused call changed the job: %s version %d, was version %d", got.State, got.Version, j.Version)
			}
		})
	}
}

// JSON allows values that its protobuf form, google.protobuf.Value, the
// form every client reads, does not. The engine keeps exactly those every
// reader can decode: one it kept but the wire could not carry would make
// every GetJob, full ListJobs page and ClaimJob of the job fail, forever.
func TestTheEngineKeepsExactlyTheJSONTheWireCanCarry(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	tests := []struct {
		name, json string
		reason     string // "" : kept
	}{
		{"a number beyond a 64-bit float", `{"n":1e400}`, "64-bit float"},
		{"a negative number beyond a 64-bit float", `[-1e400]`, "64-bit float"},
		{"an escaped high surrogate alone", `"\ud800"`, "surrogate"},
		{"an escaped low surrogate alone", `{"k":"a\udc00b"}`, "surrogate"},
		{"a high surrogate followed by a letter escape", `"\ud83d\n"`, "surrogate"},
		{"bytes that are not UTF-8", "\"a\xffb\"", "UTF-8"},
		{"an object key given twice", `{"a":1,"a":2}`, `"a" more than once`},
		{"a nested object key given twice", `[1,{"x":{"b":[1],"b":{}}}]`, `"b" more than once`},
		{"a key given twice, once escaped", `{"a":1,"\u0061":2}`, `"a" more than once`},
		{"a surrogate pair", `"\ud83d\ude00"`, ""},
		{"a number that underflows to zero", `1e-400`, ""},
		{"a large integer", `123456789012345678901234567890`, ""},
		{"the same key in sibling objects", `[{"a":1},{"a":{"a":1}}]`, ""},
		{"a key that is also a value", `{"a":"a","b":["a","a"],"c":{"a":"a"}}`, ""},
		{"escapes of every kind", `"\"\\\/\b\f\n\r\t\u00e9"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, wireErr := wire.Value(json.RawMessage(tt.json))
			if (wireErr == nil) != (tt.reason == "") {
				t.Fatalf("the test is wrong: the wire decodes %s with error %v", tt.json, wireErr)
			}
			_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Payload: json.RawMessage(tt.json)})
			j := running(t, e, jobs.SubmitRequest{})
			_, resultErr := e.Complete(ctx, j.ID, j.LeaseID, json.RawMessage(tt.json))
			for field, err := range map[string]error{"payload": err, "result": resultErr} {
				if tt.reason == "" {
					if err != nil {
						t.Errorf("%s %s refused: %v", field, tt.json, err)
					}
					continue
				}
				var inv *jobtype.InvalidError
				if !errors.As(err, &inv) || inv.Field != field || !strings.Contains(inv.Reason, tt.reason) {
					t.Errorf("%s %s: got %v, want an InvalidError for %q saying %q", field, tt.json, err, field, tt.reason)
				}
			}
		})
	}
}

func TestAPayloadOrResultOverTheSizeLimitIsTooLarge(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{MaxPayloadBytes: 1000})
	big := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	_, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "k", Payload: big})
	var tooLarge *jobtype.TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Field != "payload" || tooLarge.Limit != 1000 || tooLarge.Bytes != len(big) {
		t.Fatalf("submit: got %v, want a TooLargeError for payload, %d bytes over 1000", err, len(big))
	}
	j := running(t, e, jobs.SubmitRequest{})
	_, err = e.Complete(context.Background(), j.ID, j.LeaseID, big)
	if !errors.As(err, &tooLarge) || tooLarge.Field != "result" {
		t.Fatalf("complete: got %v, want a TooLargeError for result", err)
	}
}

func TestAPayloadAtTheDepthLimitIsKept(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	// Brackets inside strings are text, not nesting.
	atLimit := []byte(strings.Repeat("[", jobtype.MaxJSONDepth-1) + `{"s":"` + strings.Repeat("[", 500) + `"}` + strings.Repeat("]", jobtype.MaxJSONDepth-1))
	for _, payload := range [][]byte{nested(jobtype.MaxJSONDepth), atLimit} {
		j := submit(t, e, jobs.SubmitRequest{Payload: payload})
		if got := get(t, e, j.ID); string(got.Payload) != string(payload) {
			t.Fatalf("payload stored as %.40s…, want it as sent", got.Payload)
		}
		c, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{j.Kind}}, soon())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Complete(context.Background(), c.ID, c.LeaseID, payload); err != nil {
			t.Fatalf("a result at the depth limit: %v", err)
		}
	}
}

func TestAFailureWithoutAnErrorTypeFailsTheJobWithTheDefaultType(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	failed, err := e.Fail(context.Background(), j.ID, j.LeaseID, jobtype.JobError{Message: "disk full"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if failed.State != jobtype.Failed || failed.Error == nil || *failed.Error != (jobtype.JobError{Type: jobtype.DefaultErrorType, Message: "disk full"}) {
		t.Fatalf("job %s with error %+v, want FAILED with type %q", failed.State, failed.Error, jobtype.DefaultErrorType)
	}
}

// The limits of a list or a tenant watch are the engine's too, so an
// in-process caller meets the same refusals as one over the wire.
func TestTheEngineRefusesAnOverlongListOrWatchRequestNamingTheField(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	long := strings.Repeat("t", jobtype.MaxTokenBytes+1)
	tests := []struct {
		name  string
		call  func() error
		field string
		limit string
	}{
		{"a list filtering on 101 states", func() error {
			states := make([]jobtype.State, jobtype.MaxFilterItems+1)
			for i := range states {
				states[i] = jobtype.Queued
			}
			_, _, err := e.List(ctx, jobs.ListRequest{States: states})
			return err
		}, "states", "100 entries"},
		{"a list with a page token over 1024 bytes", func() error {
			_, _, err := e.List(ctx, jobs.ListRequest{PageToken: long})
			return err
		}, "page_token", "1024 bytes"},
		{"a tenant watch with a resume token over 1024 bytes", func() error {
			return e.WatchTenant(ctx, "", jobs.TenantWatchOptions{ResumeToken: long, Deadline: soon(),
				Send: func([]jobtype.Job, []string, string) error { return nil }})
		}, "resume_token", "1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inv *jobtype.InvalidError
			if err := tt.call(); !errors.As(err, &inv) || inv.Field != tt.field || !strings.Contains(inv.Reason, tt.limit) {
				t.Fatalf("got %v, want an InvalidError for %q naming %q", err, tt.field, tt.limit)
			}
		})
	}
}
