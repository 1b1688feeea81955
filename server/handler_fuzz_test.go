package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// fuzzMaxRequestBytes is the request limit of fuzzServer: small, so that
// fuzzed length prefixes cross it often.
const fuzzMaxRequestBytes = 64 << 10

// fuzzServer returns the whole HTTP surface of a server over a real
// SQLite file, with caps short enough that a fuzzed wait, claim or watch
// ends in milliseconds, and the log it writes. It is made once per fuzz
// worker process: jobs that fuzzed submissions create stay, so later
// claims and reports find work.
func fuzzServer(f *testing.F) (http.Handler, *jobs.Engine, *lockedBuffer) {
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := sqlite.OpenWith(filepath.Join(f.TempDir(), "jobwatch.db"), sqlite.Config{Logger: log})
	if err != nil {
		f.Fatalf("open store: %v", err)
	}
	engine := jobs.New(st, jobs.Config{Logger: log})
	srv := New(engine, Config{
		WaitCap:         2 * time.Millisecond,
		ClaimCap:        2 * time.Millisecond,
		StreamLifetime:  5 * time.Millisecond,
		Keepalive:       -1,
		MaxRequestBytes: fuzzMaxRequestBytes,
		Logger:          log,
	})
	f.Cleanup(func() {
		engine.Shutdown()
		st.Close()
	})
	return srv.Handler(), engine, logs
}

// harnessKind is the kind of the jobs FuzzHandlers claims to stand for
// runningJob.
const harnessKind = "fuzz.harness"

// withRunningJob replaces runningJob and itsLease in msg with the id and
// lease of a job just submitted and claimed.
func withRunningJob(t *testing.T, engine *jobs.Engine, msg []byte) []byte {
	if !bytes.Contains(msg, []byte(runningJob)) && !bytes.Contains(msg, []byte(itsLease)) {
		return msg
	}
	ctx := context.Background()
	if _, err := engine.Submit(ctx, jobs.SubmitRequest{Kind: harnessKind}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	j, err := engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "fuzz", Kinds: []string{harnessKind}}, time.Now().Add(time.Second))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(j.ID) != len(runningJob) || len(j.LeaseID) != len(itsLease) {
		t.Fatalf("job %q and lease %q are not as long as their stand-ins: binary requests would break", j.ID, j.LeaseID)
	}
	msg = bytes.ReplaceAll(msg, []byte(runningJob), []byte(j.ID))
	return bytes.ReplaceAll(msg, []byte(itsLease), []byte(j.LeaseID))
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was logged since the last take.
func (b *lockedBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// The ways a request reaches a handler that FuzzHandlers tries, by the
// fuzzer's protocol byte modulo their number.
var fuzzProtocols = []struct {
	name      string
	binary    bool
	unary     string // the Content-Type of a unary call
	stream    string // the Content-Type of a server stream
	enveloped bool   // the message goes in an envelope (gRPC-Web, Connect streams)
}{
	{"connect json", false, "application/json", "application/connect+json", false},
	{"connect proto", true, "application/proto", "application/connect+proto", false},
	{"grpc-web proto", true, "application/grpc-web+proto", "application/grpc-web+proto", true},
	{"grpc-web json", false, "application/grpc-web+json", "application/grpc-web+json", true},
	{"grpc proto", true, "application/grpc", "application/grpc", true},
	{"grpc json", false, "application/grpc+json", "application/grpc+json", true},
}

// envelope frames msg as one uncompressed message of a gRPC-Web or
// Connect stream.
func envelope(msg []byte) []byte {
	out := make([]byte, envelopePrefixBytes, envelopePrefixBytes+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// failedInside matches the answers of a server that failed, not the
// caller: internal or unknown, in Connect's JSON and in the gRPC (and
// gRPC-Web) status, as a header or a trailer.
var failedInside = regexp.MustCompile(`"code":"(internal|unknown)"|(?i)grpc-status: ?(13|2)\r`)

// FuzzHandlers sends arbitrary request messages to every RPC through the
// server's whole HTTP surface, over Connect (JSON and binary, unary and
// streams), gRPC and gRPC-Web (binary and JSON), with a real engine over a real
// SQLite file behind it: decoding, the handlers' checks and the engine's.
// Requests that name runningJob and itsLease get a job RUNNING under that
// lease, so a worker's reports reach the store and come back.
// Messages go uncompressed or gzipped. Whatever arrives, the answer is the caller's fault or a success: never
// a 5xx, never internal or unknown, and no handler panics.
func FuzzHandlers(f *testing.F) {
	methods := rpcMethods()
	for i, md := range methods {
		for k, body := range seedRequests[md.Name()] {
			msg := newInput(f, md)
			bin := []byte(nil)
			if err := (jsonCodec{"json"}).Unmarshal([]byte(body), msg); err == nil {
				bin, _ = protoCodec{}.Marshal(msg)
			}
			for p, proto := range fuzzProtocols {
				seed := []byte(body)
				if proto.binary {
					seed = bin
				}
				if seed == nil {
					continue
				}
				f.Add(uint8(i), uint8(p), seed)
				if k == 0 {
					f.Add(uint8(i), uint8(p)|128, seed) // gzipped
				}
			}
		}
	}
	handler, engine, logs := fuzzServer(f)
	f.Fuzz(func(t *testing.T, method, protocol uint8, msg []byte) {
		md := methods[int(method)%len(methods)]
		msg = withRunningJob(t, engine, msg)
		proto := fuzzProtocols[int(protocol&127)%len(fuzzProtocols)]
		contentType, body := proto.unary, msg
		if md.IsStreamingServer() {
			contentType = proto.stream
		}
		// The high bit of protocol sends the message gzipped.
		encoding := ""
		if protocol >= 128 {
			encoding, body = "gzip", gzipped(t, msg)
		}
		if proto.enveloped || md.IsStreamingServer() {
			body = envelope(body)
			if encoding != "" {
				body[0] = flagCompressed
			}
		}
		status, answer := call(handler, md, contentType, encoding, body)
		checkAnswer(t, md, proto.name, status, answer, logs)
	})
}

// gzipped returns msg compressed with gzip.
func gzipped(t *testing.T, msg []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// call POSTs body to md's path and returns the status and the whole
// answer: headers, body and trailers as text. A non-empty encoding names
// the compression of the request's messages, in the header of its
// protocol.
func call(handler http.Handler, md protoreflect.MethodDescriptor, contentType, encoding string, body []byte) (int, []byte) {
	path := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, path, bytes.NewReader(body))
	req.Host = "localhost" // httptest's example.com fails the Host check, which would answer everything
	req.Header.Set("Content-Type", contentType)
	if strings.HasPrefix(contentType, "application/grpc") && !strings.HasPrefix(contentType, "application/grpc-web") {
		req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0 // gRPC is HTTP/2 only
		req.Header.Set("Te", "trailers")
	}
	if encoding != "" {
		switch {
		case strings.HasPrefix(contentType, "application/grpc"):
			req.Header.Set("Grpc-Encoding", encoding)
		case strings.HasPrefix(contentType, "application/connect+"):
			req.Header.Set("Connect-Content-Encoding", encoding)
		default:
			req.Header.Set("Content-Encoding", encoding)
		}
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	res := rec.Result()
	var answer bytes.Buffer
	_ = res.Header.Write(&answer)
	out, _ := io.ReadAll(res.Body)
	answer.Write(uncompressed(res.Header, out))
	_ = res.Trailer.Write(&answer)
	return res.StatusCode, answer.Bytes()
}

// uncompressed returns an answer's body with what the server gzipped
// (the whole body of a unary Connect answer, flagged messages of the
// others) uncompressed, so that its error can be read.
func uncompressed(h http.Header, body []byte) []byte {
	if h.Get("Grpc-Encoding") != "gzip" && h.Get("Connect-Content-Encoding") != "gzip" && h.Get("Content-Encoding") != "gzip" {
		return body
	}
	if !enveloped(h.Get("Content-Type")) {
		return gunzipped(body)
	}
	var out []byte
	for len(body) >= envelopePrefixBytes {
		flags, n := body[0], binary.BigEndian.Uint32(body[1:envelopePrefixBytes])
		if uint64(len(body)-envelopePrefixBytes) < uint64(n) {
			break
		}
		msg := body[envelopePrefixBytes : envelopePrefixBytes+int(n)]
		if flags&flagCompressed != 0 {
			msg = gunzipped(msg)
		}
		out = append(append(out, flags&^flagCompressed), 0, 0, 0, 0)
		binary.BigEndian.PutUint32(out[len(out)-4:], uint32(len(msg)))
		out = append(out, msg...)
		body = body[envelopePrefixBytes+int(n):]
	}
	return append(out, body...)
}

// gunzipped returns b uncompressed, or as it is if it is not gzip.
func gunzipped(b []byte) []byte {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return b
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return b
	}
	return out
}

func checkAnswer(t *testing.T, md protoreflect.MethodDescriptor, protocol string, status int, answer []byte, logs *lockedBuffer) {
	t.Helper()
	if status >= 500 || failedInside.Match(answer) {
		t.Fatalf("%s over %s: the server failed (status %d):\n%s\nlog:\n%s", md.Name(), protocol, status, answer, logs.take())
	}
	if log := logs.take(); bytes.Contains([]byte(log), []byte("panic")) {
		t.Fatalf("%s over %s: a handler panicked:\n%s", md.Name(), protocol, log)
	}
}

// allocatedDuring returns the bytes the process allocated while fn ran.
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
