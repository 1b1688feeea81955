package server

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// rpcMethods lists every RPC of every jobwatch service, from the
// generated descriptors, so a new RPC is fuzzed without a word here.
func rpcMethods() []protoreflect.MethodDescriptor {
	var methods []protoreflect.MethodDescriptor
	services := jobwatchv1.File_jobwatch_v1_jobwatch_proto.Services()
	for i := range services.Len() {
		ms := services.Get(i).Methods()
		for j := range ms.Len() {
			methods = append(methods, ms.Get(j))
		}
	}
	return methods
}

// newInput returns an empty request message of method md, of its
// generated Go type.
func newInput(t testing.TB, md protoreflect.MethodDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		t.Fatalf("%s: %v", md.FullName(), err)
	}
	return mt.New().Interface()
}

// runningJob and itsLease stand for the id and the lease of a job that
// is RUNNING when FuzzHandlers sends a request: it puts real ones in
// their place, so that the calls of a worker holding a lease reach the
// engine and the store. They are as long as real ids, so a request in
// binary stays well formed when they are replaced.
const (
	runningJob = "j_runningjobrunningjobrunnin"
	itsLease   = "l_itsleaseitsleaseitsleaseit"
)

// seedRequests are real requests in JSON, per RPC name: the README's curl
// bodies, and requests the tests send, good and bad. Each is also seeded
// in binary, converted by the server's own codecs.
var seedRequests = map[protoreflect.Name][]string{
	"SubmitJob": {
		`{"kind":"enrich","payload":{"catalogue":"spring","batches":3}}`,
		`{"kind":"enrich","payload":{"batches":2},"wait":true}`,
		`{"kind":"enrich","payload":{"batches":3}}`,
		`{"tenant":"acme","kind":"email.send","queue":"reports/monthly","uniqueKey":"report 2024-05 für Acme","hold":true,"runAt":"2030-01-02T03:04:05Z","maxAttempts":3}`,
		`{"kind":"k","hold":true,"wait":true}`,
		`{"kind":"k","payload":[[[[1]]]],"max_attempts":-1}`,
		`{"kind":"k","payload":{"a":1,"a":2}}`,
		`{"kind":"k","payload":"\ud800"}`,
		`{"kind":"k","payload":1e400}`,
		`{"kind":"k","runAt":"10000-01-01T00:00:00Z"}`,
		`{"kind":["a"]}`,
	},
	"StartJob":  {`{"jobId":"j_01hzzzzzzzzzzzzzzzzzzzzzzz"}`, `{"jobId":"` + runningJob + `"}`},
	"GetJob":    {`{"jobId":"j_nosuchjob"}`, `{"job_id":`, `{"job_id": 5}`, `{}`, `{"jobId":"` + runningJob + `"}`},
	"CancelJob": {`{"job_id":"a b"}`, `{"jobId":"` + runningJob + `"}`},
	"WaitJob":   {`{"jobId":"j_nosuchjob"}`, `{"jobId":"` + runningJob + `"}`},
	"SubmitJobs": {
		`{"jobs":[{"kind":"enrich","batch":"b-1","payload":{"batches":2}},{"kind":"enrich","batch":"b-1"}]}`,
		`{"jobs":[{"kind":"k","wait":true}]}`,
		`{"jobs":[]}`,
		`{"jobs":{"kind":"k"}}`,
	},
	"WaitJobs": {
		`{"jobIds":["j_nosuchjob","` + runningJob + `"],"mode":"WAIT_MODE_ANY","view":"JOB_VIEW_FULL"}`,
		`{"batch":"b-1","tenant":"acme","mode":"WAIT_MODE_ALL"}`,
		`{"jobIds":["` + runningJob + `"],"batch":"b","mode":9}`,
	},
	"ListJobs": {
		`{"tenant":"acme","states":["JOB_STATE_QUEUED","JOB_STATE_RUNNING"],"kind":"enrich","queue":"default","pageSize":10,"view":"JOB_VIEW_FULL"}`,
		`{"states":["JOB_STATE_QUEUED","RUNNING"]}`,
		`{"page_size":"many"}`,
		`{"page_token":"bogus","states":[3,99],"view":7}`,
	},
	"WatchJob":      {`{"jobId":"j_nosuchjob","afterVersion":"3"}`, `{"jobId":"` + runningJob + `","afterVersion":"1"}`},
	"WatchJobs":     {`{"tenant":"acme","resumeToken":"x","pageSize":5,"view":"JOB_VIEW_SUMMARY"}`},
	"GetServerInfo": {`{}`},
	"GetJobLogs":    {`{"jobId":"` + runningJob + `","afterSeq":"2","limit":10}`, `{"jobId":"j_nosuchjob","afterSeq":-1,"limit":-5}`},
	"WatchJobLogs":  {`{"jobId":"` + runningJob + `","afterSeq":"0"}`, `{"jobId":"j_x","afterSeq":"9223372036854775807"}`},
	"AppendJobLogs": {
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","lines":[{"text":"hello","stream":"LOG_STREAM_STDERR","time":"2030-01-02T03:04:05Z"}]}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","lines":[{"text":"\u001b[31mred\u001b[0m","stream":9,"time":"0001-01-01T00:00:00Z"}]}`,
	},
	"RetryJob":    {`{"jobId":"j_nosuchjob"}`, `{"jobId":"` + runningJob + `"}`},
	"DeleteJob":   {`{"jobId":"j_nosuchjob"}`, `{"jobId":"` + runningJob + `"}`},
	"RetryJobs":   {`{"filter":{"queues":["q"],"states":["JOB_STATE_FAILED"]}}`, `{"filter":{"all":true},"pageToken":"x","pageSize":5}`},
	"CancelJobs":  {`{"filter":{"tenant":"acme","kinds":["k"],"createdBefore":"2030-01-02T03:04:05Z"}}`, `{}`},
	"DeleteJobs":  {`{"filter":{"tenant":"*","states":["JOB_STATE_SUCCEEDED"]},"pageSize":1000}`},
	"PauseQueue":  {`{"queue":"default"}`, `{"queue":""}`},
	"ResumeQueue": {`{"queue":"default"}`},
	"ClaimJob":    {`{"workerId":"host-1@42","kinds":["enrich","render"],"queues":["index"]}`, `{}`},
	"Heartbeat": {
		`{"jobId":"j_x","leaseId":"l_y","percent":45,"step":"batch 5 of 11"}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","percent":45,"step":"batch 5 of 11"}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","percent":-7,"step":"\u0000"}`,
	},
	"CompleteJob": {
		`{"jobId":"j_x","leaseId":"l_y","result":{"rows":[1,2.5,"x",true,null]}}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","result":{"rows":[1,2.5,"x",true,null],"n":-0,"big":1e308}}`,
	},
	"FailJob": {
		`{"jobId":"j_x","leaseId":"l_y","error":{"type":"Timeout","message":"took too long"},"retryable":true}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","error":{"type":"Timeout","message":"took too long"},"retryable":true}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `","error":{"message":"\u2028"}}`,
	},
	"ReleaseJob": {
		`{"jobId":"j_x","leaseId":"l_y"}`,
		`{"jobId":"` + runningJob + `","leaseId":"` + itsLease + `"}`,
	},
	"StopClaiming":  {`{"workerId":"w-1"}`, `{"workerId":""}`},
	"ListQueues":    {`{}`},
	"ListSchedules": {`{}`},
}

// addRequestSeeds adds every seed request to f as (method index, binary,
// body), in JSON and in binary.
func addRequestSeeds(f *testing.F) {
	for i, md := range rpcMethods() {
		bodies := seedRequests[md.Name()]
		if len(bodies) == 0 {
			f.Fatalf("no seed request for %s: add one to seedRequests", md.FullName())
		}
		for _, body := range bodies {
			f.Add(uint8(i), false, []byte(body))
			msg := newInput(f, md)
			if err := (jsonCodec{"json"}).Unmarshal([]byte(body), msg); err != nil {
				continue // a bad request: JSON only
			}
			bin, err := protoCodec{}.Marshal(msg)
			if err != nil {
				f.Fatalf("%s %s: marshal: %v", md.Name(), body, err)
			}
			f.Add(uint8(i), true, bin)
		}
	}
}

// FuzzDecodeRequest decodes arbitrary bytes as the request of every RPC,
// in JSON and in binary, with the codecs the server registers, then runs
// what decoded through the checks the handlers make before the engine.
// Beyond not panicking, it holds that a request that decodes re-encodes
// to the same message in both encodings, and that a payload or result the
// checks accept round-trips through the stored JSON form every reader
// gets it in.
func FuzzDecodeRequest(f *testing.F) {
	addRequestSeeds(f)
	methods := rpcMethods()
	f.Fuzz(func(t *testing.T, method uint8, binary bool, data []byte) {
		md := methods[int(method)%len(methods)]
		var codec connect.Codec = jsonCodec{"json"}
		if binary {
			codec = protoCodec{}
		}
		msg := newInput(t, md)
		if err := codec.Unmarshal(data, msg); err != nil {
			return
		}
		checkReencodes(t, codec, msg)
		checkReencodes(t, protoCodec{}, msg)
		checkHandlerChecks(t, msg)
	})
}

// checkReencodes holds that msg, decoded, encodes with codec and decodes
// back to an equal message. Only JSON may refuse to encode, and only what
// JSON cannot say: a number that is not finite, a time out of its range.
func checkReencodes(t *testing.T, codec connect.Codec, msg proto.Message) {
	t.Helper()
	out, err := codec.Marshal(msg)
	if err != nil {
		if codec.Name() == "proto" || !jsonCannotSay(err) {
			t.Fatalf("%s: a decoded %s does not encode: %v", codec.Name(), msg.ProtoReflect().Descriptor().Name(), err)
		}
		return
	}
	again := msg.ProtoReflect().New().Interface()
	if err := codec.Unmarshal(out, again); err != nil {
		t.Fatalf("%s: %s does not decode what it encoded (%q): %v", codec.Name(), msg.ProtoReflect().Descriptor().Name(), out, err)
	}
	if !proto.Equal(msg, again) {
		t.Fatalf("%s: %s changed through encoding:\n before %v\n after  %v", codec.Name(), msg.ProtoReflect().Descriptor().Name(), msg, again)
	}
}

