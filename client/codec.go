package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// codec is connect-go's binary or JSON codec with one addition: a
// response whose job this client cannot decode, such as one whose payload
// nests deeper than protobuf's recursion limit, is an *UndecodableJobError
// naming the job and, for a claim, the lease, instead of a bare decoding
// error. connect-go wraps a codec's error with %w (as invalid_argument,
// "unmarshal message: ..."), so callers find it with errors.As, and a
// Worker can fail that one job and go on claiming.
type codec struct{ json bool }

func (c codec) Name() string {
	if c.json {
		return "json"
	}
	return "proto"
}

func (c codec) IsBinary() bool { return !c.json }

func (c codec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", v)
	}
	if c.json {
		return protojson.Marshal(m)
	}
	return proto.Marshal(m)
}

func (c codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", v)
	}
	var err error
	if c.json {
		if len(data) == 0 {
			return errors.New("zero-length payload is not a valid JSON object")
		}
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, m)
	} else {
		err = proto.Unmarshal(data, m)
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("unmarshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	if _, ok := m.(*jobwatchv1.ClaimJobResponse); ok {
		if partial := c.claimsOf(data, err); partial != nil {
			return partial
		}
	}
	var jobID, leaseID string
	var job *jobwatchv1.Job
	if c.json {
		// protojson takes JSON nested as deep as encoding/json can
		// read, so no summary of such a job would decode either.
		jobID, leaseID = jobOfJSON(data)
	} else {
		jobID, leaseID = jobOfBinary(data, m.ProtoReflect().Descriptor())
		job = summaryOfBinary(data, m.ProtoReflect().Descriptor())
	}
	if jobID == "" {
		return err
	}
	return &UndecodableJobError{JobID: jobID, LeaseID: leaseID, Job: job, Err: err}
}

var jobDescriptor = (*jobwatchv1.Job)(nil).ProtoReflect().Descriptor()

// summaryOfBinary decodes the response's job without its payload and
// result (the values that can nest too deep), or returns nil if even that
// fails or the response has no job field.
func summaryOfBinary(data []byte, md protoreflect.MessageDescriptor) *jobwatchv1.Job {
	jobField := md.Fields().ByName("job")
	if jobField == nil || jobField.Message() == nil || jobField.Message().FullName() != jobDescriptor.FullName() {
		return nil
	}
	jobBytes, ok := bytesField(data, jobField.Number())
	if !ok {
		return nil
	}
	jd := jobField.Message()
	skip := map[protowire.Number]bool{
		jd.Fields().ByName("payload").Number(): true,
		jd.Fields().ByName("result").Number():  true,
	}
	var kept []byte
	for rest := jobBytes; len(rest) > 0; {
		n, typ, tagLen := protowire.ConsumeTag(rest)
		if tagLen < 0 {
			return nil
		}
		valLen := protowire.ConsumeFieldValue(n, typ, rest[tagLen:])
		if valLen < 0 {
			return nil
		}
		if !skip[n] {
			kept = append(kept, rest[:tagLen+valLen]...)
		}
		rest = rest[tagLen+valLen:]
	}
	job := new(jobwatchv1.Job)
	if proto.Unmarshal(kept, job) != nil {
		return nil
	}
	return job
}

// jobOfBinary reads the job's id (field "job", then its "id") and the
// "lease_id" out of a binary response that did not decode, walking only
// the top two levels, so the depth that broke the decoder does not matter.
func jobOfBinary(data []byte, md protoreflect.MessageDescriptor) (jobID, leaseID string) {
	jobField, leaseField := md.Fields().ByName("job"), md.Fields().ByName("lease_id")
	if jobField == nil || jobField.Message() == nil {
		return "", ""
	}
	idField := jobField.Message().Fields().ByName("id")
	if idField == nil {
		return "", ""
	}
	jobBytes, _ := bytesField(data, jobField.Number())
	id, _ := bytesField(jobBytes, idField.Number())
	var lease []byte
	if leaseField != nil {
		lease, _ = bytesField(data, leaseField.Number())
	}
	return string(id), string(lease)
}

