package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// modulePath and mainDir say where this command's source is: the module
// and, inside it, the directory of package main.
const (
	modulePath = "github.com/jobwatch/jobwatch"
	mainDir    = "cmd/jobwatch"
)

// rerunCommand is how the person who started this process runs jobwatch
// again, for hints such as demo's "try: … list": "go run ./cmd/jobwatch"
// after "go run ./cmd/jobwatch demo" (the README's first command, where
// no jobwatch is installed), "./jobwatch" for a binary started by a path
// other than the one on PATH, and "jobwatch" otherwise.
func rerunCommand() string {
	wd, _ := os.Getwd()
	return rerunCommandFrom(os.Args[0], wd, exec.LookPath)
}

// goRunExe matches where go run puts the binary it runs: a temporary
// go-build*/bNNN/exe/ directory, or, since Go 1.24, the build cache's
// xx/<hash>-d/ directory.
var goRunExe = regexp.MustCompile(`(^|/)go-build[^/]*/b\d+/exe/[^/]+$|/[0-9a-f]{2}/[0-9a-f]{64}-d/[^/]+$`)

// rerunCommandFrom is rerunCommand for a process started as arg0 in
// directory wd, where lookPath finds commands on PATH.
func rerunCommandFrom(arg0, wd string, lookPath func(string) (string, error)) string {
	if goRunExe.MatchString(filepath.ToSlash(arg0)) {
		return "go run " + mainPackageFrom(wd)
	}
	if filepath.Base(arg0) != "jobwatch" || !strings.ContainsRune(arg0, filepath.Separator) {
		return "jobwatch"
	}
	if onPath, err := lookPath("jobwatch"); err == nil && sameFile(onPath, arg0) {
		return "jobwatch"
	}
	return arg0 // as it was typed: ./jobwatch after go build -o jobwatch
}

// mainPackageFrom is the go run argument that names package main from
// wd: its directory relative to wd inside this module's checkout (as the
// README has it, "./cmd/jobwatch" from the top), else the package path.
func mainPackageFrom(wd string) string {
	for dir := wd; dir != ""; dir = filepath.Dir(dir) {
		if moduleOf(filepath.Join(dir, "go.mod")) == modulePath {
			rel, err := filepath.Rel(wd, filepath.Join(dir, mainDir))
			switch {
			case err != nil:
			case rel == ".":
				return "."
			case strings.HasPrefix(rel, ".."):
				return filepath.ToSlash(rel)
			default:
				return "./" + filepath.ToSlash(rel)
			}
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return modulePath + "/" + mainDir + "@latest"
}

// moduleOf is the module path a go.mod file declares, "" if none.
func moduleOf(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}