// jsonCannotSay reports whether err is protojson refusing a value that
// only the binary form can carry.
func jsonCannotSay(err error) bool {
	s := err.Error()
	for _, cannot := range []string{"invalid value NaN", "invalid value Inf", "invalid value -Inf",
		"google.protobuf.Timestamp", "google.protobuf.Duration", "invalid UTF-8"} {
		if strings.Contains(s, cannot) {
			return true
		}
	}
	return false
}

// checkHandlerChecks runs a decoded request through what its handler does
// before the engine, and the engine's exported checks of what reaches it.
func checkHandlerChecks(t *testing.T, msg proto.Message) {
	switch req := msg.(type) {
	case *jobwatchv1.SubmitJobRequest:
		if err := checkSubmit(req); err != nil {
			wantCode(t, err, connect.CodeInvalidArgument)
		}
		if req.RunAt != nil && req.RunAt.CheckValid() == nil {
			_ = req.RunAt.AsTime()
		}
		checkJSONField(t, "payload", req.GetPayload())
		for _, name := range []string{req.GetTenant(), req.GetKind(), req.GetQueue()} {
			_ = jobtype.CheckName("name", name)
		}
	case *jobwatchv1.CompleteJobRequest:
		checkJSONField(t, "result", req.GetResult())
	case *jobwatchv1.ListJobsRequest:
		if _, err := view(req.GetView()); err != nil {
			wantCode(t, err, connect.CodeInvalidArgument)
		}
		for _, ps := range req.GetStates() {
			st, ok := wire.StoreState(ps)
			if ok && wire.State(st) != ps {
				t.Fatalf("state %v became %q and back %v", ps, st, wire.State(st))
			}
		}
	case *jobwatchv1.WatchJobsRequest:
		if _, err := view(req.GetView()); err != nil {
			wantCode(t, err, connect.CodeInvalidArgument)
		}
	}
}

// checkJSONField converts a payload or result as the handlers do and, if
// the engine's check accepts it, holds that the stored JSON reads back as
// the value sent, from JSON as readers get it and from binary.
func checkJSONField(t *testing.T, field string, v *structpb.Value) {
	t.Helper()
	raw, err := jsonField(field, v)
	if err != nil {
		wantCode(t, err, connect.CodeInvalidArgument)
		if strings.Contains(err.Error(), "proto:") {
			t.Fatalf("%s: the refusal names the library: %v", field, err)
		}
		return
	}
	if raw == nil {
		return
	}
	if err := jobtype.CheckJSON("payload", raw, jobtype.DefaultMaxPayloadBytes); err != nil {
		return
	}
	back, err := wire.Value(raw)
	if err != nil {
		t.Fatalf("%s: accepted JSON %q does not read back: %v", field, raw, err)
	}
	if !sameJSON(t, v, back) {
		t.Fatalf("%s: stored as %q, read back as %v, was %v", field, raw, back, v)
	}
	bin, err := proto.Marshal(back)
	if err != nil {
		t.Fatalf("%s: accepted JSON %q does not encode in binary: %v", field, raw, err)
	}
	// Readers decode with protobuf's default recursion limit, not the
	// server's wider one.
	if err := proto.Unmarshal(bin, &structpb.Value{}); err != nil {
		t.Fatalf("%s: accepted JSON %q does not decode from binary with the default limits: %v", field, raw, err)
	}
}

// sameJSON compares two Values as the JSON documents they are.
func sameJSON(t *testing.T, a, b *structpb.Value) bool {
	t.Helper()
	var docs [2]any
	for i, v := range []*structpb.Value{a, b} {
		js, err := v.MarshalJSON()
		if err != nil {
			t.Fatalf("marshal %v: %v", v, err)
		}
		if err := json.Unmarshal(js, &docs[i]); err != nil {
			t.Fatalf("protojson wrote %q, which encoding/json refuses: %v", js, err)
		}
	}
	return reflect.DeepEqual(docs[0], docs[1])
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("got %v (%v), want %v", got, err, code)
	}
	if strings.TrimSpace(err.Error()) == "" {
		t.Fatalf("%v with no message", code)
	}
}

// A payload that JSON cannot hold (only binary protobuf can send a NaN)
// is refused in the caller's words, without the library's "proto:".
func TestAPayloadJSONCannotHoldIsRefusedInPlainWords(t *testing.T) {
	_, err := jsonField("payload", structpb.NewNumberValue(math.NaN()))
	wantCode(t, err, connect.CodeInvalidArgument)
	if msg := err.Error(); strings.Contains(msg, "proto:") || !strings.Contains(msg, "payload") || !strings.Contains(msg, "NaN") {
		t.Fatalf("a NaN payload was refused with %q, want the field and the value named, without \"proto:\"", msg)
	}
}
