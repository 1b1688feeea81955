package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jobwatch/jobwatch/internal/editdist"
	"github.com/jobwatch/jobwatch/wire"
)

// jsonCodec is Connect's JSON codec with two differences. Like Connect's,
// it ignores unknown fields, so that newer clients can call older
// servers. Unlike it, it refuses an enum name it does not know: protojson
// drops such a value without a word, which turns a ListJobs filter on
// "RUNNING" (for JOB_STATE_RUNNING) into no filter at all. And it refuses
// an unknown field whose name is a slip of a known one ("uniqeKey",
// "UniqueKey", "unique-key" for uniqueKey: typoOf), which would otherwise
// drop what the caller asked for as silently.
type jsonCodec struct{ name string }

// jsonCodecs are the options that shape how the services' messages are
// encoded, compressed and admitted:
//   - codecs that replace Connect's of the same names, the binary one
//     included (see protoCodec), and answer the messages registered in
//     shared with bytes encoded once (see shared.go);
//   - gzip, replacing Connect's: requests inflate up to the request size
//     limit and no further (limitedGunzip), and answers shared by many
//     calls are compressed once (sharingGzip);
//   - the send budget's admission of answers (sends.go), innermost, so
//     a call waits for room only once it is let in.
func jsonCodecs(shared *sharedResponses) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(sharingCodec{jsonCodec{"json"}, formatJSON, shared}),
		connect.WithCodec(sharingCodec{jsonCodec{"json; charset=utf-8"}, formatJSON, shared}),
		connect.WithCodec(sharingCodec{protoCodec{}, formatProto, shared}),
		gzipCompression(shared),
		connect.WithInterceptors(sendAdmission{shared}),
	}
}

// gzipCompression replaces connect-go's gzip with limitedGunzip and
// sharingGzip. Every handler that accepts requests needs it (health and
// reflection too), or a gzip bomb is inflated in full to be refused.
func gzipCompression(shared *sharedResponses) connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &limitedGunzip{shared: shared} },
		func() connect.Compressor { return &sharingGzip{shared: shared} })
}

// limitedGunzip inflates a gzip request message and stops as soon as it
// has inflated more than the request size limit: connect-go's own
// inflates the rest to io.Discard to report the size, so a 509 KB bomb
// took 524 MB of inflating to refuse. Its errors are *connect.Errors,
// which connect-go answers as they are when Read returns them: that is
// why a gzip header that cannot be read is told at the first Read, not
// by Reset, whose error connect-go answers with its own prefix ("get
// decompressor: ").
type limitedGunzip struct {
	shared *sharedResponses
	gz     gzip.Reader
	limit  int64 // 0: none
	n      int64 // inflated so far
	// bad is why the message's gzip header could not be read (Reset),
	// for Read to answer; nil once gz is reset on a header it read.
	bad error
	// ready: gz has read a header once, so that Close may call it.
	ready bool
}

func (d *limitedGunzip) Reset(r io.Reader) error {
	d.limit, d.n = d.shared.maxRequestBytes, 0
	d.bad = d.gz.Reset(r)
	if d.bad == nil {
		d.ready = true
	}
	return nil
}

// notGzip says in a caller's words that a body its headers call gzip is
// not (gzip's own words, "unexpected EOF" or "invalid header", say
// nothing of where to look).
func notGzip(err error) error {
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the message is not whole gzip data, though the request says it is gzip "+
			"(Content-Encoding, Connect-Content-Encoding or the gRPC compressed flag): send it as it is, or gzip it whole"))
	}
	return err
}

func (d *limitedGunzip) Read(p []byte) (int, error) {
	if d.bad != nil {
		return 0, notGzip(d.bad)
	}
	if d.limit > 0 && d.n > d.limit {
		return 0, d.tooLarge()
	}
	n, err := d.gz.Read(p)
	if err != nil && err != io.EOF {
		err = notGzip(err)
	}
	d.n += int64(n)
	d.shared.inflated.Add(int64(n))
	if d.limit > 0 && d.n > d.limit {
		return n, d.tooLarge()
	}
	return n, err
}

func (d *limitedGunzip) tooLarge() error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"the request message inflates to more than %d bytes, the limit (--max-request-bytes); "+
			"it was refused without inflating the rest: send a smaller message", d.limit))
}

func (d *limitedGunzip) Close() error {
	if !d.ready {
		return nil // gz never read a header: it has nothing to close
	}
	return d.gz.Close()
}

// sharingGzip is a gzip compressor that knows the encodings shared by
// many calls (shared.go): connect-go hands it a message's whole encoding
// in one Write, and when that is a shared one it writes the gzip form
// compressed once for all its calls. 2,000 gRPC waiters accepting gzip
// woken on one 250 KB result were compressed 2,000 times, and the last
// answer left 8.2 s after the completion instead of 1.2 s. Anything else
// it compresses as gzip does.
type sharingGzip struct {
	shared *sharedResponses
	dst    io.Writer
	gz     *gzip.Writer // made the first time something is compressed here

	match *encodeOnce // the first Write was this shared encoding
	state gzipState
}

type gzipState int

const (
	gzipEmpty   gzipState = iota // nothing written since Reset
	gzipShared                   // the first Write was a shared encoding (match)
	gzipWriting                  // compressing through gz
)

func (c *sharingGzip) Reset(w io.Writer) {
	c.dst, c.match, c.state = w, nil, gzipEmpty
	if c.gz != nil {
		c.gz.Reset(w)
	}
}

// writer is the compressor of answers that are not shared, at
// gzip.BestSpeed: an answer compressed per call is on its caller's way,
// and a WaitJobs of 1,000 jobs (116 KB) spent milliseconds at the default
// level after its last job ended. Shared answers, compressed once for
// every caller, keep the default level.
func (c *sharingGzip) writer() *gzip.Writer {
	if c.gz == nil {
		c.gz, _ = gzip.NewWriterLevel(c.dst, gzip.BestSpeed) // fails only on a bad level
	}
	return c.gz
}

func (c *sharingGzip) Write(p []byte) (int, error) {
	switch c.state {
	case gzipEmpty:
		if o := c.shared.encodingOf(p); o != nil {
			c.match, c.state = o, gzipShared
			return len(p), nil
		}
	case gzipShared:
		// More than one Write: compress it all here.
		first := c.match.done.Load().b
		c.match = nil
		if _, err := c.writer().Write(first); err != nil {
			return 0, err
		}
	}
	c.state = gzipWriting
	return c.writer().Write(p)
}

func (c *sharingGzip) Close() error {
	if c.state != gzipShared {
		return c.writer().Close()
	}
	o := c.match
	c.match, c.state = nil, gzipEmpty
	z, err := o.gzipped.get(func() ([]byte, error) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(o.done.Load().b); err != nil {
			return nil, err
		}
		err := zw.Close()
		return buf.Bytes(), err
	}, &c.shared.compressions)
	if err != nil {
		return err
	}
	_, err = c.dst.Write(z)
	return err
}

// protoCodec is Connect's binary codec, decoding messages nested twice as
// deep as protobuf's default allows. A JSON level of a payload costs two
// messages in binary (a Value and its ListValue or Struct) but one in
// protojson, so with the default a payload 5,000 levels deep would fail
// in the decoder with "exceeded maximum recursion depth" from a Go client
// and reach the engine from curl. Decoded alike, both reach the engine,
// which refuses it past jobtype.MaxJSONDepth naming the field and the
// limit. The request size limit still bounds the work.
type protoCodec struct{}

const protoRecursionLimit = 2*protowire.DefaultRecursionLimit + 16

func (protoCodec) Name() string { return "proto" }

func (protoCodec) IsBinary() bool { return true }

func (c protoCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

// MarshalAppend is Marshal appending to dst: connect-go then marshals
// into a buffer from its pool.
func (protoCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", v)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (protoCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", v)
	}
	if err := (proto.UnmarshalOptions{RecursionLimit: protoRecursionLimit}).Unmarshal(data, m); err != nil {
		// As jsonCodec says it: what the body was meant to be, and
		// protobuf's words without their "proto:".
		return fmt.Errorf("the body is not a %s in protobuf's binary form: %s", m.ProtoReflect().Descriptor().FullName(), wire.DecodeMistake(err, data))
	}
	return nil
}

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) IsBinary() bool { return false }

func (c jsonCodec) Marshal(v any) ([]byte, error) { return c.MarshalAppend(nil, v) }

// MarshalAppend is Marshal appending to dst: connect-go then marshals
// into a buffer from its pool. The bytes are protojson's defaults, as
// connect-go's own JSON codec writes them.
func (jsonCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", v)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

func (c jsonCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", v)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	// Strict first: a body with no unknown field (nearly every one) is
	// decoded once. One that has some is decoded again without them, and
	// its tree looked at for slips.
	unknown := false
	if err := (protojson.UnmarshalOptions{}).Unmarshal(data, m); err != nil {
		proto.Reset(m)
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
			return fmt.Errorf("the body is not a %s as JSON: %s", m.ProtoReflect().Descriptor().FullName(), wire.DecodeMistake(err, data))
		}
		unknown = true
	}
	md := m.ProtoReflect().Descriptor()
	if !unknown && !needsTreeCheck(md) {
		return nil
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return err // protojson accepted it, so this does not happen
	}
	return checkTree(tree, md, "")
}

// treeChecked caches needsTreeCheck per message type.
var treeChecked sync.Map // protoreflect.FullName → bool

// needsTreeCheck reports whether a message can carry an enum outside the
// well-known types, or a JSON value (a payload, a result), which
// checkTree looks at in the JSON as sent. Most requests cannot, and
// skip the second decode.
func needsTreeCheck(md protoreflect.MessageDescriptor) bool {
	if v, ok := treeChecked.Load(md.FullName()); ok {
		return v.(bool)
	}
	holds := findTreeChecked(md, map[protoreflect.FullName]bool{})
	treeChecked.Store(md.FullName(), holds)
	return holds
}

