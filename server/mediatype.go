package server

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// explainMediaType answers a POST to a procedure whose Content-Type no
// protocol here speaks as connect-go would (415 Unsupported Media Type,
// with Accept-Post), and with a JSON body in the shape of every other
// error that says what to send: connect-go's answer has no body, and the
// likeliest sender is curl -d without -H 'Content-Type: application/json',
// which sends a form. A type of a protocol here (JSON, protobuf, Connect
// streaming, gRPC, gRPC-Web) goes on to the handlers, which judge the
// rest (a charset other than UTF-8, a codec that is not served).
func explainMediaType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/jobwatch.v1.") || spokenHere(r.Header.Get("Content-Type")) {
			next.ServeHTTP(w, r)
			return
		}
		got := r.Header.Get("Content-Type")
		if got == "" {
			got = "none"
		} else {
			got = fmt.Sprintf("%q", got)
		}
		body, _ := json.Marshal(map[string]string{
			"code": "invalid_argument",
			"message": "Content-Type " + got + " is not one jobwatch reads: send JSON with Content-Type: application/json " +
				"(curl -H 'Content-Type: application/json'), or protobuf, gRPC or gRPC-Web",
		})
		h := w.Header()
		h.Set("Accept-Post", "application/json, application/proto, application/connect+json, application/connect+proto, "+
			"application/grpc, application/grpc+proto, application/grpc+json, application/grpc-web, application/grpc-web+proto, application/grpc-web+json")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnsupportedMediaType)
		_, _ = w.Write(body)
	})
}

// spokenHere reports whether contentType is of a protocol the handlers
// speak: application/ json or proto, connect+, grpc or grpc-web.
func spokenHere(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json", "application/proto":
		return true
	}
	return strings.HasPrefix(mt, "application/connect+") || strings.HasPrefix(mt, "application/grpc")
}
