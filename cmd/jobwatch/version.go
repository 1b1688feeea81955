package main

import "runtime/debug"

// What make dist (scripts/dist.sh) stamps with -ldflags -X: the output of
// git describe, the full commit hash and the UTC build date. They are
// empty in a go build, go install or go run build, which say what they
// can through versionFrom. Package variables only because -X can set
// nothing else; nothing assigns them at run time.
var (
	buildVersion string
	buildCommit  string
	buildDate    string
)

// version is what the binary was built from, as "jobwatch --version" and
// GetServerInfo report it. A release build says its version, commit and
// build date: "v1.2.0 (commit 0123…, built 2026-01-02T03:04:05Z)". Any
// other build says the module version (set by "go install …@v1.2.3", and
// by go build from a tagged or committed checkout), else the VCS revision
// go build stamped, else "dev" (go run, go test, or a build with
// -buildvcs=false).
func version() string {
	if buildVersion != "" {
		return stampedVersion(buildVersion, buildCommit, buildDate)
	}
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(bi)
}

// stampedVersion is a release build's version line: the version, then
// the commit and build date it was given (each left out when empty).
func stampedVersion(v, commit, date string) string {
	var details string
	if commit != "" {
		details = "commit " + commit
	}
	if date != "" {
		if details != "" {
			details += ", "
		}
		details += "built " + date
	}
	if details == "" {
		return v
	}
	return v + " (" + details + ")"
}

func versionFrom(bi *debug.BuildInfo) string {
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
