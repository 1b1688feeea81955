package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// envelopePrefixBytes is the size of the prefix of every message of the
// gRPC, gRPC-Web and Connect streaming protocols: one flags byte and a
// big-endian uint32 length.
const envelopePrefixBytes = 5

// checkEnvelopes makes a request body whose envelopes (the prefix of
// every gRPC, gRPC-Web and Connect streaming message) a client may not
// send a client error, answered before the rest of the body is read:
//   - a body that ends inside a message (its length prefix promises more
//     bytes than follow, or the prefix itself is cut short):
//     invalid_argument;
//   - a prefix with flags a client may not set: the compressed flag on a
//     request that names no compression (Grpc-Encoding or
//     Connect-Content-Encoding), or any other flag (end of stream and
//     trailers are the server's, the rest are reserved): invalid_argument;
//   - a prefix that promises a message over MaxRequestBytes:
//     resource_exhausted at once, instead of reading and discarding up
//     to 4 GiB to refuse it;
//   - a unary call (gRPC or gRPC-Web) whose body holds no message, or a
//     second one: invalid_argument, where connect-go says unimplemented
//     ("unary request has zero messages"), which reads as a method the
//     server does not have.
//
// connect-go answers the first two with internal and protocol detail
// ("protocol error: promised 100 bytes in enveloped message", "invalid
// envelope flags"), while internal is reserved for bugs; it passes a
// *connect.Error from the body's Read through as it is, which is what
// the body returns here.
//
// Streaming calls are counted by callInterceptor, which sees the error;
// unary calls fail before any interceptor runs, and countEarlyAnswers
// counts them.
//
// It also logs, once the request is over, an answer that was cut because
// its client did not read it (sends.go).
func (s *Server) checkEnvelopes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.noteSendCut(w, r)
		if r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if !enveloped(r.Header.Get("Content-Type")) {
			if r.Method == http.MethodPost && unaryProcedures[r.URL.Path] {
				r.Body = &unaryBody{body: r.Body, length: r.ContentLength, maxBytes: int64(s.cfg.MaxRequestBytes)}
			}
			next.ServeHTTP(w, r)
			return
		}
		body := &envelopeBody{
			body:       r.Body,
			compressed: compressedRequest(r.Header),
			maxBytes:   uint32(min(int64(s.cfg.MaxRequestBytes), math.MaxUint32)),
			unary:      unaryProcedures[r.URL.Path] || r.URL.Path == healthCheckProcedure,
		}
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

// unaryBody is the body of a Connect unary call (application/json or
// proto, not enveloped). It refuses a body over maxBytes with the same
// resource_exhausted message as an envelope over it, at its first read
// when Content-Length says so, else at the first byte past the limit.
// connect-go passes a *connect.Error from the body's Read through as it
// is; its own message for an oversized unary call names neither the
// limit's flag nor anything the gRPC answer says.
type unaryBody struct {
	body     io.ReadCloser
	length   int64 // Content-Length, or -1
	maxBytes int64
	n        int64
}

func (b *unaryBody) Read(p []byte) (int, error) {
	if b.maxBytes > 0 && b.length > b.maxBytes {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"a message of %d bytes is over the limit of %d bytes (--max-request-bytes)", b.length, b.maxBytes))
	}
	n, err := b.body.Read(p)
	b.n += int64(n)
	if b.maxBytes > 0 && b.n > b.maxBytes {
		return n, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"a message of more than %d bytes is over the limit (--max-request-bytes)", b.maxBytes))
	}
	return n, err
}

func (b *unaryBody) Close() error { return b.body.Close() }

// enveloped reports whether a request of contentType carries its messages
// in envelopes: gRPC, gRPC-Web and Connect streaming. Connect unary
// (application/json, application/proto) does not.
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc") ||
		strings.HasPrefix(contentType, "application/connect+")
}

