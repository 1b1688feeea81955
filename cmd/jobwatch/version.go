package main

import "runtime/debug"

// version is what the binary was built from: the module version (set by
// "go install …@v1.2.3", and by go build from a tagged or committed
// checkout), else the VCS revision go build stamped, else "dev" (go run,
// go test, or a build with -buildvcs=false).
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(bi)
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