// isJSONValue reports whether md is one of the well-known types that
// hold any JSON (google.protobuf.Value, Struct, ListValue).
func isJSONValue(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Value", "google.protobuf.Struct", "google.protobuf.ListValue":
		return true
	}
	return false
}

func findTreeChecked(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] || md.FullName().Parent() == "google.protobuf" {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		switch fd.Kind() {
		case protoreflect.EnumKind:
			return true
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if isJSONValue(fd.Message()) || findTreeChecked(fd.Message(), seen) {
				return true
			}
		}
	}
	return false
}

// checkTree walks decoded JSON alongside the message it fills and
// reports the first enum given by a name the enum does not have, or the
// first integer in a JSON value that a JSON value cannot hold
// (wire.CheckExactNumbers). Other numbers are left to the handlers, which
// check them against what they accept.
func checkTree(tree any, md protoreflect.MessageDescriptor, prefix string) error {
	obj, ok := tree.(map[string]any)
	if !ok || md.FullName().Parent() == "google.protobuf" {
		return nil // well-known types have their own JSON forms
	}
	fields := md.Fields()
	for key, val := range obj {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			near := typoOf(key, fields)
			switch {
			case strictMessages[md.FullName()]:
				return unknownInFilter(prefix+key, near)
			case near != "":
				return fmt.Errorf("%s%s: no such field; did you mean %q? (a name this near a known field is refused as a slip; one the server does not know at all is ignored, for newer clients)", prefix, key, near)
			}
			continue
		}
		path := prefix + string(fd.Name())
		var err error
		switch {
		case fd.IsMap():
			entries, _ := val.(map[string]any)
			for k, v := range entries {
				if err = checkTreeValue(v, fd.MapValue(), fmt.Sprintf("%s[%q]", path, k)); err != nil {
					break
				}
			}
		case fd.IsList():
			items, _ := val.([]any)
			for i, v := range items {
				if err = checkTreeValue(v, fd, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					break
				}
			}
		default:
			err = checkTreeValue(val, fd, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func checkTreeValue(v any, fd protoreflect.FieldDescriptor, path string) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if isJSONValue(fd.Message()) {
			return wire.CheckExactNumbers(v, path)
		}
		return checkTree(v, fd.Message(), path+".")
	case protoreflect.EnumKind:
		name, ok := v.(string)
		ed := fd.Enum()
		if !ok || ed.FullName().Parent() == "google.protobuf" || ed.Values().ByName(protoreflect.Name(name)) != nil {
			return nil
		}
		var names []string
		for i := range ed.Values().Len() {
			if value := ed.Values().Get(i); value.Number() != 0 {
				names = append(names, string(value.Name()))
			}
		}
		return fmt.Errorf("%s: %q is not a %s; use one of %s", path, name, ed.Name(), strings.Join(names, ", "))
	}
	return nil
}

// strictMessages are the messages that refuse every field the server
// does not know, where other messages ignore one for newer clients: a
// filter that picks the jobs a bulk action changes would pick more of
// them without it.
var strictMessages = map[protoreflect.FullName]bool{
	"jobwatch.v1.JobFilter": true,
}

// unknownInFilter refuses a field of a strict message the server does
// not know: field is its path (a JSON name, or a field number in the
// binary form), near the known field it may be a slip of ("" if none).
func unknownInFilter(field, near string) error {
	hint := ""
	if near != "" {
		hint = fmt.Sprintf("; did you mean %q?", near)
	}
	return fmt.Errorf("%s: no such field of a filter%s (a filter refuses what it does not know, which would otherwise act on more jobs than it names; a field newer than this server needs the server upgraded)", field, hint)
}

// typoOf is the JSON name of the field of fields that key is a slip of
// (slipDistance), the nearest, or "". A field added in a later release
// whose name is a slip of an existing one would be refused by this
// server rather than ignored; TestNoTwoFieldsOfARequestAreASlipApart
// keeps the API's names further apart.
func typoOf(key string, fields protoreflect.FieldDescriptors) string {
	best, bestDist := "", -1
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		if d, ok := slipDistance(key, name); ok && (bestDist < 0 || d < bestDist) {
			best, bestDist = name, d
		}
	}
	return best
}

// slipDistance is how far key is from the field name, and whether that
// near is a slip: the same letters but for case and '_' or '-'; the
// singular of a plural name or the plural of a singular one ("kind" for
// "kinds", "batches" for "batch"), which the API's requests use side by
// side (SubmitJob's kind, a filter's kinds); or, for a key of five
// letters or more, one letter wrong, missing, extra or two swapped (two
// for nine letters or more).
func slipDistance(key, name string) (int, bool) {
	k, n := foldName(key), foldName(name)
	for _, plural := range []string{"s", "es"} {
		if k+plural == n || n+plural == k {
			return len(plural), true
		}
	}
	allowed := 0
	switch {
	case len(k) >= 9:
		allowed = 2
	case len(k) >= 5:
		allowed = 1
	}
	d := editdist.Distance(k, n)
	return d, d <= allowed
}

// foldName is a field name in lower case without '_' and '-'.
func foldName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		return unicode.ToLower(r)
	}, name)
}
