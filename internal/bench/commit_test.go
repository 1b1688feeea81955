package bench

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

// The bench JSON names the commit it measured, so figures kept in docs/
// can be traced to the code that produced them, and a measurement of
// uncommitted changes says so.
func TestTheBenchJSONNamesTheCommitMeasured(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	stamped := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"a build of a clean checkout", stamped("false"), rev},
		{"a build of a modified checkout", stamped("true"), rev + "-dirty"},
		{"go run, or -buildvcs=false", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, ""},
		{"no build info", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := json.Marshal(&benchResult{Commit: builtFrom(tt.bi)})
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			commit, has := got["commit"]
			switch {
			case tt.want == "" && has:
				t.Errorf("bench JSON has commit %v, want none: the binary names no commit", commit)
			case tt.want != "" && commit != tt.want:
				t.Errorf("bench JSON commit = %v, want %q (in %s)", commit, tt.want, strings.TrimSpace(string(out)))
			}
		})
	}
}
