package server_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// gzipBomb is a gzip stream of 64 MiB of spaces, about 64 KB long.
var gzipBomb = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	for range 64 {
		zw.Write(chunk)
	}
	zw.Close()
	return buf.Bytes()
})

// A compressed request is refused as soon as it inflates past the
// request size limit, with resource_exhausted and a message that names
// the limit, over every protocol: connect-go inflated a 509 KB bomb to
// 524 MB (into io.Discard) just to report its size.
func TestAGzipBombIsRefusedOnceItInflatesPastTheLimit(t *testing.T) {
	const limit = 256 << 10
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: limit}})
	bomb := gzipBomb()
	const submitPath = "/jobwatch.v1.JobService/SubmitJob"
	for _, tt := range []struct {
		name        string
		hc          *http.Client
		path        string
		contentType string
		header      []string
		body        []byte
	}{
		{"Connect unary JSON", ts.http1Client(), submitPath, "application/json", []string{"Content-Encoding", "gzip"}, bomb},
		{"Connect unary proto", ts.h2cClient(), submitPath, "application/proto", []string{"Content-Encoding", "gzip"}, bomb},
		{"Connect streaming", ts.h2cClient(), watchJobPath, "application/connect+json", []string{"Connect-Content-Encoding", "gzip"}, gzipFlagged(bomb)},
		{"gRPC", ts.h2cClient(), submitPath, "application/grpc", []string{"Grpc-Encoding", "gzip", "Te", "trailers"}, gzipFlagged(bomb)},
		{"gRPC-Web", ts.http1Client(), submitPath, "application/grpc-web+proto", []string{"Grpc-Encoding", "gzip"}, gzipFlagged(bomb)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := server.InflatedRequestBytes(ts.srv)
			status, answer := postAnswer(t, tt.hc, ts.url+tt.path, tt.contentType, tt.header, tt.body)
			if !strings.Contains(answer, "resource_exhausted") && !strings.Contains(answer, " 8 ") && !strings.Contains(answer, "grpc-status:8") {
				t.Errorf("answer %d %q, want resource_exhausted", status, answer)
			}
			if !strings.Contains(answer, "max-request-bytes") {
				t.Errorf("answer %q does not name --max-request-bytes", answer)
			}
			inflated := server.InflatedRequestBytes(ts.srv) - before
			t.Logf("a %d KB bomb of %d MiB: %d bytes inflated to refuse it", len(bomb)/1000, 64, inflated)
			if inflated > 2*limit {
				t.Errorf("inflated %d bytes of a %d-byte bomb to refuse it, want at most %d", inflated, 64<<20, 2*limit)
			}
		})
	}
}

// An answer shared by the calls one publish woke is compressed once per
// wire format, whoever accepts gzip (gRPC, Connect, gRPC-Web): 2,000 gRPC
// waiters accepting gzip on a 250 KB result were compressed 2,000 times.
func TestASharedAnswerIsCompressedOncePerFormat(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "fan"})
	lease := claim(t, c, "fan")
	result := hexText(bigPayloadChars)
	protocols := []struct {
		name string
		c    clients
	}{
		{"gRPC", ts.clients(ts.h2cClient(), connect.WithGRPC(), connect.WithSendGzip())},
		{"Connect proto", ts.clients(ts.h2cClient(), connect.WithSendGzip())},
		{"Connect JSON", ts.clients(ts.http1Client(), connect.WithProtoJSON(), connect.WithSendGzip())},
		{"gRPC-Web", ts.clients(ts.h2cClient(), connect.WithGRPCWeb(), connect.WithSendGzip())},
	}
	const each = 10
	errs := make(chan error, len(protocols)*each)
	var wg sync.WaitGroup
	for _, p := range protocols {
		for range each {
			wg.Go(func() {
				resp, err := p.c.jobs.WaitJob(ctxTimeout(t, time.Minute), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				switch {
				case err != nil:
					errs <- fmt.Errorf("%s: %w", p.name, err)
				case resp.GetJob().GetResult().GetStringValue() != result:
					errs <- fmt.Errorf("%s: the result differs", p.name)
				}
			})
		}
	}
	ts.waitForGauge("jobwatch_parked_waits", float64(len(protocols)*each))
	complete(t, c, lease, mustValue(t, result))
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitForBudgetEmpty(t, ts)
	// One JSON encoding and one protobuf encoding, each compressed once.
	if got := server.SharedCompressions(ts.srv); got != 2 {
		t.Errorf("shared answers compressed %d times for %d calls in 2 formats, want 2", got, len(protocols)*each)
	}
}

// hexText is n characters of hex digits, about as compressible as the
// JSON of real results.
func hexText(n int) string {
	var b strings.Builder
	sum := sha256.Sum256(nil)
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}

