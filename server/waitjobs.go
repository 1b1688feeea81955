package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// A WaitJobs answer is built while the call waits. Converting and
// encoding a thousand jobs takes milliseconds, which a WaitJob never
// spends after its job ends (its answer is one job, encoded once per
// publish). So each job is converted and encoded in the call's wire
// format the moment the wait sees it end (jobs.WaitManyRequest.Ended):
// the jobs ended before the call parked on its way in, the rest as they
// end. When the last one ends, the answer is those parts laid end to end
// (a repeated field in protobuf is its elements' encodings, each behind
// its tag and length; in JSON, a list), and the codec writes it without
// encoding a job again.

// waitJobsHandler serves WaitJobs as the generated JobService handler
// would, with opts, except that its answers are never compressed, even
// for a client that accepts gzip. An answer of 1,000 summaries is about
// 136 KB: on this project's 2-core machine gzip took the server 0.65 ms
// and the caller's gunzip 0.9 ms, between the last job's end and the
// caller holding the answer, several times what the bytes take to cross
// a local network (docs/BENCHMARKS.md, "Batches"). The moment is what a
// wait is for; a caller far enough away for 136 KB to matter waits longer
// than that for any answer. Requests may still come compressed.
func waitJobsHandler(svc jobwatchv1connect.JobServiceHandler, opts []connect.HandlerOption) http.Handler {
	method := jobwatchv1.File_jobwatch_v1_jobwatch_proto.Services().ByName("JobService").Methods().ByName("WaitJobs")
	return connect.NewUnaryHandlerSimple(jobwatchv1connect.JobServiceWaitJobsProcedure, svc.WaitJobs,
		connect.WithSchema(method),
		connect.WithHandlerOptions(opts...),
		connect.WithCompressMinBytes(math.MaxInt),
	)
}

// jobsAnswer holds the parts of one WaitJobs answer.
type jobsAnswer struct {
	format wireFormat
	codec  codec
	parts  map[string]answerPart // by job id
}

// answerPart is one ended job, for the wire and encoded in the answer's
// format.
type answerPart struct {
	version int64
	job     *jobwatchv1.Job
	bytes   []byte
}

// newJobsAnswer prepares an answer in the format the call's request
// came in: a reply is encoded as its request was.
func newJobsAnswer(ctx context.Context) *jobsAnswer {
	a := &jobsAnswer{format: formatProto, codec: protoCodec{}, parts: map[string]answerPart{}}
	if call, ok := connect.CallInfoForHandlerContext(ctx); ok &&
		strings.Contains(call.RequestHeader().Get("Content-Type"), "json") {
		a.format, a.codec = formatJSON, jsonCodec{"json"}
	}
	return a
}

// add converts and encodes j, just ended. A job the wire cannot carry
// (a stored payload that is not JSON) is left for response, which
// reports it.
func (a *jobsAnswer) add(j *jobtype.Job) {
	pj, err := wire.Job(j)
	if err != nil {
		return
	}
	b, err := a.codec.MarshalAppend(nil, pj)
	if err != nil {
		return
	}
	a.parts[j.ID] = answerPart{version: j.Version, job: pj, bytes: b}
}

// response is the answer to res, registered with the codecs so that they
// write it from the parts made while the call waited. A job ended in res
// that add never saw in that version is converted here and encoded when
// the answer is written.
func (a *jobsAnswer) response(shared *sharedResponses, res jobs.WaitManyResult) (*jobwatchv1.WaitJobsResponse, error) {
	resp := &jobwatchv1.WaitJobsResponse{Jobs: make([]*jobwatchv1.Job, 0, len(res.Ended)), UnfinishedJobIds: res.Unfinished}
	encoded := make([][]byte, len(res.Ended))
	size := int64(0)
	for i := range res.Ended {
		j := res.Ended[i]
		if p, ok := a.parts[j.ID]; ok && p.version == j.Version {
			resp.Jobs, encoded[i] = append(resp.Jobs, p.job), p.bytes
			size += int64(len(p.bytes))
			continue
		}
		pj, err := wire.Job(j)
		if err != nil {
			return nil, err
		}
		resp.Jobs = append(resp.Jobs, pj)
		size += int64(proto.Size(pj))
	}
	for _, id := range res.Unfinished {
		size += int64(len(id)) + 2
	}
	format := a.format
	prebuilt(shared, resp, size, func(resp *jobwatchv1.WaitJobsResponse, dst []byte, c codec, f wireFormat) ([]byte, error) {
		part := func(i int) ([]byte, error) {
			if f == format && encoded[i] != nil {
				return encoded[i], nil
			}
			return c.MarshalAppend(nil, resp.Jobs[i])
		}
		if f == formatProto {
			return appendProtoAnswer(dst, len(resp.Jobs), part, resp.UnfinishedJobIds)
		}
		return appendJSONAnswer(dst, len(resp.Jobs), part, resp.UnfinishedJobIds)
	})
	return resp, nil
}

// Field numbers of WaitJobsResponse.
const (
	waitJobsJobsField       = 1
	waitJobsUnfinishedField = 2
)

// appendProtoAnswer appends a WaitJobsResponse in protobuf: n jobs
// encoded by part, then the unfinished ids.
func appendProtoAnswer(dst []byte, n int, part func(int) ([]byte, error), unfinished []string) ([]byte, error) {
	for i := range n {
		b, err := part(i)
		if err != nil {
			return nil, err
		}
		dst = protowire.AppendTag(dst, waitJobsJobsField, protowire.BytesType)
		dst = protowire.AppendBytes(dst, b)
	}
	for _, id := range unfinished {
		dst = protowire.AppendTag(dst, waitJobsUnfinishedField, protowire.BytesType)
		dst = protowire.AppendString(dst, id)
	}
	return dst, nil
}

// appendJSONAnswer appends a WaitJobsResponse in the JSON protojson
// writes (empty lists left out): n jobs encoded by part, then the
// unfinished ids.
func appendJSONAnswer(dst []byte, n int, part func(int) ([]byte, error), unfinished []string) ([]byte, error) {
	dst = append(dst, '{')
	if n > 0 {
		dst = append(dst, `"jobs":[`...)
		for i := range n {
			b, err := part(i)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, b...)
		}
		dst = append(dst, ']')
	}
	if len(unfinished) > 0 {
		if n > 0 {
			dst = append(dst, ',')
		}
		ids, err := json.Marshal(unfinished)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `"unfinishedJobIds":`...)
		dst = append(dst, ids...)
	}
	return append(dst, '}'), nil
}
