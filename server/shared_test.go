package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

func testJob(payloadBytes int) *jobtype.Job {
	payload, _ := json.Marshal(map[string]any{"rows": 11, "note": strings.Repeat("x", payloadBytes)})
	now := time.Now().UTC()
	return &jobtype.Job{
		ID: "01JOBIDXXXXXXXXXXXXXXXXXXX", Tenant: "acme", Kind: "import", Queue: "default",
		State: jobtype.Succeeded, Version: 7, Percent: 100, Step: "batch 11 of 11",
		Payload: payload, Result: json.RawMessage(`{"imported":11,"skipped":0}`),
		Attempt: 1, MaxAttempts: 3, CreatedAt: now, StartedAt: now, UpdatedAt: now, FinishedAt: now,
		WorkerID: "worker-1",
	}
}

// The codecs answer a shared message with what they write for the same
// message unshared (connect-go's defaults: protojson, byte for byte, and
// proto, whose map order is not stable from one marshal to the next), and
// forget it once it is garbage.
func TestSharedBytesAreTheCodecsOwn(t *testing.T) {
	var shared sharedResponses
	pj, err := wire.Job(testJob(100))
	if err != nil {
		t.Fatal(err)
	}
	for format, c := range []codec{jsonCodec{"json"}, protoCodec{}} {
		sc := sharingCodec{c, wireFormat(format), &shared}
		msg := &jobwatchv1.WaitJobResponse{Job: pj}
		share(&shared, msg)
		var first []byte
		for range 3 {
			got, err := sc.MarshalAppend([]byte("prefix"), msg)
			if err != nil {
				t.Fatal(err)
			}
			b, ok := bytes.CutPrefix(got, []byte("prefix"))
			if !ok || (first != nil && !bytes.Equal(b, first)) {
				t.Fatalf("%v: shared bytes changed between calls or lost the prefix: %q", c.Name(), got)
			}
			first = b
		}
		if n := shared.encodes[format].Load(); n != 1 {
			t.Fatalf("%v: encoded %d times, want 1", c.Name(), n)
		}
		unshared, err := sc.Marshal(&jobwatchv1.WaitJobResponse{Job: pj})
		if err != nil {
			t.Fatal(err)
		}
		if n := shared.encodes[format].Load(); n != 1 {
			t.Fatalf("%v: an unshared message counted as a shared encoding", c.Name())
		}
		if wireFormat(format) == formatJSON {
			want, _ := protojson.Marshal(msg)
			if !bytes.Equal(first, want) || !bytes.Equal(unshared, want) {
				t.Fatalf("json: shared %q, unshared %q, want protojson's %q", first, unshared, want)
			}
			continue
		}
		for _, b := range [][]byte{first, unshared} {
			var back jobwatchv1.WaitJobResponse
			if err := proto.Unmarshal(b, &back); err != nil || !proto.Equal(&back, msg) {
				t.Fatalf("proto: bytes decode to %v (%v), want %v", &back, err, msg)
			}
		}
	}
	waitForgotten(t, &shared)
}

// waitForgotten waits until every entry of r is forgotten, as each is
// once its message is garbage.
func waitForgotten(t *testing.T, r *sharedResponses) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for entries(r) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d shared entries left after their messages became garbage", entries(r))
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func entries(r *sharedResponses) int {
	n := 0
	r.entries.Range(func(any, any) bool { n++; return true })
	return n
}

// BenchmarkEncodeSnapshot answers 1,000 calls with one job, as one publish
// does when it wakes 1,000 WaitJob calls: "per-call" converts and encodes
// for each call (what the server did before encode-once), "shared"
// converts once and lets the codec copy the bytes encoded once.
//
//	go test ./server/ -run '^$' -bench BenchmarkEncodeSnapshot -count 10 | benchstat -col /path -
func BenchmarkEncodeSnapshot(b *testing.B) {
	const calls = 1000
	for _, size := range []int{100, 4096} {
		j := testJob(size)
		for _, f := range []struct {
			name string
			c    codec
		}{{"json", jsonCodec{"json"}}, {"proto", protoCodec{}}} {
			format := formatJSON
			if f.name == "proto" {
				format = formatProto
			}
			b.Run(fmt.Sprintf("payload=%d/codec=%s/path=per-call", size, f.name), func(b *testing.B) {
				buf := make([]byte, 0, 64<<10)
				for range b.N {
					for range calls {
						pj, err := wire.Job(j)
						if err != nil {
							b.Fatal(err)
						}
						if _, err := f.c.MarshalAppend(buf[:0], &jobwatchv1.WaitJobResponse{Job: pj}); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			b.Run(fmt.Sprintf("payload=%d/codec=%s/path=shared", size, f.name), func(b *testing.B) {
				var shared sharedResponses
				sc := sharingCodec{f.c, format, &shared}
				buf := make([]byte, 0, 64<<10)
				for range b.N {
					pj, err := wire.Job(j)
					if err != nil {
						b.Fatal(err)
					}
					msg := &jobwatchv1.WaitJobResponse{Job: pj}
					share(&shared, msg)
					for range calls {
						if _, err := sc.MarshalAppend(buf[:0], msg); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// A WaitJobs answer built from its parts (prebuilt) is forgotten once it
// is garbage, as a shared one is: its entry held it through the closure
// that builds it, so it never was, and every WaitJobs answer stayed in
// memory (1.2 GB of them, idle, after a minute of WaitJobs of 1,000
// ended jobs: an outside probe; a server was killed for its memory).
func TestAPrebuiltAnswerIsForgottenOnceGarbage(t *testing.T) {
	var shared sharedResponses
	for format, c := range []codec{jsonCodec{"json"}, protoCodec{}} {
		sc := sharingCodec{c, wireFormat(format), &shared}
		a := newJobsAnswer(context.Background())
		j := testJob(100)
		a.add(j)
		resp, err := a.response(&shared, jobs.WaitManyResult{Ended: []*jobtype.Job{j}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := sc.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var back jobwatchv1.WaitJobsResponse
		if wireFormat(format) == formatJSON {
			err = protojson.Unmarshal(b, &back)
		} else {
			err = proto.Unmarshal(b, &back)
		}
		if err != nil || len(back.GetJobs()) != 1 || back.GetJobs()[0].GetId() != j.ID {
			t.Fatalf("%v: the answer decodes to %v (%v), want job %s", c.Name(), &back, err, j.ID)
		}
	}
	waitForgotten(t, &shared)
}
