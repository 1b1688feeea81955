// Package ci holds the one rule the tests use to tell continuous
// integration from a developer's machine: under CI a test that lacks a
// tool it drives (Chromium, Node, curl) fails, because CI installs them
// and must not pass without running the test; elsewhere it skips. It is
// for tests only and must never change what jobwatch itself does.
package ci

import (
	"os"
	"strconv"
	"testing"
)

// Enabled reports whether the tests run under CI: the CI environment
// variable is set to anything but empty or a false value ("0", "false",
// "f", as strconv.ParseBool reads them). .ci/run sets CI=true; other CI
// systems set "true" or "1", and CI=false on a laptop means "not CI".
func Enabled() bool {
	return enabled(os.Getenv("CI"))
}

func enabled(v string) bool {
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// Require fails t under CI and skips it elsewhere when err (a missing tool
// or file the test needs) is not nil; why says what is missing and how to
// get it.
func Require(t testing.TB, err error, why string) {
	t.Helper()
	if err == nil {
		return
	}
	if Enabled() {
		t.Fatalf("CI requires it: %s: %v", why, err)
	}
	t.Skipf("%s: %v", why, err)
}
