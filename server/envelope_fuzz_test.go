package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// envelopeVerdict is what checkEnvelopes must make of a request body, by
// a plain walk over its envelopes.
type envelopeVerdict struct {
	code    connect.Code // 0: the body is well framed
	at      int          // where the refused or cut envelope starts
	refused bool         // refused at a prefix, not cut short
	message string       // a substring of the error's message
}

func judgeEnvelopes(data []byte, compressed bool, maxBytes uint32) envelopeVerdict {
	for at := 0; at < len(data); {
		if len(data)-at < envelopePrefixBytes {
			return envelopeVerdict{connect.CodeInvalidArgument, at, false, "prefix"}
		}
		flags, n := data[at], binary.BigEndian.Uint32(data[at+1:])
		switch {
		case flags == flagCompressed && !compressed:
			return envelopeVerdict{connect.CodeInvalidArgument, at, true, "compress"}
		case flags&^flagCompressed != 0:
			return envelopeVerdict{connect.CodeInvalidArgument, at, true, "flags"}
		case n > maxBytes:
			return envelopeVerdict{connect.CodeResourceExhausted, at, true, "over the limit"}
		}
		if uint64(len(data)-at-envelopePrefixBytes) < uint64(n) {
			return envelopeVerdict{connect.CodeInvalidArgument, at, false, "ended inside a message"}
		}
		at += envelopePrefixBytes + int(n)
	}
	return envelopeVerdict{}
}

// chunkReader hands data on at most size bytes per Read, with io.EOF on
// the last bytes or after them.
type chunkReader struct {
	data       []byte
	size       int
	eofWithEnd bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.size)], r.data)
	r.data = r.data[n:]
	if len(r.data) == 0 && r.eofWithEnd {
		return n, io.EOF
	}
	return n, nil
}

// FuzzEnvelope feeds arbitrary bodies (lengths, flags, truncation), in
// arbitrary chunks, through the envelope reader of checkEnvelopes, and
// then through the server's whole surface as gRPC, gRPC-Web and
// Connect-stream requests (naming gzip when compressed is set, so that
// flagged messages reach the decompressor). The reader must refuse
// exactly the bodies a plain walk over their envelopes refuses, with its
// code and a message that says why, hand on nothing of a refused prefix,
// and stay refused. The server must answer without failing, refuse a
// first message longer than its limit with resource_exhausted, and
// allocate in proportion to the bytes a body carries, not to the lengths
// its prefixes promise: a prefix promising 4 GiB costs nothing.
func FuzzEnvelope(f *testing.F) {
	watch := []byte(`{"jobId":"j_nosuchjob"}`)
	frame := envelope(watch)
	for _, seed := range [][]byte{
		frame,
		append(append([]byte{}, frame...), frame...),
		frame[:3],
		frame[:len(frame)-1],
		{0, 0, 0, 0, 0},
		{1, 0, 0, 0, 2, 'h', 'i'},
		{2, 0, 0, 0, 0},
		{0x80, 0, 0, 0, 0},
		{0, 0xff, 0xff, 0xff, 0xff},
		{0, 0, 1, 0, 1, 'x'},
		{},
	} {
		f.Add(seed, uint8(7), false, uint16(64), false)
		f.Add(seed, uint8(1), true, uint16(0), true)
	}
	handler, _, logs := fuzzServer(f)
	methods := rpcMethods()
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8, compressed bool, maxBytes uint16, eofWithEnd bool) {
		checkEnvelopeReader(t, body, int(chunk)%32+1, compressed, uint32(maxBytes), eofWithEnd)

		// The whole server, over each framed protocol, on a unary call and
		// a stream.
		for _, name := range []protoreflect.Name{"GetJob", "WatchJob"} {
			var md protoreflect.MethodDescriptor
			for _, m := range methods {
				if m.Name() == name {
					md = m
				}
			}
			for _, contentType := range []string{"application/grpc", "application/grpc-web+json", "application/connect+json"} {
				if contentType == "application/connect+json" && !md.IsStreamingServer() {
					continue // unary Connect is not enveloped
				}
				var status int
				var answer []byte
				encoding := ""
				if compressed {
					encoding = "gzip" // flagged messages reach the decompressor
				}
				allocated := allocatedDuring(func() { status, answer = call(handler, md, contentType, encoding, body) })
				checkAnswer(t, md, contentType, status, answer, logs)
				if limit := uint64(4*len(body) + 4<<20); allocated > limit {
					t.Fatalf("%s over %s: a body of %d bytes cost %d bytes of allocation (limit %d)", name, contentType, len(body), allocated, limit)
				}
				v := judgeEnvelopes(body, compressed, fuzzMaxRequestBytes)
				overLimit := v.code == connect.CodeResourceExhausted && v.at == 0
				if overLimit && !exhausted.Match(answer) {
					t.Fatalf("%s over %s: a first message over the limit was not resource_exhausted:\n%s", name, contentType, answer)
				}
			}
		}
	})
}

// exhausted matches resource_exhausted in Connect's JSON and in the gRPC
// (and gRPC-Web) status.
var exhausted = regexp.MustCompile(`"code":"resource_exhausted"|(?i)grpc-status: ?8\r`)

// checkEnvelopeReader reads body through an envelopeBody, reads of
// varying sizes over an underlying reader that gives chunk bytes at a
// time, and holds the outcome to judgeEnvelopes.
func checkEnvelopeReader(t *testing.T, body []byte, chunk int, compressed bool, maxBytes uint32, eofWithEnd bool) {
	t.Helper()
	r := &envelopeBody{
		body:       io.NopCloser(&chunkReader{data: body, size: chunk, eofWithEnd: eofWithEnd}),
		compressed: compressed,
		maxBytes:   maxBytes,
	}
	var out []byte
	var err error
	buf := make([]byte, 64)
	for i := 0; err == nil; i++ {
		var n int
		n, err = r.Read(buf[:1+i%len(buf)])
		out = append(out, buf[:n]...)
		if i > 4*len(body)+64 {
			t.Fatalf("the reader does not end: %d reads of a %d-byte body", i, len(body))
		}
	}
	want := judgeEnvelopes(body, compressed, maxBytes)
	if want.code == 0 {
		if err != io.EOF || !bytes.Equal(out, body) {
			t.Fatalf("a well-framed body %x: got %x and %v, want it whole and io.EOF", body, out, err)
		}
		return
	}
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != want.code || !strings.Contains(cerr.Message(), want.message) {
		t.Fatalf("body %x (compressed %v, limit %d): got %v, want %v saying %q", body, compressed, maxBytes, err, want.code, want.message)
	}
	if !bytes.HasPrefix(body, out) {
		t.Fatalf("body %x: handed on %x, which is not its start", body, out)
	}
	if want.refused && len(out) >= want.at+envelopePrefixBytes {
		t.Fatalf("body %x: the prefix refused at %d was handed on (%d bytes out)", body, want.at, len(out))
	}
	if !want.refused && !bytes.Equal(out, body) {
		t.Fatalf("body %x cut short: handed on %x, want all of it before the error", body, out)
	}
	if n, again := r.Read(buf); n != 0 || again != err {
		t.Fatalf("after %v, a read gave %d bytes and %v", err, n, again)
	}
}
