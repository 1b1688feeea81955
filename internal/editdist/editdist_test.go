package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"submit", "submit", 0},
		{"sumbit", "submit", 1}, // a swap
		{"lst", "list", 1},
		{"paylod", "payload", 1},
		{"uniqeKey", "uniqueKey", 1},
		{"kidn", "kind", 1},
		{"", "abc", 3},
		{"größe", "grösse", 2},
		{"bogus", "priority", 7},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