// bytesField returns the last length-delimited field numbered num in a
// message's bytes (the last, as protobuf merges repeated occurrences of a
// singular field that way).
func bytesField(data []byte, num protowire.Number) ([]byte, bool) {
	all := repeatedBytes(data, num)
	if len(all) == 0 {
		return nil, false
	}
	return all[len(all)-1], true
}

// jobOfJSON is jobOfBinary for the JSON form ("job": {"id": ...},
// "leaseId" or "lease_id"). encoding/json decodes only the fields named
// and skips the rest without building it.
func jobOfJSON(data []byte) (jobID, leaseID string) {
	var resp struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
		LeaseID  string `json:"leaseId"`
		LeaseID2 string `json:"lease_id"`
	}
	if json.Unmarshal(data, &resp) != nil {
		return "", ""
	}
	if resp.LeaseID == "" {
		resp.LeaseID = resp.LeaseID2
	}
	return resp.Job.ID, resp.LeaseID
}

// undecodableClaimsError is a ClaimJobResponse with several claims, some
// of which this client cannot decode: the rest, decoded, and for each of
// those an *UndecodableJobError with its lease, so that a Worker runs the
// rest and fails those.
type undecodableClaimsError struct {
	decoded     *jobwatchv1.ClaimJobResponse
	undecodable []*UndecodableJobError
	err         error
}

func (e *undecodableClaimsError) Error() string { return e.err.Error() }
func (e *undecodableClaimsError) Unwrap() error { return e.err }

var claimDescriptor = (*jobwatchv1.Claim)(nil).ProtoReflect().Descriptor()

// claimsOf decodes a ClaimJobResponse that did not decode whole claim by
// claim; nil if it has no claims (an answer with one job in job) or
// none of them can be named.
func (c codec) claimsOf(data []byte, err error) *undecodableClaimsError {
	var raw [][]byte
	if c.json {
		var resp struct {
			Claims []json.RawMessage `json:"claims"`
		}
		if json.Unmarshal(data, &resp) != nil {
			return nil
		}
		for _, r := range resp.Claims {
			raw = append(raw, r)
		}
	} else {
		num := (*jobwatchv1.ClaimJobResponse)(nil).ProtoReflect().Descriptor().Fields().ByName("claims").Number()
		raw = repeatedBytes(data, num)
	}
	if len(raw) == 0 {
		return nil
	}
	out := &undecodableClaimsError{decoded: &jobwatchv1.ClaimJobResponse{}, err: err}
	for _, r := range raw {
		claim := new(jobwatchv1.Claim)
		var cerr error
		if c.json {
			cerr = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(r, claim)
		} else {
			cerr = proto.Unmarshal(r, claim)
		}
		if cerr == nil {
			out.decoded.Claims = append(out.decoded.Claims, claim)
			continue
		}
		u := &UndecodableJobError{Err: fmt.Errorf("unmarshal %s: %w", claimDescriptor.FullName(), cerr)}
		if c.json {
			u.JobID, u.LeaseID = jobOfJSON(r)
		} else {
			u.JobID, u.LeaseID = jobOfBinary(r, claimDescriptor)
			u.Job = summaryOfBinary(r, claimDescriptor)
		}
		if u.JobID == "" {
			return nil
		}
		out.undecodable = append(out.undecodable, u)
	}
	return out
}

// repeatedBytes returns every length-delimited field numbered num in a
// message's bytes, in order.
func repeatedBytes(data []byte, num protowire.Number) [][]byte {
	var found [][]byte
	for len(data) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(data)
		if tagLen < 0 {
			return found
		}
		data = data[tagLen:]
		if n == num && typ == protowire.BytesType {
			v, vLen := protowire.ConsumeBytes(data)
			if vLen < 0 {
				return found
			}
			found = append(found, v)
			data = data[vLen:]
			continue
		}
		vLen := protowire.ConsumeFieldValue(n, typ, data)
		if vLen < 0 {
			return found
		}
		data = data[vLen:]
	}
	return found
}
