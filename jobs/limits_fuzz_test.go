package jobs

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/jobwatch/jobwatch/jobtype"
)

// nameRule is jobtype.NameReason's rule written as a regular expression.
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
		accepted = nameRule.MatchString(workerID) && len(kindList) <= jobtype.MaxFilterItems
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
		}{{"step", step, jobtype.MaxStepBytes}, {"error.type", errType, jobtype.MaxErrorTypeBytes}} {
			err := jobtype.CheckText(text.field, text.v, text.limit)
			if accepted := len(text.v) <= text.limit && utf8.ValidString(text.v); (err == nil) != accepted {
				t.Fatalf("%s %q: jobtype.CheckText says %v, the rules say accepted=%v", text.field, text.v, err, accepted)
			}
			wantNamed(t, err)
		}
	})
}

// validKey is jobtype.CheckUniqueKey's rule: at most MaxUniqueKeyBytes of
// printable UTF-8.
func validKey(k string) bool {
	if len(k) > jobtype.MaxUniqueKeyBytes || !utf8.ValidString(k) {
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
	var invalid *jobtype.InvalidError
	if !errors.As(err, &invalid) || invalid.Field == "" || invalid.Reason == "" {
		t.Fatalf("got %#v, want an InvalidError with a field and a reason", err)
	}
	if !strings.HasPrefix(err.Error(), invalid.Field) || !utf8.ValidString(err.Error()) {
		t.Fatalf("error %q does not start with its field %q, or is not UTF-8", err, invalid.Field)
	}
}