// Health and reflection have no token and handlers of their own: a gzip
// bomb sent to them is refused as well, once it inflates past the limit.
func TestAGzipBombToHealthIsRefusedOnceItInflatesPastTheLimit(t *testing.T) {
	const limit = 256 << 10
	ts := startServer(t, serverOptions{config: server.Config{MaxRequestBytes: limit}})
	bomb := gzipBomb()
	const checkPath = "/grpc.health.v1.Health/Check"
	envelope := gzipFlagged(bomb)
	for _, tt := range []compressedPost{
		{"gRPC", ts.h2cClient(), "application/grpc", []string{"Grpc-Encoding", "gzip", "Te", "trailers"}, envelope},
		{"Connect unary", ts.http1Client(), "application/proto", []string{"Content-Encoding", "gzip"}, bomb},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := server.InflatedRequestBytes(ts.srv)
			req, _ := http.NewRequest(http.MethodPost, ts.url+checkPath, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			resp, err := tt.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answer := string(b) + " " + resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Message")
			if !strings.Contains(answer, "max-request-bytes") {
				t.Errorf("answer %d %q, want resource_exhausted naming --max-request-bytes", resp.StatusCode, answer)
			}
			if inflated := server.InflatedRequestBytes(ts.srv) - before; inflated == 0 || inflated > 2*limit {
				t.Errorf("inflated %d bytes through the limited gzip, want between 1 and %d", inflated, 2*limit)
			}
		})
	}
}

// A message the request calls gzip that is not (a proxy that gunzipped
// it and left the header, a client that set the header by mistake) is
// invalid_argument in words that say where to look, not gzip's own
// ("unexpected EOF"), on each protocol.
func TestAMessageThatIsNotGzipIsNamedSo(t *testing.T) {
	ts := startServer(t, serverOptions{})
	plain := []byte(`{"kind":"k"}`)
	const submitPath = "/jobwatch.v1.JobService/SubmitJob"
	for _, tt := range []compressedPost{
		{"Connect unary JSON", ts.http1Client(), "application/json", []string{"Content-Encoding", "gzip"}, plain},
		{"gRPC", ts.h2cClient(), "application/grpc+json", []string{"Grpc-Encoding", "gzip", "Te", "trailers"}, gzipFlagged(plain)},
		{"gzip cut short", ts.http1Client(), "application/json", []string{"Content-Encoding", "gzip"}, cutShort(plain)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, answer := postAnswer(t, tt.hc, ts.url+submitPath, tt.contentType, tt.header, tt.body)
			if !strings.Contains(answer, "is not whole gzip data, though the request says it is gzip") || strings.Contains(answer, "unexpected EOF") {
				t.Errorf("answer %d %q, want it to say the message is not gzip", status, answer)
			}
			// In the server's words alone, not after connect-go's.
			if strings.Contains(answer, "decompress") || !strings.Contains(answer, "invalid_argument") && !strings.Contains(answer, " 3 ") {
				t.Errorf("answer %d %q, want invalid_argument without connect-go's prefix", status, answer)
			}
		})
	}
}

// A compressedPost is a request posted as it is, by hand, with its
// compression named in headers.
type compressedPost struct {
	name        string
	hc          *http.Client
	contentType string
	header      []string
	body        []byte
}

// cutShort is msg gzipped, less its last bytes: a whole header and a
// stream that ends too soon.
func cutShort(msg []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(msg)
	zw.Close()
	return buf.Bytes()[:buf.Len()-6]
}

// postAnswer posts body to path with contentType and the header pairs,
// and returns the HTTP status and the answer as one text: the body, and
// the gRPC status and message from the headers and trailers (gRPC-Web's
// trailers are in the body).
func postAnswer(t *testing.T, hc *http.Client, url, contentType string, header []string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b) + " " + resp.Header.Get("Grpc-Status") + " " + resp.Header.Get("Grpc-Message") +
		" " + resp.Trailer.Get("Grpc-Status") + " " + resp.Trailer.Get("Grpc-Message")
}

// gzipFlagged frames msg as one message of a gRPC, gRPC-Web or Connect
// stream whose flag says it is compressed.
func gzipFlagged(msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	b[0] = 1
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// Content codings are case-insensitive: a request that says GZIP (or
// Gzip) is read as gzip, on the Connect protocol and on gRPC. It was
// answered 501 "unknown compression".
func TestACompressionNamedInCapitalsIsRead(t *testing.T) {
	ts := startServer(t, serverOptions{})
	const submitPath = "/jobwatch.v1.JobService/SubmitJob"
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(`{"kind":"capitals"}`))
	zw.Close()
	for _, tt := range []compressedPost{
		{"Connect unary JSON", ts.http1Client(), "application/json", []string{"Content-Encoding", "GZIP"}, zipped.Bytes()},
		{"gRPC", ts.h2cClient(), "application/grpc+json", []string{"Grpc-Encoding", "Gzip", "Te", "trailers"}, gzipFlagged(zipped.Bytes())},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, answer := postAnswer(t, tt.hc, ts.url+submitPath, tt.contentType, tt.header, tt.body)
			if status != http.StatusOK || !strings.Contains(answer, "capitals") {
				t.Errorf("answer %d %q, want the job submitted", status, answer)
			}
		})
	}
}
