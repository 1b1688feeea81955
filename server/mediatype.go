package server

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// explainMediaType answers a POST to a procedure whose Content-Type its
// protocols do not speak as connect-go would (415 Unsupported Media Type,
// with Accept-Post), and with a JSON body in the shape of every other
// error that says what to send: connect-go's answer has no body, and the
// likeliest senders are curl -d without -H 'Content-Type: application/json',
// which sends a form, and curl with application/json to a stream, which
// the Connect protocol takes as application/connect+json. A type of a
// protocol the procedure speaks (JSON or protobuf for a unary call,
// Connect streaming for a stream, gRPC and gRPC-Web for both) goes on to
// the handlers, which judge the rest (a charset other than UTF-8, a codec
// that is not served).
//
// A procedure called with another method than POST (a GET from a browser's
// address bar, curl without -d) gets connect-go's 405 with Allow: POST,
// and a body in the same shape that says how to call it; an OPTIONS goes
// on (CORS preflights).
func explainMediaType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lowerEncodings(r.Header)
		if r.Method == http.MethodOptions || !strings.HasPrefix(r.URL.Path, "/jobwatch.v1.") {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			explainMethod(w, r, next)
			return
		}
		method, stream := procedure(r.URL.Path)
		if method == "" || spokenHere(r.Header.Get("Content-Type"), stream) {
			next.ServeHTTP(w, r)
			return
		}
		got := r.Header.Get("Content-Type")
		if got == "" {
			got = "none"
		} else {
			got = fmt.Sprintf("%q", got)
		}
		msg := "Content-Type " + got + " is not one jobwatch reads: send JSON with Content-Type: application/json " +
			"(curl -H 'Content-Type: application/json'), or protobuf, gRPC or gRPC-Web"
		mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			// The type may be right; the charset is what is refused.
			msg = "Content-Type " + got + " names the charset " + fmt.Sprintf("%q", cs) + ": jobwatch reads text in UTF-8 alone; " +
				"send the body in UTF-8 with charset=utf-8 or no charset (Content-Type: application/json)"
		}
		if strings.HasPrefix(mt, "application/connect+") {
			msg = "Content-Type " + got + " is for server streams; " + method + " is unary: send JSON with " +
				"Content-Type: application/json (curl -H 'Content-Type: application/json'), or protobuf, gRPC or gRPC-Web"
		}
		accept := "application/json, application/proto"
		if stream {
			msg = "Content-Type " + got + " is not one jobwatch reads for " + method + ", a server stream: send " +
				"Content-Type: application/connect+json with the request behind a 5-byte frame header " +
				"(README.md, \"Try it with curl\", shows one from the shell), or use gRPC or gRPC-Web"
			accept = "application/connect+json, application/connect+proto"
		}
		noteRefusal(r, connect.CodeInvalidArgument, "Content-Type "+got+" is not one "+method+" reads")
		body, _ := json.Marshal(map[string]string{"code": "invalid_argument", "message": msg})
		h := w.Header()
		h.Set("Accept-Post", accept+", application/grpc, application/grpc+proto, application/grpc+json, "+
			"application/grpc-web, application/grpc-web+proto, application/grpc-web+json")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnsupportedMediaType)
		_, _ = w.Write(body)
	})
}

// lowerEncodings names a request's compression in lower case, as
// connect-go looks it up: content codings are case-insensitive (RFC 9110
// 8.4.1), and "Content-Encoding: GZIP" was answered 501 "unknown
// compression". explainMediaType calls it rather than wrapping the
// handlers once more: a parked call's goroutine keeps every frame below
// it, and one more took a parked WatchJob past 8 KiB of stack
// (TestParkedCallsKeepTheirStacksWithin8KiB).
func lowerEncodings(h http.Header) {
	for _, key := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		for i, v := range h[key] {
			if lower := strings.ToLower(v); lower != v {
				h[key][i] = lower
			}
		}
	}
}

// explainMethod answers a call of a procedure with another method than
// POST; a path that names no procedure goes on to next.
func explainMethod(w http.ResponseWriter, r *http.Request, next http.Handler) {
	method, stream := procedure(r.URL.Path)
	if method == "" {
		next.ServeHTTP(w, r)
		return
	}
	how := "POST it JSON with Content-Type: application/json, as curl -H 'Content-Type: application/json' -d '{…}' " + r.URL.Path + " does"
	if stream {
		how = "POST it, a server stream: Content-Type: application/connect+json with the request behind a 5-byte frame header " +
			"(README.md, \"Try it with curl\", shows one from the shell), or use gRPC or gRPC-Web"
	}
	noteRefusal(r, connect.CodeInvalidArgument, method+" is called with POST, not "+methodName(r.Method))
	body, _ := json.Marshal(map[string]string{"code": "invalid_argument",
		"message": method + " is called with POST, not " + methodName(r.Method) + ": " + how})
	h := w.Header()
	h.Set("Allow", http.MethodPost)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusMethodNotAllowed)
	_, _ = w.Write(body)
}

// methodName is an HTTP method as a message may repeat it: a known one,
// or "another method" (any token goes, of any length).
func methodName(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodConnect, http.MethodTrace:
		return m
	}
	return "another method"
}

// procedure returns the name of the method a path such as
// /jobwatch.v1.JobService/WatchJob calls, and whether it is a server
// stream; "" if the path names no method of jobwatch's services.
func procedure(path string) (method string, stream bool) {
	service, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || method == "" || strings.Contains(method, "/") {
		return "", false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service + "." + method))
	if err != nil {
		return "", false
	}
	m, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return "", false
	}
	return method, m.IsStreamingServer()
}

// spokenHere reports whether contentType is one a procedure reads:
// application/json or proto for a unary call (the Connect protocol's
// unary types), application/connect+json or +proto for a stream, and gRPC
// and gRPC-Web with protobuf or JSON for both; a JSON type with a charset
// only if it is UTF-8. Any other type (gRPC-Web's text form, another
// codec, another charset) would get connect-go's bare 415.
func spokenHere(contentType string, stream bool) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	switch mt {
	case "application/grpc", "application/grpc+proto", "application/grpc+json",
		"application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json":
		return true
	case "application/connect+json", "application/connect+proto":
		return stream
	case "application/json", "application/proto":
		return !stream
	}
	return false
}

// unknownProcedure answers an RPC (a POST in one of the protocols) to a
// path that names no procedure here with unimplemented, in the caller's
// protocol, as the gRPC and Connect protocols say: a gRPC client reads a
// plain 404 as a broken transport. A path is a procedure here if it is a
// method of jobwatch's services or one of others. Everything else goes on
// to next (the mux, whose "/" is the page, with its 404 for browsers).
func unknownProcedure(errs *connect.ErrorWriter, others []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !errs.IsSupported(r) {
			next.ServeHTTP(w, r)
			return
		}
		if method, _ := procedure(r.URL.Path); method != "" || slices.Contains(others, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		path := r.URL.Path
		if len(path) > 200 {
			path = path[:200] + "…"
		}
		noteRefusal(r, connect.CodeUnimplemented, "the path names no procedure served here")
		_ = errs.Write(w, r, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("no procedure %q here: the services are "+
			"jobwatch.v1.JobService, WorkerService and QueueService (proto/jobwatch/v1), grpc.health.v1.Health and reflection", path)))
	})
}
