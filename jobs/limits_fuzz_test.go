package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzCheckJSON compares checkJSON, which scans bytes, with decoders:
// encoding/json for what is JSON and how deep it nests, and protojson's
// google.protobuf.Value, the form every reader gets a payload in, for
// what may be stored. Within the size and depth limits, checkJSON accepts
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
		err := checkJSON("payload", data, limit)
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
			t.Fatalf("checkJSON refuses %q (%v), which protojson reads as %v", data, err, v)
		case err == nil && protoErr != nil:
			t.Fatalf("checkJSON accepts %q, which protojson refuses: %v", data, protoErr)
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

// nameRule is validName's rule written as a regular expression.
var nameRule = regexp.MustCompile(`^[A-Za-z0-9._\-:/@]{1,128}$`)

// FuzzValidate runs arbitrary submissions, claims and worker reports
// through the engine's request checks, which run before any store call.
// Beyond not panicking, it holds each check to its documented rule, and
// that a refusal names its field.
func FuzzValidate(f *testing.F) {
	f.Add("enrich", "", "", "", int32(0), "host-1@42", "enrich,render", "j_01hzzz", "l_01hzzz", "batch 5 of 11", "Timeout")
	f.Add("email.send", "acme", "reports/monthly", "report 2024-05 für Acme", int32(3), "w", "", "j", "l", "", "")
	f.Add("", "a b", "q\x00", "\x7f", int32(-1), "", ",,", "", "l y", "\xff", "\u2028")
	f.Add(strings.Repeat("k", 129), strings.Repeat("t", 128), "q", strings.Repeat("ü", 65), int32(1), "w", strings.Repeat("k,", 101), "j", "l", strings.Repeat("s", 1025), "")
	f.Fuzz(func(t *testing.T, kind, tenant, queue, uniqueKey string, maxAttempts int32, workerID, kinds, jobID, leaseID, step, errType string) {
		sub := SubmitRequest{Tenant: tenant, Kind: kind, Queue: queue, UniqueKey: uniqueKey, MaxAttempts: maxAttempts}
		err := sub.validate()
		accepted := nameRule.MatchString(kind) && (tenant == "" || nameRule.MatchString(tenant)) &&
			(queue == "" || nameRule.MatchString(queue)) && validKey(uniqueKey) && maxAttempts >= 0
		if (err == nil) != accepted {
			t.Fatalf("submit %+v: validate says %v, the rules say accepted=%v", sub, err, accepted)
		}
		wantNamed(t, err)

		var kindList []string
		if kinds != "" {
			kindList = strings.Split(kinds, ",")
		}
		claim := ClaimRequest{WorkerID: workerID, Kinds: kindList}
		err = claim.validate()
		accepted = nameRule.MatchString(workerID) && len(kindList) <= MaxFilterItems
		for _, k := range kindList {
			accepted = accepted && nameRule.MatchString(k)
		}
		if (err == nil) != accepted {
			t.Fatalf("claim %+v: validate says %v, the rules say accepted=%v", claim, err, accepted)
		}
		wantNamed(t, err)

		err = validLease(jobID, leaseID)
		if accepted := nameRule.MatchString(jobID) && nameRule.MatchString(leaseID); (err == nil) != accepted {
			t.Fatalf("lease %q %q: validLease says %v, the rules say accepted=%v", jobID, leaseID, err, accepted)
		}
		wantNamed(t, err)

		for _, text := range []struct {
			field, v string
			limit    int
		}{{"step", step, MaxStepBytes}, {"error.type", errType, MaxErrorTypeBytes}} {
			err := checkText(text.field, text.v, text.limit)
			if accepted := len(text.v) <= text.limit && utf8.ValidString(text.v); (err == nil) != accepted {
				t.Fatalf("%s %q: checkText says %v, the rules say accepted=%v", text.field, text.v, err, accepted)
			}
			wantNamed(t, err)
		}
	})
}

// validKey is validUniqueKey's rule: at most MaxUniqueKeyBytes of
// printable UTF-8.
func validKey(k string) bool {
	if len(k) > MaxUniqueKeyBytes || !utf8.ValidString(k) {
		return false
	}
	return strings.IndexFunc(k, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// wantNamed holds that a refusal is an InvalidError naming its field and
// a reason, and that the field is quoted back to the caller in its error
// text without the value itself, which could be anything.
func wantNamed(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var invalid *InvalidError
	if !errors.As(err, &invalid) || invalid.Field == "" || invalid.Reason == "" {
		t.Fatalf("got %#v, want an InvalidError with a field and a reason", err)
	}
	if !strings.HasPrefix(err.Error(), invalid.Field) || !utf8.ValidString(err.Error()) {
		t.Fatalf("error %q does not start with its field %q, or is not UTF-8", err, invalid.Field)
	}
}