// compressedRequest reports whether a request names a compression for
// its messages, so that a message may carry the compressed flag. connect
// refuses a name it does not support before it reads a message;
// "identity" is no compression.
func compressedRequest(h http.Header) bool {
	for _, key := range []string{"Grpc-Encoding", "Connect-Content-Encoding"} {
		if enc := h.Get(key); enc != "" && enc != "identity" {
			return true
		}
	}
	return false
}

// envelopeBody follows the envelope framing of the bytes read through it
// and refuses, with the error of checkEnvelopes, a body that ends inside
// an envelope or a prefix a client may not send.
type envelopeBody struct {
	body       io.ReadCloser
	compressed bool   // the request names a compression
	maxBytes   uint32 // the largest message accepted
	unary      bool   // the call takes exactly one message
	messages   int    // the prefixes read so far

	prefix     [envelopePrefixBytes]byte
	prefixRead int    // bytes of the current prefix read so far
	promised   uint32 // the current message's length, once its prefix is complete
	left       uint32 // bytes of the current message still to come
	refused    atomic.Pointer[connect.Error]
}

// Flags of an envelope's first byte that a client may set.
const (
	flagCompressed = 0b0000_0001
)

func (b *envelopeBody) Read(p []byte) (int, error) {
	if err := b.refusal(); err != nil {
		return 0, err
	}
	n, err := b.body.Read(p)
	if ferr := b.follow(p[:n]); ferr != nil {
		// Nothing of this read is handed on, so connect never sees the
		// prefix it refuses: whatever it has read so far, it gets this
		// error next.
		return 0, b.refuse(ferr)
	}
	if err == io.EOF && (b.prefixRead > 0 || b.left > 0) {
		return n, b.refuse(b.cutError())
	}
	if err == io.EOF && b.unary && b.messages == 0 {
		return n, b.refuse(connect.NewError(connect.CodeInvalidArgument, errors.New(
			"the request body holds no message: a unary call takes exactly one (an empty one is a 5-byte frame of zeros)")))
	}
	return n, err
}

// refusal is the error the body was refused with, or nil.
func (b *envelopeBody) refusal() *connect.Error { return b.refused.Load() }

func (b *envelopeBody) refuse(err *connect.Error) *connect.Error {
	b.refused.Store(err)
	return err
}

func (b *envelopeBody) Close() error { return b.body.Close() }

// follow advances the framing over data, and checks each prefix as it
// completes.
func (b *envelopeBody) follow(data []byte) *connect.Error {
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
			if b.messages++; b.unary && b.messages > 1 {
				return connect.NewError(connect.CodeInvalidArgument, errors.New(
					"the request body holds more than one message: a unary call takes exactly one"))
			}
			b.promised = binary.BigEndian.Uint32(b.prefix[1:])
			b.left = b.promised
			b.prefixRead = 0
			if err := b.checkPrefix(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPrefix refuses the prefix just read if a client may not send it.
func (b *envelopeBody) checkPrefix() *connect.Error {
	flags := b.prefix[0]
	switch {
	case flags == flagCompressed && !b.compressed:
		return connect.NewError(connect.CodeInvalidArgument, errors.New(
			"a message is flagged compressed, but the request names no compression (grpc-encoding or connect-content-encoding); "+
				"send it uncompressed or name its compression"))
	case flags == '{':
		// JSON sent to a stream as to a unary call, without its frame.
		return connect.NewError(connect.CodeInvalidArgument, errors.New(
			"the body starts with '{': each message of a stream goes behind a 5-byte frame (a flags byte of 0, then its length in 4 bytes, big-endian); "+
				"README.md, \"Try it with curl\", shows one from the shell"))
	case flags&^flagCompressed != 0:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"a message's prefix has flags 0x%02x; a request message may only carry 0x00, or 0x01 when compressed", flags))
	case b.promised > b.maxBytes:
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"a message of %d bytes is over the limit of %d bytes (--max-request-bytes)", b.promised, b.maxBytes))
	}
	return nil
}

func (b *envelopeBody) cutError() *connect.Error {
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
