package server

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// Encode once, answer many. One publish can wake 10,000 WaitJob and
// WatchJob calls of one job, and they all answer with the same snapshot:
// converting it for the wire (JSON payload to structpb) and encoding the
// response once per call would make the last caller wait for 10,000
// encodings of the same bytes. Instead the server builds the wire form of
// each snapshot once (wireFor, kept in the snapshot's Memo), hands every
// woken call the same response message, and the codecs, asked by
// connect-go to marshal it once per call, append bytes encoded once per
// wire format for that message (sharedResponses).
//
// What is shared holds nothing of the caller: a WaitJobResponse and a
// WatchJobResponse carry only the job, and every call that parks on a job
// has passed checkJobTenant for it (or submitted it) before it parks, so
// all who receive a job's shared message may see the job.

// wireSnapshot is a snapshot's wire form, built once per snapshot.
type wireSnapshot struct {
	job   *jobwatchv1.Job
	wait  *jobwatchv1.WaitJobResponse
	watch *jobwatchv1.WatchJobResponse
	err   error // the stored payload or result is not JSON
}

// wireFor returns snap's wire form. For a shared snapshot (one published
// to every waiter and watcher of the job) the response messages are
// registered with the codecs, which then encode each once per format.
// Nobody may modify what it returns.
//
// The wire form, and the bytes encoded from it, live as long as the
// snapshot: while it is the latest of a job someone waits on or watches
// (a terminal one only until its callers have left), and then until the
// last call it woke has sent it. That is one converted copy per watched
// job, where each woken call used to hold its own.
func (s *Server) wireFor(snap *jobs.Snapshot) *wireSnapshot {
	return snap.Memo(func(j *jobtype.Job) any {
		pj, err := wire.Job(j)
		if err != nil {
			return &wireSnapshot{err: err}
		}
		w := &wireSnapshot{
			job:   pj,
			wait:  &jobwatchv1.WaitJobResponse{Job: pj},
			watch: &jobwatchv1.WatchJobResponse{Job: pj},
		}
		if snap.Shared() {
			share(&s.shared, w.wait)
			share(&s.shared, w.watch)
		}
		return w
	}).(*wireSnapshot)
}

// wireFormat is an encoding the codecs produce: the two JSON codec names
// ("json" and "json; charset=utf-8") marshal to the same bytes, so they
// share theirs.
type wireFormat int

const (
	formatJSON wireFormat = iota
	formatProto
	wireFormats
)

func (f wireFormat) String() string {
	if f == formatProto {
		return "proto"
	}
	return "json"
}

// sharedResponses finds, for a response message, the bytes already
// encoded for it. Messages are found by address and live in the table as
// long as the message does: each entry holds its message weakly, and a
// cleanup removes the entry once the message is garbage. The weak
// pointer also tells an entry's own message from a new one allocated at
// the address of a collected one before its cleanup ran.
type sharedResponses struct {
	entries sync.Map // uintptr (message address) → *sharedResponse
	// encodes counts the encodings of shared messages, per format: the
	// figure that shows one encoding serving many calls.
	encodes [wireFormats]atomic.Int64
}

type sharedResponse struct {
	is    func(msg any) bool // msg is this entry's message, still alive
	bytes [wireFormats]encodeOnce
}

// share registers msg, which many calls are about to return, so that the
// codecs encode it once per format.
func share[T any, M interface {
	*T
	proto.Message
}](r *sharedResponses, msg M) {
	ref := weak.Make((*T)(msg))
	e := &sharedResponse{is: func(m any) bool {
		p, ok := m.(M)
		return ok && ref.Value() == (*T)(p)
	}}
	key := uintptr(unsafe.Pointer(msg))
	r.entries.Store(key, e)
	runtime.AddCleanup((*T)(msg), func(key uintptr) { r.entries.CompareAndDelete(key, e) }, key)
}

// lookup returns msg's entry, or nil for a message nobody shared (the
// answer to one call, and every other type).
func (r *sharedResponses) lookup(msg any) *sharedResponse {
	var key uintptr
	switch m := msg.(type) {
	case *jobwatchv1.WaitJobResponse:
		key = uintptr(unsafe.Pointer(m))
	case *jobwatchv1.WatchJobResponse:
		key = uintptr(unsafe.Pointer(m))
	default:
		return nil
	}
	v, ok := r.entries.Load(key)
	if !ok {
		return nil
	}
	if e := v.(*sharedResponse); e.is(msg) {
		return e
	}
	return nil
}

// encodeOnce holds one format's bytes of a shared message, encoded by
// the first call that asks. They are never modified: callers append
// them to their own buffers.
type encodeOnce struct {
	done atomic.Pointer[encoded]
	mu   sync.Mutex
}

type encoded struct {
	b   []byte
	err error
}

func (o *encodeOnce) get(encode func() ([]byte, error), count *atomic.Int64) ([]byte, error) {
	if e := o.done.Load(); e != nil {
		return e.b, e.err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.done.Load(); e != nil {
		return e.b, e.err
	}
	b, err := encode()
	count.Add(1)
	o.done.Store(&encoded{b: b, err: err})
	return b, err
}

// sharingCodec is one of the server's codecs (jsonCodec, protoCodec)
// that answers a shared message with its bytes encoded once. connect-go
// marshals through MarshalAppend into a buffer of its own, which it
// reuses for other messages afterwards: the shared bytes are copied into
// it, never handed over.
type sharingCodec struct {
	codec
	format wireFormat
	shared *sharedResponses
}

// codec is a connect.Codec that can append, as jsonCodec and protoCodec do.
type codec interface {
	connect.Codec
	IsBinary() bool
	MarshalAppend(dst []byte, v any) ([]byte, error)
}

func (c sharingCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	e := c.shared.lookup(v)
	if e == nil {
		return c.codec.MarshalAppend(dst, v)
	}
	b, err := e.bytes[c.format].get(func() ([]byte, error) { return c.codec.MarshalAppend(nil, v) }, &c.shared.encodes[c.format])
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

func (c sharingCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }
