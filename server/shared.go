package server

import (
	"bytes"
	"hash/maphash"
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
// has passed checkClientJob for it (or submitted it) before it parks, so
// all who receive a job's shared message may see the job. A WatchJobs
// batch is shared the same way among the streams of the tenant whose
// jobs it holds (sharedWatchJobs).

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

// wireBatch is a WatchJobs batch's wire form, built once for every
// stream of the tenant that sends it (jobs.TenantWatchOptions.SendShared).
type wireBatch struct {
	msg *jobwatchv1.WatchJobsResponse
	err error // a stored payload or result is not JSON
}

// sharedWatchJobs builds the WatchJobs answer of a batch many streams of
// one tenant send, registered with the codecs: a burst of changes that
// wakes 2,500 streams of a tenant converted, encoded and compressed each
// batch 2,500 times. Every stream that receives it watches the tenant
// whose jobs it holds, in the same view.
func (s *Server) sharedWatchJobs(js []jobtype.Job, resumeToken string) wireBatch {
	pjs, err := wire.Jobs(js)
	if err != nil {
		return wireBatch{err: err}
	}
	msg := &jobwatchv1.WatchJobsResponse{Jobs: pjs, ResumeToken: resumeToken}
	share(&s.shared, msg)
	return wireBatch{msg: msg}
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
//
// The compressed form is shared too: the bytes of each format are also
// found by their content (byContent), so the gzip compressor, handed an
// encoding it knows, writes its compressed form, compressed once per
// format, instead of compressing it again for every call (see
// sharingGzip).
type sharedResponses struct {
	entries sync.Map // uintptr (message address) → *sharedResponse
	// encodes counts the encodings of shared messages, per format: the
	// figure that shows one encoding serving many calls.
	encodes [wireFormats]atomic.Int64
	// byContent finds a shared message's encoding from its bytes.
	byContent sync.Map // contentKey → *encodeOnce
	// compressions counts the compressions of shared encodings.
	compressions atomic.Int64

	// Set by setUpSends (sends.go) before anything is served.
	sends           *sendBudget
	maxRequestBytes int64
	inflated        atomic.Int64 // request bytes inflated, for tests
}

type sharedResponse struct {
	is    func(msg any) bool // msg is this entry's message, still alive
	bytes [wireFormats]encodeOnce
	size  atomic.Int64 // proto.Size of the message, once asked (sends.go)

	// build, if set, writes the message's encoding from parts made
	// before it was answered (see prebuilt), in place of bytes. It is
	// handed the message: the entry must not hold it, or the message
	// would never be garbage and the entry never forgotten.
	build func(msg any, dst []byte, c codec, f wireFormat) ([]byte, error)
}

// share registers msg, which many calls are about to return, so that the
// codecs encode it once per format.
func share[T any, M interface {
	*T
	proto.Message
}](r *sharedResponses, msg M) {
	register(r, msg, &sharedResponse{})
}

// prebuilt registers msg, the answer of one call, so that the codecs
// write it with build, which appends the encoding of msg (handed to it)
// in format f through c to dst, and sends.go counts it as size bytes.
// build must not hold msg itself: the entry lives until msg is garbage,
// and an entry that held it would keep it, and itself, forever (every
// WaitJobs answer was kept so: 1.2 GB after a minute of them).
func prebuilt[T any, M interface {
	*T
	proto.Message
}](r *sharedResponses, msg M, size int64, build func(msg M, dst []byte, c codec, f wireFormat) ([]byte, error)) {
	e := &sharedResponse{build: func(m any, dst []byte, c codec, f wireFormat) ([]byte, error) {
		return build(m.(M), dst, c, f)
	}}
	e.size.Store(max(size, 1))
	register(r, msg, e)
}

// register makes e msg's entry for as long as msg lives.
func register[T any, M interface {
	*T
	proto.Message
}](r *sharedResponses, msg M, e *sharedResponse) {
	ref := weak.Make((*T)(msg))
	e.is = func(m any) bool {
		p, ok := m.(M)
		return ok && ref.Value() == (*T)(p)
	}
	key := uintptr(unsafe.Pointer(msg))
	r.entries.Store(key, e)
	runtime.AddCleanup((*T)(msg), func(key uintptr) { r.forget(key, e) }, key)
}

// forget removes the entry of a message that is garbage, and its bytes
// from byContent.
func (r *sharedResponses) forget(key uintptr, e *sharedResponse) {
	r.entries.CompareAndDelete(key, e)
	for f := range e.bytes {
		if enc := e.bytes[f].done.Load(); enc != nil && enc.err == nil {
			r.byContent.CompareAndDelete(keyOf(enc.b), &e.bytes[f])
		}
	}
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
	case *jobwatchv1.WaitJobsResponse:
		key = uintptr(unsafe.Pointer(m))
	case *jobwatchv1.WatchJobsResponse:
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
	// gzipped is the gzip form of the bytes, compressed by the first call
	// that sends them compressed.
	gzipped lazyBytes
}

// lazyBytes is bytes made once, by the first that asks.
type lazyBytes struct {
	done atomic.Pointer[encoded]
	mu   sync.Mutex
}

func (l *lazyBytes) get(make func() ([]byte, error), count *atomic.Int64) ([]byte, error) {
	if e := l.done.Load(); e != nil {
		return e.b, e.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.done.Load(); e != nil {
		return e.b, e.err
	}
	b, err := make()
	count.Add(1)
	l.done.Store(&encoded{b: b, err: err})
	return b, err
}

// contentKey finds bytes by their length and hash.
type contentKey struct {
	n    int
	hash uint64
}

// contentSeed seeds the hash of contentKey; set once, never changed.
var contentSeed = maphash.MakeSeed()

func keyOf(b []byte) contentKey { return contentKey{len(b), maphash.Bytes(contentSeed, b)} }

// sharedMinBytes is the smallest encoding found by its content: below it,
// compressing again costs less than hashing (and connect does not
// compress under 1 KiB).
const sharedMinBytes = 4 << 10

// encodingOf returns the shared encoding whose bytes are b, or nil.
func (r *sharedResponses) encodingOf(b []byte) *encodeOnce {
	if len(b) < sharedMinBytes {
		return nil
	}
	v, ok := r.byContent.Load(keyOf(b))
	if !ok {
		return nil
	}
	o := v.(*encodeOnce)
	if e := o.done.Load(); e == nil || !bytes.Equal(e.b, b) {
		return nil
	}
	return o
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
	if e.build != nil {
		return e.build(v, dst, c.codec, c.format)
	}
	once := &e.bytes[c.format]
	b, err := once.get(func() ([]byte, error) {
		b, err := c.codec.MarshalAppend(nil, v)
		if err == nil && len(b) >= sharedMinBytes {
			c.shared.byContent.Store(keyOf(b), once)
		}
		return b, err
	}, &c.shared.encodes[c.format])
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

func (c sharingCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }
