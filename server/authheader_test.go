package server_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// rawAnswer is what a raw request got back: the Connect code (from the
// Connect error body, or grpc-status) and the error's message.
type rawAnswer struct {
	code    connect.Code
	ok      bool // code is meaningful (0 is not a connect.Code)
	message string
}

func (a rawAnswer) String() string {
	if !a.ok {
		return "ok"
	}
	return fmt.Sprintf("%s: %s", a.code, a.message)
}

// rawProtocol is one way to call GetJob with headers written by hand.
type rawProtocol struct {
	name        string
	contentType string
	body        func() []byte
	http2       bool
}

func getJobProto() []byte {
	b, err := proto.Marshal(&jobwatchv1.GetJobRequest{JobId: missingJobID})
	if err != nil {
		panic(err)
	}
	return b
}

var rawProtocols = []rawProtocol{
	{"connect JSON over HTTP/1.1", "application/json", func() []byte { return []byte(`{"jobId":"` + missingJobID + `"}`) }, false},
	{"connect JSON over h2c", "application/json", func() []byte { return []byte(`{"jobId":"` + missingJobID + `"}`) }, true},
	{"gRPC over h2c", "application/grpc", func() []byte { return envelop(getJobProto()) }, true},
	{"gRPC-Web over HTTP/1.1", "application/grpc-web+proto", func() []byte { return envelop(getJobProto()) }, false},
	{"gRPC-Web over h2c", "application/grpc-web+proto", func() []byte { return envelop(getJobProto()) }, true},
}

// call sends GetJob with exactly the Authorization values given, each as
// a header line (HTTP/1.1) or field (HTTP/2) of its own, written byte by
// byte as given, and returns the answer.
func (p rawProtocol) call(t *testing.T, addr string, authorization []string) rawAnswer {
	t.Helper()
	const path = "/jobwatch.v1.JobService/GetJob"
	header := [][2]string{{"content-type", p.contentType}}
	if strings.HasPrefix(p.contentType, "application/grpc") {
		header = append(header, [2]string{"te", "trailers"})
	}
	for _, v := range authorization {
		header = append(header, [2]string{"authorization", v})
	}
	if p.http2 {
		return rawH2Call(t, addr, path, header, p.body())
	}
	return rawH1Call(t, addr, path, header, p.body())
}

func rawH1Call(t *testing.T, addr, path string, header [][2]string, body []byte) rawAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, addr, len(body))
	for _, h := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", h[0], h[1])
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	return decodeAnswer(t, resp.Header, resp.Trailer, respBody)
}

// rawH2Call speaks HTTP/2 with golang.org/x/net/http2's Framer, so the
// header fields reach the server exactly as written.
func rawH2Call(t *testing.T, addr, path string, header [][2]string, body []byte) rawAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr}, {":path", path}}, header...) {
		enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, body); err != nil {
		t.Fatal(err)
	}
	respHeader, trailer := http.Header{}, http.Header{}
	var respBody bytes.Buffer
	for headersSeen := false; ; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("the server reset the stream: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("the server went away: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			dst := respHeader
			if headersSeen {
				dst = trailer
			}
			headersSeen = true
			for _, hf := range f.RegularFields() {
				dst.Add(hf.Name, hf.Value)
			}
			if f.StreamEnded() {
				return decodeAnswer(t, respHeader, trailer, respBody.Bytes())
			}
		case *http2.DataFrame:
			respBody.Write(f.Data())
			if len(f.Data()) > 0 {
				fr.WriteWindowUpdate(0, uint32(len(f.Data())))
			}
			if f.StreamEnded() {
				return decodeAnswer(t, respHeader, trailer, respBody.Bytes())
			}
		}
	}
}

// decodeAnswer reads the code and message of a Connect unary answer, a
// gRPC answer (headers or trailers) or a gRPC-Web one (headers, or the
// trailer frame at the end of the body).
func decodeAnswer(t *testing.T, header, trailer http.Header, body []byte) rawAnswer {
	t.Helper()
	status, message := header.Get("Grpc-Status"), header.Get("Grpc-Message")
	if status == "" {
		status, message = trailer.Get("Grpc-Status"), trailer.Get("Grpc-Message")
	}
	if status == "" && strings.HasPrefix(header.Get("Content-Type"), "application/grpc-web") {
		for rest := body; len(rest) >= 5; {
			n := binary.BigEndian.Uint32(rest[1:5])
			if int(n) > len(rest)-5 {
				break
			}
			if rest[0]&0x80 != 0 {
				tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(rest[5:5+n], "\r\n"...))))
				mh, _ := tp.ReadMIMEHeader()
				status, message = mh.Get("Grpc-Status"), mh.Get("Grpc-Message")
			}
			rest = rest[5+n:]
		}
	}
	if status != "" {
		n, err := strconv.Atoi(status)
		if err != nil {
			t.Fatalf("grpc-status %q", status)
		}
		message, _ = url.PathUnescape(message)
		return rawAnswer{code: connect.Code(n), ok: n != 0, message: message}
	}
	var connectErr struct{ Code, Message string }
	if json.Unmarshal(body, &connectErr) != nil || connectErr.Code == "" {
		return rawAnswer{}
	}
	var c connect.Code
	if err := c.UnmarshalText([]byte(connectErr.Code)); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return rawAnswer{code: c, ok: true, message: connectErr.Message}
}

