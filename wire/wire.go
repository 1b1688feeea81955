// Package wire converts jobs between their stored form (jobtype.Job, JSON
// bytes) and their wire form (jobwatch.v1.Job, google.protobuf.Value), for
// the server's handlers and for the client's in-process worker backend,
// which must hand handlers the same message a remote worker would get. It
// holds no logic beyond the mapping, but for the words of a message that
// does not decode (DecodeMistake), which the server and the command line
// share.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

var stateToProto = map[jobtype.State]jobwatchv1.JobState{
	jobtype.Pending:   jobwatchv1.JobState_JOB_STATE_PENDING,
	jobtype.Queued:    jobwatchv1.JobState_JOB_STATE_QUEUED,
	jobtype.Running:   jobwatchv1.JobState_JOB_STATE_RUNNING,
	jobtype.Succeeded: jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
	jobtype.Failed:    jobwatchv1.JobState_JOB_STATE_FAILED,
	jobtype.Cancelled: jobwatchv1.JobState_JOB_STATE_CANCELLED,
	jobtype.Lost:      jobwatchv1.JobState_JOB_STATE_LOST,
	jobtype.Waiting:   jobwatchv1.JobState_JOB_STATE_WAITING,
}

// DependencyFailure returns the wire form of f: UNSPECIFIED for "".
func DependencyFailure(f jobtype.DependencyFailure) jobwatchv1.DependencyFailure {
	switch f {
	case jobtype.CancelOnDependencyFailure:
		return jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL
	case jobtype.RunOnDependencyFailure:
		return jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN
	}
	return jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED
}

// State returns the wire form of s.
func State(s jobtype.State) jobwatchv1.JobState { return stateToProto[s] }

// StoreState returns the stored form of p; false for UNSPECIFIED or an
// unknown value.
func StoreState(p jobwatchv1.JobState) (jobtype.State, bool) {
	s, ok := stateFromProto[p]
	return s, ok
}

var stateFromProto = func() map[jobwatchv1.JobState]jobtype.State {
	m := make(map[jobwatchv1.JobState]jobtype.State, len(stateToProto))
	for s, p := range stateToProto {
		m[p] = s
	}
	return m
}()

// FullView reports whether v asks for whole jobs, payload and result
// included; UNSPECIFIED and SUMMARY are summaries. ok is false for a value
// the API does not define.
func FullView(v jobwatchv1.JobView) (full, ok bool) {
	switch v {
	case jobwatchv1.JobView_JOB_VIEW_UNSPECIFIED, jobwatchv1.JobView_JOB_VIEW_SUMMARY:
		return false, true
	case jobwatchv1.JobView_JOB_VIEW_FULL:
		return true, true
	}
	return false, false
}

// Job converts a stored job for the wire. It fails only when the
// stored payload or result is not valid JSON.
func Job(j *jobtype.Job) (*jobwatchv1.Job, error) {
	payload, err := Value(j.Payload)
	if err != nil {
		return nil, fmt.Errorf("job %s payload: %w", j.ID, err)
	}
	result, err := Value(j.Result)
	if err != nil {
		return nil, fmt.Errorf("job %s result: %w", j.ID, err)
	}
	pj := &jobwatchv1.Job{
		Id:                  j.ID,
		Tenant:              j.Tenant,
		Kind:                j.Kind,
		Queue:               j.Queue,
		State:               stateToProto[j.State],
		Version:             j.Version,
		Percent:             j.Percent,
		Step:                j.Step,
		Payload:             payload,
		Result:              result,
		Attempt:             j.Attempt,
		MaxAttempts:         j.MaxAttempts,
		UniqueKey:           j.UniqueKey,
		CreatedAt:           Timestamp(j.CreatedAt),
		StartedAt:           Timestamp(j.StartedAt),
		UpdatedAt:           Timestamp(j.UpdatedAt),
		FinishedAt:          Timestamp(j.FinishedAt),
		RunAt:               Timestamp(j.RunAt),
		WorkerId:            j.WorkerID,
		Priority:            j.Priority,
		Batch:               j.Batch,
		After:               j.After,
		OnDependencyFailure: DependencyFailure(j.OnDependencyFailure),
		Traceparent:         j.TraceParent,
		Tracestate:          j.TraceState,
		Error:               jobError(j.Error),
	}
	for _, h := range j.History {
		pj.Attempts = append(pj.Attempts, &jobwatchv1.JobAttempt{
			Attempt:    h.Attempt,
			WorkerId:   h.WorkerID,
			StartedAt:  Timestamp(h.StartedAt),
			FinishedAt: Timestamp(h.FinishedAt),
			State:      stateToProto[h.State],
			Error:      jobError(h.Error),
			By:         h.By,
		})
	}
	return pj, nil
}

