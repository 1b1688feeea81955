package main

import "testing"

// A release build's line is checked end to end, from a binary make dist
// built, by TestReleaseTarballForArm64RunsUnderQemu; an unstamped build's
// by TestVersionSaysWhatTheBinaryWasBuiltFrom.
func TestAReleaseBuildSaysItsVersionCommitAndBuildDate(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	for _, tt := range []struct {
		name                  string
		version, commit, date string
		want                  string
	}{
		{"make dist stamps all three", "v1.2.0", commit, "2026-01-02T03:04:05Z",
			"v1.2.0 (commit " + commit + ", built 2026-01-02T03:04:05Z)"},
		{"a checkout without tags is described by its commit", "f915dd2-dirty", commit, "2026-01-02T03:04:05Z",
			"f915dd2-dirty (commit " + commit + ", built 2026-01-02T03:04:05Z)"},
		{"a build stamped without a commit says the rest", "v1.2.0", "", "2026-01-02T03:04:05Z",
			"v1.2.0 (built 2026-01-02T03:04:05Z)"},
		{"a build stamped without a date says the rest", "v1.2.0", commit, "",
			"v1.2.0 (commit " + commit + ")"},
		{"a build stamped with the version alone says it alone", "v1.2.0", "", "", "v1.2.0"},
	} {
		if got := stampedVersion(tt.version, tt.commit, tt.date); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
