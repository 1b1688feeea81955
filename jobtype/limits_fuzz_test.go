package jobtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzCheckJSON compares CheckJSON, which scans bytes, with decoders:
// encoding/json for what is JSON and how deep it nests, and protojson's
// google.protobuf.Value, the form every reader gets a payload in, for
// what may be stored. Within the size and depth limits, CheckJSON accepts
// exactly what protojson can read; and what it accepts reads back, from
// JSON and from binary, as the document encoding/json reads.
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{
		`{"catalogue":"spring","batches":3}`,
		`{"batches":2}`,
		`{"rows":[1,2.5,"x",true,null],"nested":{"a":{"b":[]}}}`,
		`"report 2024-05 für Acme"`,
		`[[[[[[1]]]]]]`,
		strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth),
		strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1),
		`{"a":1,"a":2}`,
		`{"a":{"b":1},"b":{"a":1,"b":2,"a\u0062":3}}`,
		`"\ud800"`, `"\udc00\ud800"`, `"\ud83d\ude00"`, `"\ud83d\u0041"`,
		`1e400`, `-1e-400`, `123456789012345678901234567890`, `-0`, `0.1e+2`,
		`"\"[{"`, `{"\\":"]"}`,
		"\"\xff\"", ``, ` `, `nul`, `[1,]`, `{"a"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 4096
		err := CheckJSON("payload", data, limit)
		if len(data) > limit {
			var tooLarge *TooLargeError
			if !errors.As(err, &tooLarge) || tooLarge.Bytes != len(data) || tooLarge.Limit != limit {
				t.Fatalf("%d bytes over %d: got %v, want a TooLargeError", len(data), limit, err)
			}
			return
		}
		if !json.Valid(data) {
			wantInvalid(t, err, "payload", data)
			return
		}
		depth := decodedDepth(t, data)
		if got := jsonDepth(data); got != depth {
			t.Fatalf("jsonDepth(%q) = %d, encoding/json nests it %d deep", data, got, depth)
		}
		if depth > MaxJSONDepth {
			wantInvalid(t, err, "payload", data)
			return
		}
		v := &structpb.Value{}
		protoErr := protojson.Unmarshal(data, v)
		switch {
		case err != nil && protoErr == nil:
			t.Fatalf("CheckJSON refuses %q (%v), which protojson reads as %v", data, err, v)
		case err == nil && protoErr != nil:
			t.Fatalf("CheckJSON accepts %q, which protojson refuses: %v", data, protoErr)
		case err != nil:
			wantInvalid(t, err, "payload", data)
			return
		}
		var want, got any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		back, err := protojson.Marshal(v)
		if err != nil {
			t.Fatalf("protojson does not write back %q: %v", data, err)
		}
		if err := json.Unmarshal(back, &got); err != nil {
			t.Fatalf("protojson wrote %q, which encoding/json refuses: %v", back, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q reads back as %q", data, back)
		}
		bin, err := proto.Marshal(v)
		if err != nil {
			t.Fatalf("binary: %v", err)
		}
		if err := proto.Unmarshal(bin, &structpb.Value{}); err != nil {
			t.Fatalf("%q does not decode from binary with protobuf's default limits: %v", data, err)
		}
	})
}

// decodedDepth is how deeply encoding/json's tokenizer finds arrays and
// objects nested in valid JSON data.
func decodedDepth(t *testing.T, data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return deepest
		}
		if err != nil {
			t.Fatalf("json.Valid accepts %q, the tokenizer does not: %v", data, err)
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

func wantInvalid(t *testing.T, err error, field string, data []byte) {
	t.Helper()
	var invalid *InvalidError
	if !errors.As(err, &invalid) || invalid.Field != field || invalid.Reason == "" {
		t.Fatalf("%q: got %v, want an InvalidError for %s", data, err, field)
	}
}
