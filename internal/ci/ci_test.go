package ci

import "testing"

func TestEnabledReadsCIOneWayForEveryTest(t *testing.T) {
	for v, want := range map[string]bool{
		"":      false, // unset: a developer's machine
		"true":  true,  // .ci/run and most CI systems
		"1":     true,
		"TRUE":  true,
		"yes":   true, // set, and not a false value: treat as CI rather than skip
		"false": false,
		"0":     false,
		"f":     false,
	} {
		if got := enabled(v); got != want {
			t.Errorf("CI=%q: Enabled() = %v, want %v", v, got, want)
		}
	}
}
