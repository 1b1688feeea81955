package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

var storeStates = []jobtype.State{jobtype.Pending, jobtype.Queued, jobtype.Running,
	jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost}

// FuzzJob converts fuzzed stored jobs for the wire. A job the engine could
// have stored (text in UTF-8, payload and result that jobtype.CheckJSON
// accepts) always converts, reads back equal from binary with protobuf's
// default limits and, when its times fit in RFC 3339, from JSON; and its
// payload and result read back from the wire as the JSON documents
// stored.
func FuzzJob(f *testing.F) {
	created := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC).UnixNano()
	f.Add("j_01hzzzzzzzzzzzzzzzzzzzzzzz", "acme", "enrich", "default", uint8(3), int64(7), int32(45), "batch 5 of 11",
		[]byte(`{"catalogue":"spring","batches":3}`), []byte(`{"rows":[1,2.5,"x",true,null]}`), "Timeout", "took too long",
		"report 2024-05 für Acme", created, created+int64(time.Second), "host-1@42")
	f.Add("j", "", "", "", uint8(0), int64(1), int32(0), "", []byte(nil), []byte(`[[[]]]`), "", "",
		"", int64(0), int64(-1<<63), "")
	f.Add("j", "t", "k", "q", uint8(6), int64(-1), int32(-5), "\xff", []byte(`"\ud800"`), []byte(`1e400`), "\x00", "",
		"", int64(1<<62), int64(-1<<62), "w")
	f.Fuzz(func(t *testing.T, id, tenant, kind, queue string, state uint8, version int64, percent int32, step string,
		payload, result []byte, errType, errMessage, uniqueKey string, createdNanos, finishedNanos int64, workerID string) {
		j := jobtype.Job{
			ID: id, Tenant: tenant, Kind: kind, Queue: queue,
			State:   storeStates[int(state)%len(storeStates)],
			Version: version, Percent: percent, Step: step,
			Payload: payload, Result: result,
			UniqueKey:  uniqueKey,
			CreatedAt:  fuzzTime(createdNanos),
			FinishedAt: fuzzTime(finishedNanos),
			WorkerID:   workerID,
		}
		if errType != "" || errMessage != "" {
			j.Error = &jobtype.JobError{Type: errType, Message: errMessage}
		}
		pj, err := Job(&j)
		storable := jsonOK(payload) && jsonOK(result)
		for _, s := range []string{id, tenant, kind, queue, step, errType, errMessage, uniqueKey, workerID} {
			storable = storable && utf8.ValidString(s)
		}
		if !storable {
			return // a stored job can hold none of this; the point was not to panic
		}
		if err != nil {
			t.Fatalf("a job the engine could store does not convert: %v", err)
		}
		if back, ok := StoreState(pj.State); !ok || back != j.State {
			t.Fatalf("state %s went out as %v and came back as %s, %v", j.State, pj.State, back, ok)
		}
		bin, err := proto.Marshal(pj)
		if err != nil {
			t.Fatalf("binary: %v", err)
		}
		again := &jobwatchv1.Job{}
		if err := proto.Unmarshal(bin, again); err != nil {
			t.Fatalf("binary does not read back with protobuf's default limits: %v", err)
		}
		if !proto.Equal(pj, again) {
			t.Fatalf("binary changed the job:\n%v\n%v", pj, again)
		}
		for field, raw := range map[string][]byte{"payload": payload, "result": result} {
			v := pj.GetPayload()
			if field == "result" {
				v = pj.GetResult()
			}
			if raw == nil {
				if v != nil {
					t.Fatalf("no %s went out as %v", field, v)
				}
				continue
			}
			out, err := JSON(v)
			if err != nil {
				t.Fatalf("%s %q went out as %v, which does not come back: %v", field, raw, v, err)
			}
			if !sameDocument(t, raw, out) {
				t.Fatalf("%s %q came back as %q", field, raw, out)
			}
		}
		if !rfc3339(j.CreatedAt) || !rfc3339(j.FinishedAt) {
			return // protojson refuses such times, rightly
		}
		js, err := protojson.Marshal(pj)
		if err != nil {
			t.Fatalf("JSON: %v", err)
		}
		again = &jobwatchv1.Job{}
		if err := protojson.Unmarshal(js, again); err != nil {
			t.Fatalf("JSON %s does not read back: %v", js, err)
		}
		if !proto.Equal(pj, again) {
			t.Fatalf("JSON changed the job:\n%v\n%v", pj, again)
		}
	})
}

// jsonOK reports whether the engine would store raw as a payload or
// result: none, or what jobtype.CheckJSON accepts.
func jsonOK(raw []byte) bool {
	return raw == nil || jobtype.CheckJSON("payload", raw, jobtype.DefaultMaxPayloadBytes) == nil
}

// fuzzTime is the time nanos after the Unix epoch, and 0 the zero time:
// no timestamp.
func fuzzTime(nanos int64) time.Time {
	if nanos == 0 {
		return time.Time{}
	}
	return time.Unix(0, nanos).UTC()
}

// rfc3339 reports whether t is within the years protojson writes.
func rfc3339(t time.Time) bool {
	return t.IsZero() || t.Year() >= 1 && t.Year() <= 9999
}

func sameDocument(t *testing.T, a, b []byte) bool {
	t.Helper()
	var da, db any
	if err := json.Unmarshal(a, &da); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal(b, &db); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return reflect.DeepEqual(da, db)
}
