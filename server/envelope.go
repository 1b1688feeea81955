package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// envelopePrefixBytes is the size of the prefix of every message of the
// gRPC, gRPC-Web and Connect streaming protocols: one flags byte and a
// big-endian uint32 length.
const envelopePrefixBytes = 5

// checkEnvelopes makes a request body that ends inside a message (its
// length prefix promises more bytes than follow, or the prefix itself is
// cut short) a client error: invalid_argument with a message the caller
// can act on. connect-go answers such a body with internal and protocol
// detail ("protocol error: promised 100 bytes in enveloped message"),
// while internal is reserved for bugs; it passes a *connect.Error from the
// body's Read through as it is, which is what the body returns here.
//
// Streaming calls are counted by callInterceptor, which sees the error.
// Unary calls fail before any interceptor runs, so this handler counts
// them in requests_total itself when nothing else did.
func (s *Server) checkEnvelopes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !enveloped(r.Header.Get("Content-Type")) || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body := &envelopeBody{body: r.Body}
		call := &countedCall{}
		r.Body = body
		r = r.WithContext(context.WithValue(r.Context(), countedCallKey{}, call))
		next.ServeHTTP(w, r)
		if body.cut.Load() && !call.counted.Load() {
			s.metrics.requests.WithLabelValues(r.URL.Path, connect.CodeInvalidArgument.String()).Inc()
		}
	})
}

// enveloped reports whether a request of contentType carries its messages
// in envelopes: gRPC, gRPC-Web and Connect streaming. Connect unary
// (application/json, application/proto) does not.
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc") ||
		strings.HasPrefix(contentType, "application/connect+")
}

// countedCallKey marks a request's context with the *countedCall that
// callInterceptor sets once it has counted the call.
type countedCallKey struct{}

type countedCall struct{ counted atomic.Bool }

// markCounted tells checkEnvelopes that the call in ctx was counted.
func markCounted(ctx context.Context) {
	if c, ok := ctx.Value(countedCallKey{}).(*countedCall); ok {
		c.counted.Store(true)
	}
}

// envelopeBody follows the envelope framing of the bytes read through it
// and turns an end of body inside an envelope into invalid_argument.
type envelopeBody struct {
	body io.ReadCloser

	prefix     [envelopePrefixBytes]byte
	prefixRead int    // bytes of the current prefix read so far
	promised   uint32 // the current message's length, once its prefix is complete
	left       uint32 // bytes of the current message still to come
	cut        atomic.Bool
}

func (b *envelopeBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.follow(p[:n])
	if err == io.EOF && (b.prefixRead > 0 || b.left > 0) {
		b.cut.Store(true)
		return n, b.cutError()
	}
	return n, err
}

func (b *envelopeBody) Close() error { return b.body.Close() }

// follow advances the framing over data.
func (b *envelopeBody) follow(data []byte) {
	for len(data) > 0 {
		if b.left > 0 {
			k := uint32(min(len(data), int(min(b.left, 1<<30))))
			b.left -= k
			data = data[k:]
			continue
		}
		k := copy(b.prefix[b.prefixRead:], data)
		b.prefixRead += k
		data = data[k:]
		if b.prefixRead == envelopePrefixBytes {
			b.promised = binary.BigEndian.Uint32(b.prefix[1:])
			b.left = b.promised
			b.prefixRead = 0
		}
	}
}

func (b *envelopeBody) cutError() error {
	if b.prefixRead > 0 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"the request body ended inside a message's %d-byte prefix (flags and length): %d bytes of it arrived",
			envelopePrefixBytes, b.prefixRead))
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
		"the request body ended inside a message: its length prefix promised %d bytes, %d arrived; "+
			"send the length of the message that follows",
		b.promised, b.promised-b.left))
}
