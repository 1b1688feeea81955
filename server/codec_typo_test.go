package server

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// typoOf refuses a field only for a slip of a name the message has, so a
// newer client's fields are ignored as before. That holds for a field
// added later only if no two of the API's names are a slip apart: this
// pins it for every message a request can hold, so that a new field that
// breaks it is named otherwise before it ships.
func TestNoTwoFieldsOfARequestAreASlipApart(t *testing.T) {
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || md.FullName().Parent() == "google.protobuf" {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			a := fields.Get(i)
			for j := range fields.Len() {
				if b := fields.Get(j); i != j {
					if _, slip := slipDistance(a.JSONName(), b.JSONName()); slip {
						t.Errorf("%s: fields %s and %s are a slip apart: a server without %s would refuse it as a slip of %s", md.FullName(), a.JSONName(), b.JSONName(), a.JSONName(), b.JSONName())
					}
				}
			}
			if a.Message() != nil {
				walk(a.Message())
			}
		}
	}
	for _, md := range rpcMethods() {
		walk(md.Input())
	}
	if len(seen) < 20 {
		t.Fatalf("walked %d messages: fewer than the API's requests hold", len(seen))
	}
}

func TestTypoOf(t *testing.T) {
	fields := (&jobwatchv1.SubmitJobRequest{}).ProtoReflect().Descriptor().Fields()
	for key, want := range map[string]string{
		"uniqeKey":    "uniqueKey",
		"UniqueKey":   "uniqueKey",
		"unique-key":  "uniqueKey",
		"priorty":     "priority",
		"maxAtempts":  "maxAttempts",
		"kidn":        "", // under five letters: too short to guess
		"bogus":       "",
		"runAfter":    "", // a field from the future is not a slip of runAt
		"callbackUrl": "",
	} {
		if got := typoOf(key, fields); got != want {
			t.Errorf("typoOf(%q) = %q, want %q", key, got, want)
		}
	}
	// A singular for a plural or a plural for a singular is a slip,
	// whatever its length.
	filter := (&jobwatchv1.JobFilter{}).ProtoReflect().Descriptor().Fields()
	for key, want := range map[string]string{"kind": "kinds", "Kind": "kinds", "state": "states", "batches": "batch", "tenants": "tenant", "kin": ""} {
		if got := typoOf(key, filter); got != want {
			t.Errorf("typoOf(%q) in a filter = %q, want %q", key, got, want)
		}
	}
}
