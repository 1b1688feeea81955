package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

const listJobsPath = "/jobwatch.v1.JobService/ListJobs"

// wireSlack is what a response may add to the bytes a page counts: the
// envelope and the per-job encoding beyond jobtype.SizeOverhead.
const wireSlack = 16 << 10

// largeJobs submits n jobs of about 200 KB of payload each to tenant over
// the wire and returns their ids newest first, as a list orders them.
func largeJobs(t *testing.T, c clients, tenant string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		j := submit(t, c, &jobwatchv1.SubmitJobRequest{
			Tenant: tenant, Kind: "resize",
			Payload: mustValue(t, map[string]any{"n": i, "pad": strings.Repeat("x", 200_000)}),
		})
		ids = append([]string{j.GetId()}, ids...)
	}
	return ids
}

func TestListJobsOverLargePayloadsAnswersPagesBoundedInBytes(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	want := largeJobs(t, c, "amp", 16)
	ctx := ctxTimeout(t, 20*time.Second)

	t.Run("the full view pages by bytes, and its tokens lead to every job once", func(t *testing.T) {
		req := &jobwatchv1.ListJobsRequest{Tenant: "amp", PageSize: 500, View: jobwatchv1.JobView_JOB_VIEW_FULL}
		var got []string
		pages := 0
		for {
			resp, err := c.jobs.ListJobs(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if size := proto.Size(resp); size > jobs.MaxPageBytes+wireSlack {
				t.Fatalf("page %d: %d jobs in %d bytes, over the bound %d", pages, len(resp.GetJobs()), size, jobs.MaxPageBytes)
			}
			for _, j := range resp.GetJobs() {
				if len(j.GetPayload().GetStructValue().GetFields()["pad"].GetStringValue()) != 200_000 {
					t.Fatalf("job %s of the full view lacks its payload", j.GetId())
				}
				got = append(got, j.GetId())
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if !slices.Equal(got, want) {
			t.Errorf("paged ids = %v, want %v: every job once, newest first", got, want)
		}
		if pages < 3 {
			t.Errorf("16 jobs of 200 KB in %d pages, want at least 3", pages)
		}
	})

	t.Run("the issue's 35-byte request answers one small page of summaries", func(t *testing.T) {
		status, body := rawPost(t, ts.url+listJobsPath, "application/json", []byte(`{"tenant":"amp","pageSize":500}`))
		if status != http.StatusOK {
			t.Fatalf("ListJobs = %d %s", status, body)
		}
		var resp struct {
			Jobs []struct {
				ID      string          `json:"id"`
				Payload json.RawMessage `json:"payload"`
			}
			NextPageToken string
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Jobs) != len(want) || resp.NextPageToken != "" {
			t.Fatalf("ListJobs = %d jobs, next %q; want all %d on one page", len(resp.Jobs), resp.NextPageToken, len(want))
		}
		for _, j := range resp.Jobs {
			if j.Payload != nil {
				t.Fatalf("job %s of a default list carries its payload", j.ID)
			}
		}
		if len(body) > 16*1024 {
			t.Errorf("a list of 16 summaries took %d bytes", len(body))
		}
	})

	t.Run("a full page in JSON stays within the bound", func(t *testing.T) {
		status, body := rawPost(t, ts.url+listJobsPath, "application/json", []byte(`{"tenant":"amp","pageSize":500,"view":"JOB_VIEW_FULL"}`))
		if status != http.StatusOK || !strings.Contains(body, `"nextPageToken"`) {
			t.Fatalf("ListJobs = %d, %d bytes; want OK with a next page", status, len(body))
		}
		if len(body) > jobs.MaxPageBytes+wireSlack {
			t.Errorf("a full page is %d bytes of JSON, over the bound %d", len(body), jobs.MaxPageBytes)
		}
	})

	t.Run("a view the API does not define is invalid_argument", func(t *testing.T) {
		_, err := c.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "amp", View: 7})
		wantCode(t, err, connect.CodeInvalidArgument)
		if !strings.Contains(err.Error(), "view") {
			t.Errorf("error %v does not name the field", err)
		}
	})
}

func TestListJobsOfNoTenantListsTheDefaultTenant(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	mine := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k", Tenant: "acme"})
	status, body := rawPost(t, ts.url+listJobsPath, "application/json", []byte(`{}`))
	var resp struct {
		Jobs []struct {
			ID     string `json:"id"`
			Tenant string `json:"tenant"`
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); status != http.StatusOK || err != nil {
		t.Fatalf("ListJobs {} = %d %s", status, body)
	}
	if len(resp.Jobs) != 1 || resp.Jobs[0].ID != mine.GetId() || resp.Jobs[0].Tenant != "default" {
		t.Errorf("ListJobs {} = %s, want only the default tenant's job %s", body, mine.GetId())
	}
}

func TestWatchJobsFirstMessagesAreBoundedInBytes(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	want := largeJobs(t, c, "amp", 12)

	for _, view := range []jobwatchv1.JobView{jobwatchv1.JobView_JOB_VIEW_FULL, jobwatchv1.JobView_JOB_VIEW_UNSPECIFIED} {
		t.Run(view.String(), func(t *testing.T) {
			full := view == jobwatchv1.JobView_JOB_VIEW_FULL
			ctx, disconnect := context.WithTimeout(context.Background(), 20*time.Second)
			defer func() {
				disconnect()
				ts.waitForGauge("jobwatch_open_watches", 0)
			}()
			stream, err := c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Tenant: "amp", PageSize: 500, View: view})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			messages := 0
			for stream.Receive() {
				msg := stream.Msg()
				messages++
				if size := proto.Size(msg); size > jobs.MaxPageBytes+wireSlack {
					t.Fatalf("message %d: %d jobs in %d bytes, over the bound %d", messages, len(msg.GetJobs()), size, jobs.MaxPageBytes)
				}
				for _, j := range msg.GetJobs() {
					if full != (j.GetPayload() != nil) {
						t.Fatalf("job %s: payload %v in view %v", j.GetId(), j.GetPayload() != nil, view)
					}
					got = append(got, j.GetId())
				}
				if msg.GetResumeToken() != "" {
					break
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("first messages hold %v, want %v", got, want)
			}
			if full && messages < 2 || !full && messages != 1 {
				t.Errorf("12 jobs of 200 KB came in %d messages in view %v", messages, view)
			}
		})
	}
}
