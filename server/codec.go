package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonCodec is Connect's JSON codec with one difference. Like Connect's,
// it ignores unknown fields, so that newer clients can call older
// servers. Unlike it, it refuses an enum name it does not know: protojson
// drops such a value without a word, which turns a ListJobs filter on
// "RUNNING" (for JOB_STATE_RUNNING) into no filter at all.
type jsonCodec struct{ name string }

// jsonCodecs replace Connect's codecs of the same names, the binary one
// included (see protoCodec). They answer the messages registered in
// shared with bytes encoded once (see shared.go).
func jsonCodecs(shared *sharedResponses) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(sharingCodec{jsonCodec{"json"}, formatJSON, shared}),
		connect.WithCodec(sharingCodec{jsonCodec{"json; charset=utf-8"}, formatJSON, shared}),
		connect.WithCodec(sharingCodec{protoCodec{}, formatProto, shared}),
	}
}

// protoCodec is Connect's binary codec, decoding messages nested twice as
// deep as protobuf's default allows. A JSON level of a payload costs two
// messages in binary (a Value and its ListValue or Struct) but one in
// protojson, so with the default a payload 5,000 levels deep would fail
// in the decoder with "exceeded maximum recursion depth" from a Go client
// and reach the engine from curl. Decoded alike, both reach the engine,
// which refuses it past jobs.MaxJSONDepth naming the field and the
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
	return proto.UnmarshalOptions{RecursionLimit: protoRecursionLimit}.Unmarshal(data, m)
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
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return err
	}
	md := m.ProtoReflect().Descriptor()
	if !holdsEnums(md) {
		return nil
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return err // protojson accepted it, so this does not happen
	}
	return checkEnumNames(tree, md, "")
}

// enumHolders caches holdsEnums per message type.
var enumHolders sync.Map // protoreflect.FullName → bool

// holdsEnums reports whether a message can carry an enum outside the
// well-known types. Most requests cannot, and skip the second decode.
func holdsEnums(md protoreflect.MessageDescriptor) bool {
	if v, ok := enumHolders.Load(md.FullName()); ok {
		return v.(bool)
	}
	holds := findEnum(md, map[protoreflect.FullName]bool{})
	enumHolders.Store(md.FullName(), holds)
	return holds
}

func findEnum(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
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
			if findEnum(fd.Message(), seen) {
				return true
			}
		}
	}
	return false
}

// checkEnumNames walks decoded JSON alongside the message it fills and
// reports the first enum given by a name the enum does not have. Numbers
// are left to the handlers, which check them against what they accept.
func checkEnumNames(tree any, md protoreflect.MessageDescriptor, prefix string) error {
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
			continue
		}
		path := prefix + string(fd.Name())
		var err error
		switch {
		case fd.IsMap():
			entries, _ := val.(map[string]any)
			for k, v := range entries {
				if err = checkEnumValue(v, fd.MapValue(), fmt.Sprintf("%s[%q]", path, k)); err != nil {
					break
				}
			}
		case fd.IsList():
			items, _ := val.([]any)
			for i, v := range items {
				if err = checkEnumValue(v, fd, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					break
				}
			}
		default:
			err = checkEnumValue(val, fd, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func checkEnumValue(v any, fd protoreflect.FieldDescriptor, path string) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkEnumNames(v, fd.Message(), path+".")
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