func jobError(e *jobtype.JobError) *jobwatchv1.JobError {
	if e == nil {
		return nil
	}
	return &jobwatchv1.JobError{Type: e.Type, Message: e.Message}
}

// Jobs converts a list of stored jobs for the wire.
func Jobs(js []jobtype.Job) ([]*jobwatchv1.Job, error) {
	out := make([]*jobwatchv1.Job, len(js))
	for i := range js {
		pj, err := Job(&js[i])
		if err != nil {
			return nil, err
		}
		out[i] = pj
	}
	return out, nil
}

// Value turns stored JSON into a Value; no JSON is no Value.
func Value(raw json.RawMessage) (*structpb.Value, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(raw, v); err != nil {
		return nil, err
	}
	return v, nil
}

// CheckExactJSON is CheckExactNumbers of JSON text raw a caller wrote
// (a payload, a result), path naming it in the error.
func CheckExactJSON(raw []byte, path string) error {
	var tree any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return err
	}
	return CheckExactNumbers(tree, path)
}

// JSON turns a Value from the wire into JSON for the store, compact:
// protojson puts a space after some commas and colons, chosen at random
// per binary to keep callers from relying on its layout, so its bytes
// would be up to a third more than what a caller sent, and the payload
// limit (counted on these bytes) would depend on the build. An absent
// Value, or one with no kind set (possible only in binary protobuf), is
// no JSON.
func JSON(v *structpb.Value) (json.RawMessage, error) {
	if v == nil || v.Kind == nil {
		return nil, nil
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	compact.Grow(len(b))
	if err := json.Compact(&compact, b); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// Timestamp returns t for the wire; the zero time is no timestamp.
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// maxExactInteger is 2^53: a JSON value (google.protobuf.Value) holds a
// number as a float64, which holds every integer up to it, and not all
// beyond.
const maxExactInteger = 1 << 53

// CheckExactNumbers reports the first integer in JSON value v (written
// without a fraction or an exponent) beyond ±2^53 that would not come
// back as sent: the value holds it as a float64, so 9007199254740993 was
// stored, and answered, as 9007199254740992, silently. Such a number is
// refused with its path and what it would become; a caller sends it as
// a string. An integer written as its float64 prints (the shortest
// digits that read back as that float64, as encoding/json and
// JavaScript write it: 18446744073709552000 for 2^64) comes back as
// sent and passes, so a job's payload or result, as a JSON answer shows
// it, can be sent again. Numbers written with a fraction or an exponent
// are taken as the floating point they are. v is JSON decoded with
// json.Decoder.UseNumber.
func CheckExactNumbers(v any, path string) error {
	switch v := v.(type) {
	case json.Number:
		s := string(v)
		if strings.ContainsAny(s, ".eE") {
			return nil
		}
		if n, ok := new(big.Int).SetString(s, 10); ok && n.CmpAbs(big.NewInt(maxExactInteger)) > 0 {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil { // past the float64 range
				return fmt.Errorf("%s: %s is an integer beyond what a number in a JSON payload or result can hold (a 64-bit float); send it as a string", path, s)
			}
			if back := strconv.FormatFloat(f, 'f', -1, 64); back != s {
				return fmt.Errorf("%s: %s is an integer beyond ±2^53 (9007199254740992) that a number in a JSON payload or result cannot hold: it would come back as %s; send it as a string", path, s, back)
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := CheckExactNumbers(v[k], fmt.Sprintf("%s.%s", path, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := CheckExactNumbers(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}