// TestOneAuthorizationRuleOnEveryProtocol: exactly one Authorization
// header of the form "Bearer <token>" lets a caller in, whether it
// speaks Connect, gRPC or gRPC-Web over HTTP/1.1 or HTTP/2; anything
// else is unauthenticated with a message that says what is wrong, and
// never repeats the header. Every protocol answers each case alike.
func TestOneAuthorizationRuleOnEveryProtocol(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	addr := addrOf(ts.url)
	letIn := rawAnswer{code: connect.CodeNotFound, ok: true}
	tests := []struct {
		name          string
		authorization []string
		want          rawAnswer // message: a part of it
	}{
		{"one Bearer header", []string{"Bearer " + acmeToken}, letIn},
		{"the scheme in lower case", []string{"bearer " + acmeToken}, letIn},
		{"two spaces after Bearer", []string{"Bearer  " + acmeToken}, letIn},
		{"a space before Bearer, on HTTP/2 as on HTTP/1.1", []string{" Bearer " + acmeToken}, letIn},
		{"a space after the token", []string{"Bearer " + acmeToken + " "}, letIn},
		{"no header", nil, rawAnswer{connect.CodeUnauthenticated, true, "a bearer token is required"}},
		{"two headers, the first known", []string{"Bearer " + acmeToken, "Bearer " + globexToken}, rawAnswer{connect.CodeUnauthenticated, true, "the request has 2 Authorization headers; send exactly one"}},
		{"two headers, the second known", []string{"Bearer " + unknownToken, "Bearer " + acmeToken}, rawAnswer{connect.CodeUnauthenticated, true, "the request has 2 Authorization headers; send exactly one"}},
		{"the same header twice", []string{"Bearer " + acmeToken, "Bearer " + acmeToken}, rawAnswer{connect.CodeUnauthenticated, true, "the request has 2 Authorization headers"}},
		{"two tokens in one header", []string{"Bearer " + acmeToken + ", Bearer " + globexToken}, rawAnswer{connect.CodeUnauthenticated, true, "contains a space, a tab or a control character"}},
		{"another scheme", []string{"Basic " + acmeToken}, rawAnswer{connect.CodeUnauthenticated, true, `must read "Bearer <token>"`}},
		{"no scheme", []string{acmeToken}, rawAnswer{connect.CodeUnauthenticated, true, "must read"}},
		{"a tab after Bearer", []string{"Bearer\t" + acmeToken}, rawAnswer{connect.CodeUnauthenticated, true, "must read"}},
		{"Bearer and no token", []string{"Bearer "}, rawAnswer{connect.CodeUnauthenticated, true, `has no token after "Bearer"`}},
		{"Bearer alone", []string{"bearer"}, rawAnswer{connect.CodeUnauthenticated, true, `has no token after "Bearer"`}},
		{"an empty header", []string{""}, rawAnswer{connect.CodeUnauthenticated, true, "must read"}},
		{"a token with a space inside", []string{"Bearer acme client"}, rawAnswer{connect.CodeUnauthenticated, true, "contains a space"}},
		{"an unknown token", []string{"Bearer " + unknownToken}, rawAnswer{connect.CodeUnauthenticated, true, "the token is not known"}},
	}
	for _, tt := range tests {
		var first *rawAnswer
		for _, p := range rawProtocols {
			got := p.call(t, addr, tt.authorization)
			if got.code != tt.want.code || got.ok != tt.want.ok || !strings.Contains(got.message, tt.want.message) {
				t.Errorf("%s, %s: %v, want %v", tt.name, p.name, got, tt.want)
			}
			for _, tok := range []string{acmeToken, globexToken, unknownToken} {
				if strings.Contains(got.message, tok) {
					t.Errorf("%s, %s: the message repeats a token: %q", tt.name, p.name, got.message)
				}
			}
			if first == nil {
				first = &got
			} else if got.message != first.message || got.code != first.code {
				t.Errorf("%s: %s answers %v, %s answered %v", tt.name, p.name, got, rawProtocols[0].name, *first)
			}
		}
	}
}

// A server without tokens checks none: a caller that sends one (testing
// its token set-up against the demo) is served, and the log says once
// that the token was not checked.
func TestAServerWithoutTokensSaysOnceThatItCheckedNone(t *testing.T) {
	ts := startServer(t, serverOptions{})
	const warning = "a call sent an Authorization header, but this server runs without --tokens"
	if status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/ListJobs", "application/json", []byte(`{}`)); status != http.StatusOK || strings.Contains(ts.logs.String(), warning) {
		t.Fatalf("a call without a token = %d %s, logs %q; want OK and no word of tokens", status, body, ts.logs.String())
	}
	for range 3 {
		if status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/ListJobs", "application/json", []byte(`{}`), "Authorization", "Bearer ..."); status != http.StatusOK {
			t.Fatalf("a call with a token = %d %s, want OK", status, body)
		}
	}
	if n := strings.Count(ts.logs.String(), warning); n != 1 {
		t.Fatalf("the log says %d times that the token was not checked, want once: %s", n, ts.logs.String())
	}
}
