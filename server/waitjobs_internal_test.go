package server

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// A WaitJobs answer written from parts decodes, in either format, to the
// message it stands for: whether its jobs were encoded while the call
// waited (in the call's format or the other) or only at the end.
func TestWaitJobsAnswersWrittenFromPartsDecodeAsTheirMessage(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	job := func(id string) jobtype.Job {
		return jobtype.Job{ID: id, Tenant: "default", Kind: "thumb", Queue: "default", State: jobtype.Succeeded,
			Version: 3, CreatedAt: at, UpdatedAt: at, FinishedAt: at, RunAt: at, Batch: "b"}
	}
	for _, format := range []wireFormat{formatProto, formatJSON} {
		for _, writeAs := range []sharingCodec{{protoCodec{}, formatProto, nil}, {jsonCodec{"json"}, formatJSON, nil}} {
			t.Run(format.String()+" parts, written as "+writeAs.format.String(), func(t *testing.T) {
				shared := &sharedResponses{}
				writeAs.shared = shared
				a := &jobsAnswer{format: format, codec: protoCodec{}, parts: map[string]answerPart{}}
				if format == formatJSON {
					a.codec = jsonCodec{"json"}
				}
				early, late, stale := job("j_early"), job("j_late"), job("j_stale")
				a.add(&early)
				a.add(&stale)
				stale.Version++ // ended again after a retry: its part is not this version
				resp, err := a.response(shared, jobs.WaitManyResult{Ended: []*jobtype.Job{&early, &late, &stale}, Unfinished: []string{"j_open"}})
				if err != nil {
					t.Fatal(err)
				}
				b, err := writeAs.MarshalAppend([]byte("kept"), resp)
				if err != nil {
					t.Fatal(err)
				}
				if string(b[:4]) != "kept" {
					t.Fatalf("MarshalAppend lost what dst held: %q", b[:4])
				}
				got := &jobwatchv1.WaitJobsResponse{}
				if err := writeAs.codec.Unmarshal(b[4:], got); err != nil {
					t.Fatalf("the answer does not decode: %v\n%s", err, b[4:])
				}
				if !proto.Equal(got, resp) {
					t.Fatalf("decoded %v, want %v", got, resp)
				}
				if got.GetJobs()[2].GetVersion() != 4 {
					t.Fatalf("a job's stale part was written: version %d", got.GetJobs()[2].GetVersion())
				}
			})
		}
	}
}

// An answer with no job ended, or none unfinished, leaves the empty list
// out, as protojson does, and decodes.
func TestWaitJobsAnswersWithAnEmptyList(t *testing.T) {
	for _, res := range []jobs.WaitManyResult{{Unfinished: []string{"j_a", "j_b"}}, {Ended: []*jobtype.Job{{ID: "j_a", State: jobtype.Failed}}}} {
		shared := &sharedResponses{}
		a := &jobsAnswer{format: formatJSON, codec: jsonCodec{"json"}, parts: map[string]answerPart{}}
		resp, err := a.response(shared, res)
		if err != nil {
			t.Fatal(err)
		}
		c := sharingCodec{jsonCodec{"json"}, formatJSON, shared}
		b, err := c.MarshalAppend(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		got := &jobwatchv1.WaitJobsResponse{}
		if err := c.Unmarshal(b, got); err != nil || !proto.Equal(got, resp) {
			t.Fatalf("%s decoded to %v, %v; want %v", b, got, err, resp)
		}
	}
}

// BenchmarkWaitJobsAnswer is what a WaitJobs of 1,000 summaries costs
// after its last job ends: built at the end as it used to be (every job
// converted and encoded), from parts made while it waited, then what
// compressing it would cost (WaitJobs answers are not compressed,
// waitJobsHandler), and the caller's decoding.
func BenchmarkWaitJobsAnswer(b *testing.B) {
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	var ended []jobtype.Job
	for i := range 1000 {
		ended = append(ended, jobtype.Job{ID: fmt.Sprintf("j_06h3atnxcwvgb875yedevp%04d", i), Tenant: "default", Kind: "thumbnail",
			Queue: "default", State: jobtype.Succeeded, Version: 3, Percent: 100, Attempt: 1, MaxAttempts: 1, WorkerID: "worker-1",
			CreatedAt: at, StartedAt: at, UpdatedAt: at, FinishedAt: at, RunAt: at, Batch: "thumbs"})
	}
	res := jobs.WaitManyResult{}
	for i := range ended {
		res.Ended = append(res.Ended, &ended[i])
	}
	codec := sharingCodec{protoCodec{}, formatProto, &sharedResponses{}}
	var encoded []byte
	b.Run("converted and encoded at the end", func(b *testing.B) {
		for b.Loop() {
			pjs, err := wire.Jobs(ended)
			if err != nil {
				b.Fatal(err)
			}
			encoded, err = codec.MarshalAppend(nil, &jobwatchv1.WaitJobsResponse{Jobs: pjs})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("written from parts made while waiting", func(b *testing.B) {
		a := &jobsAnswer{format: formatProto, codec: protoCodec{}, parts: map[string]answerPart{}}
		for _, j := range res.Ended {
			a.add(j)
		}
		for b.Loop() {
			resp, err := a.response(codec.shared, res)
			if err != nil {
				b.Fatal(err)
			}
			if encoded, err = codec.MarshalAppend(nil, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, level := range []int{gzip.DefaultCompression, gzip.BestSpeed} {
		b.Run(fmt.Sprintf("gzip level %d", level), func(b *testing.B) {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, level)
			for b.Loop() {
				buf.Reset()
				zw.Reset(&buf)
				zw.Write(encoded)
				zw.Close()
			}
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
	b.Run("decoded by the caller", func(b *testing.B) {
		for b.Loop() {
			if err := proto.Unmarshal(encoded, &jobwatchv1.WaitJobsResponse{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(encoded)), "bytes")
	})
}

// A parked call answers a tenth of its caller's time ahead of the
// deadline, at most the configured margin, and at least 10 ms (or half)
// of a short one: over gRPC-Web a 20 ms deadline's 2 ms was too little.
func TestAnswerMarginLeavesAShortDeadlineTimeToAnswer(t *testing.T) {
	for _, tt := range []struct{ left, limit, want time.Duration }{
		{5 * time.Second, time.Second, 500 * time.Millisecond},
		{5 * time.Second, 200 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 200 * time.Millisecond, 100 * time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond, 10 * time.Millisecond},
		{20 * time.Millisecond, 200 * time.Millisecond, 10 * time.Millisecond},
		{8 * time.Millisecond, 200 * time.Millisecond, 4 * time.Millisecond},
		{20 * time.Millisecond, 0, 0},
		{-time.Millisecond, 200 * time.Millisecond, 0},
	} {
		if got := answerMargin(tt.left, tt.limit); got != tt.want {
			t.Errorf("answerMargin(%v, %v) = %v, want %v", tt.left, tt.limit, got, tt.want)
		}
	}
}
