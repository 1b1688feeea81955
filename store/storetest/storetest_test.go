package storetest

import (
	"encoding/json"
	"testing"
)

// The suite must accept what a conforming backend may do to JSON (jsonb
// reorders keys, drops whitespace and prints numbers in its own notation)
// and refuse what it may not (change a value).
func TestJSONEqualComparesMeaning(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"key order and whitespace", `{"a": 1, "b": [true, null]}`, `{"b":[true,null],"a":1}`, true},
		{"an exponent written out", `[1e-7, 2E3]`, `[0.0000001, 2000]`, true},
		{"a trailing zero", `{"n": 1.50}`, `{"n": 1.5}`, true},
		{"a big integer kept to the last digit", `12345678901234567890123`, `12345678901234567890123`, true},
		{"a big integer off in the last digit", `12345678901234567890123`, `12345678901234567890124`, false},
		{"a decimal off in the last digit", `[0.1000000000000000001]`, `[0.1]`, false},
		{"a number for a string", `{"n": 1}`, `{"n": "1"}`, false},
		{"an extra key", `{"a": 1}`, `{"a": 1, "b": 2}`, false},
		{"an extra element", `[1]`, `[1, 1]`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := jsonEqual(json.RawMessage(tc.a), json.RawMessage(tc.b)); got != tc.want {
				t.Errorf("jsonEqual(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
