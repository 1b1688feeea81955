package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/ci"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// The release build (make dist, scripts/dist.sh) and the systemd unit
// (packaging/jobwatch.service) are tested here as a user meets them: the
// arm64 tarball is built by the script, checked with sha256sum -c, and
// its binary run under qemu-user; the unit is checked by
// systemd-analyze and its ExecStart line run. .ci/run installs the tools
// (Debian's gcc-aarch64-linux-gnu, qemu-user-static, systemd); without
// them these tests fail under CI and skip elsewhere.

// distSysroot is where Debian's libc6-arm64-cross (a dependency of
// gcc-aarch64-linux-gnu) puts arm64's dynamic loader and C library, which
// qemu-user needs to run the dynamically linked arm64 binary.
const distSysroot = "/usr/aarch64-linux-gnu"

// distVersionLine is what a release binary's --version prints.
var distVersionLine = regexp.MustCompile(`^jobwatch (\S+) \(commit ([0-9a-f]{40}), built (\S+)\)\n$`)

func TestReleaseTarballForArm64RunsUnderQemu(t *testing.T) {
	if testdb.Backend() == "postgres" {
		t.Skip("the release binary serves a SQLite file here; the SQLite pass tests it, and a second build would add nothing")
	}
	for _, tool := range []struct{ name, pkg string }{
		{"git", "git"}, {"tar", "tar"}, {"sha256sum", "coreutils"}, {"aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"},
	} {
		_, err := exec.LookPath(tool.name)
		ci.Require(t, err, "make dist needs "+tool.name+": apt-get install "+tool.pkg)
	}
	qemu, err := exec.LookPath("qemu-aarch64-static") // Debian's qemu-user-static
	if err != nil {
		qemu, err = exec.LookPath("qemu-aarch64") // Debian's qemu-user
	}
	ci.Require(t, err, "running the arm64 binary needs qemu-user: apt-get install qemu-user-static")
	_, err = os.Stat(filepath.Join(distSysroot, "lib", "ld-linux-aarch64.so.1"))
	ci.Require(t, err, "the arm64 binary needs arm64's C library: apt-get install libc6-dev-arm64-cross")

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	built := time.Now().UTC().Truncate(time.Second)
	// A cold build compiles SQLite's C source and every package for arm64:
	// about two minutes on a loaded 2-core machine, and more than eight
	// with two test suites and other builds beside it; later ones take
	// seconds from the build cache.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "dist.sh"), "-o", out, "arm64")
	build.Dir = root
	build.Env = append(os.Environ(), "VERSION=", "COMMIT=", "SOURCE_DATE_EPOCH=", "CC_arm64=")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/dist.sh -o DIR arm64: %v\n%s", err, b)
	}
	finished := time.Now().UTC()
	describe := distGit(t, root, "describe", "--tags", "--always")
	commit := distGit(t, root, "rev-parse", "HEAD")

	// dist/ holds a tarball named for the version and SHA256SUMS, which
	// sha256sum -c accepts, as docs/OPERATING.md tells users to check.
	tarballs, _ := filepath.Glob(filepath.Join(out, "jobwatch_*_linux_arm64.tar.gz"))
	if len(tarballs) != 1 {
		t.Fatalf("dist wrote tarballs %v, want one jobwatch_<version>_linux_arm64.tar.gz", tarballs)
	}
	name := strings.TrimSuffix(filepath.Base(tarballs[0]), ".tar.gz")
	tarVersion := strings.TrimSuffix(strings.TrimPrefix(name, "jobwatch_"), "_linux_arm64")
	if tarVersion != describe && tarVersion != describe+"-dirty" {
		t.Errorf("tarball %s: version %q, want git describe's %q (or with -dirty)", name, tarVersion, describe)
	}
	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil || string(b) != name+".tar.gz: OK\n" {
		t.Errorf("sha256sum -c SHA256SUMS = %v:\n%s\nwant the one tarball OK", err, b)
	}

	bin := distUnpack(t, tarballs[0], name, filepath.Join(root, "README.md"), filepath.Join(root, "LICENSE"))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	interp := distInterpreter(f)
	f.Close()
	if f.Machine != elf.EM_AARCH64 || interp != "/lib/ld-linux-aarch64.so.1" {
		t.Fatalf("the tarball's jobwatch is %v with loader %q, want an arm64 binary linked against glibc (/lib/ld-linux-aarch64.so.1)", f.Machine, interp)
	}

	arm64 := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, qemu, append([]string{"-L", distSysroot, bin}, args...)...)
		cmd.Env = append(os.Environ(), "JOBWATCH_SERVER=", "JOBWATCH_TOKEN=")
		return cmd
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		b, err := arm64(ctx, args...).Output()
		m := distVersionLine.FindStringSubmatch(string(b))
		if err != nil || m == nil {
			t.Fatalf("qemu-aarch64 jobwatch %s = %v, %q; want %q", args[0], err, b, "jobwatch VERSION (commit HASH, built DATE)\\n")
		}
		if m[1] != tarVersion || m[2] != commit {
			t.Errorf("jobwatch %s says version %s, commit %s; want %s (the tarball's) and %s (HEAD)", args[0], m[1], m[2], tarVersion, commit)
		}
		date, err := time.Parse(time.RFC3339, m[3])
		if err != nil || date.Before(built) || date.After(finished) || date.Location() != time.UTC {
			t.Errorf("jobwatch %s says built %q, want the UTC time of the build (between %s and %s)", args[0], m[3], built.Format(time.RFC3339), finished.Format(time.RFC3339))
		}
	}

	// A round trip: the arm64 server on a SQLite file and an arm64
	// worker, both under qemu; the job submitted and waited for by this
	// machine's (amd64) jobwatch over HTTP.
	dir := t.TempDir()
	serveLog := &lockedBuffer{}
	serve := arm64(ctx, "serve", "--db", filepath.Join(dir, "jobwatch.db"), "--addr", "127.0.0.1:0")
	serve.Stderr = serveLog
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	serveExit := distStopOnCleanup(t, serve)
	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	distWaitFor(t, "the arm64 serve to say where it listens", func() bool { return addrRE.MatchString(serveLog.String()) })
	url := "http://" + addrRE.FindStringSubmatch(serveLog.String())[1]

	workerLog := &lockedBuffer{}
	worker := arm64(ctx, "worker", "--server", url, "--kind", "dist-check", "--exec", "cat")
	worker.Stderr = workerLog
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	workerExit := distStopOnCleanup(t, worker)

	submit := jobwatchCmd(ctx, "submit", "dist-check", "--payload", `{"n":42}`, "--wait", "--json", "--server", url)
	var stdout, stderr bytes.Buffer
	submit.Stdout, submit.Stderr = &stdout, &stderr
	if err := submit.Run(); err != nil {
		t.Fatalf("jobwatch submit --wait against the arm64 server: %v\n%s\nserver:\n%s\nworker:\n%s", err, stderr.String(), serveLog, workerLog)
	}
	var job jobwatchv1.Job
	if err := protojson.Unmarshal(stdout.Bytes(), &job); err != nil {
		t.Fatalf("submit --json printed %q: %v", stdout.String(), err)
	}
	if job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || job.GetResult().GetStructValue().GetFields()["n"].GetNumberValue() != 42 {
		t.Fatalf("the job ended %v with result %v; want SUCCEEDED with the payload back ({\"n\":42}, what cat printed)", job.GetState(), job.GetResult())
	}
	// The arm64 client reads the same job back.
	b, err := arm64(ctx, "get", job.GetId(), "--server", url).Output()
	if err != nil || !strings.Contains(string(b), "SUCCEEDED") {
		t.Errorf("qemu-aarch64 jobwatch get %s = %v, %q; want it SUCCEEDED", job.GetId(), err, b)
	}

	// SIGTERM stops both cleanly, as systemd stops the service.
	for _, p := range []struct {
		what string
		cmd  *exec.Cmd
		exit <-chan error
		log  *lockedBuffer
	}{{"worker", worker, workerExit, workerLog}, {"serve", serve, serveExit, serveLog}} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exit:
			if err != nil {
				t.Errorf("the arm64 %s exited %v on SIGTERM, want 0; its log:\n%s", p.what, err, p.log)
			}
		case <-time.After(time.Minute):
			t.Errorf("the arm64 %s did not stop within a minute of SIGTERM", p.what)
		}
	}
}

func TestSystemdUnitPassesSystemdAnalyzeAndItsCommandServes(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	ci.Require(t, err, "checking the systemd unit needs systemd-analyze: apt-get install systemd")
	text, err := os.ReadFile("../../packaging/jobwatch.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(text)
	for _, want := range []string{
		"DynamicUser=yes", "StateDirectory=jobwatch", "ProtectSystem=strict", "ProtectHome=yes",
		"PrivateTmp=yes", "NoNewPrivileges=yes", "Restart=on-failure",
		"EnvironmentFile=-/etc/jobwatch/jobwatch.env", "ExecReload=/bin/kill -HUP $MAINPID",
	} {
		if !slices.Contains(strings.Split(unit, "\n"), want) {
			t.Errorf("packaging/jobwatch.service lacks the line %q", want)
		}
	}
	// docs/OPERATING.md tells operators to set these variables: the unit
	// must read each.
	ops, err := os.ReadFile("../../docs/OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(ops), "\n## Running under systemd\n")
	if !found {
		t.Fatal(`docs/OPERATING.md has no section "Running under systemd"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := regexp.MustCompile(`JOBWATCH_[A-Z_]+`).FindAllString(section, -1)
	if len(documented) == 0 {
		t.Error(`docs/OPERATING.md "Running under systemd" names no variable of the environment file`)
	}
	for _, v := range documented {
		if !strings.Contains(unit, "$"+v) && !strings.Contains(unit, "${"+v+"}") {
			t.Errorf(`docs/OPERATING.md "Running under systemd" names %s, which the unit never reads`, v)
		}
	}
	const installed = "/usr/local/bin/jobwatch"
	execStart := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(unit)
	if execStart == nil || !strings.HasPrefix(execStart[1], installed+" serve --db /var/lib/jobwatch/jobwatch.db ") {
		t.Fatalf("ExecStart = %q, want %s serve --db /var/lib/jobwatch/jobwatch.db ...", execStart, installed)
	}

	// verify needs ExecStart's program to exist: check a copy that runs
	// this test binary (a jobwatch binary) instead. verify exits 0 on
	// some mistakes (a value it cannot parse is ignored), so any output
	// is a failure too.
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "jobwatch.service")
	if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(unit, installed, self)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, analyze, "verify", copyPath).CombinedOutput(); err != nil || len(b) > 0 {
		t.Errorf("systemd-analyze verify packaging/jobwatch.service = %v:\n%s", err, b)
	}
	// The exposure score systemd-analyze security gives the unit, 0 to 10
	// (the threshold is in tenths): 1.1 today, "OK"; a change that loses
	// some hardening fails here.
	if b, err := exec.CommandContext(ctx, analyze, "security", "--offline=yes", "--threshold=15", copyPath).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: the unit's exposure is above 1.5 (%v):\n%s", err, b)
	}

	// The ExecStart command line, as systemd would run it without an
	// environment file, with the state directory moved to a temporary
	// one: serve accepts its flags, listens on loopback without tokens,
	// and keeps its database in the state directory.
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	line := strings.NewReplacer("/var/lib/jobwatch", state, "${JOBWATCH_ADDR}", "127.0.0.1:0", "$JOBWATCH_SERVE_FLAGS", "").Replace(execStart[1])
	args := strings.Fields(line)[1:]
	logs := &lockedBuffer{}
	serve := jobwatchCmd(ctx, args...)
	serve.Stderr = logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exit := distStopOnCleanup(t, serve)
	distWaitFor(t, "the unit's serve to listen", func() bool {
		return strings.Contains(logs.String(), "listening on loopback only")
	})
	if _, err := os.Stat(filepath.Join(state, "jobwatch.db")); err != nil {
		t.Errorf("the unit's serve keeps no database in its state directory: %v", err)
	}
	serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exit:
		if err != nil {
			t.Errorf("the unit's serve exited %v on SIGTERM, want 0; its log:\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Error("the unit's serve did not stop within 30 s of SIGTERM")
	}
}

// distGit is git's output in dir, trimmed.
func distGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b))
}

// distUnpack checks that the tarball holds exactly the directory name
// with jobwatch (executable), README.md and LICENSE (the repository's),
// and returns the path of jobwatch, written to a temporary directory.
func distUnpack(t *testing.T, tarball, name, readme, license string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for path, file := range map[string]string{name + "/README.md": readme, name + "/LICENSE": license,
		name + "/jobwatch.service": filepath.Join(filepath.Dir(readme), "packaging", "jobwatch.service")} {
		if want[path], err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "jobwatch")
	var names []string
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", tarball, err)
		}
		names = append(names, h.Name)
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case h.Name == name+"/jobwatch":
			if h.Mode&0o111 == 0 || h.Uid != 0 {
				t.Errorf("%s: jobwatch has mode %o, owner %d; want executable, owned by 0", tarball, h.Mode, h.Uid)
			}
			if err := os.WriteFile(bin, body, 0o755); err != nil {
				t.Fatal(err)
			}
		case want[h.Name] != nil && !bytes.Equal(body, want[h.Name]):
			t.Errorf("%s: %s is not the repository's", tarball, h.Name)
		}
	}
	wantNames := []string{name + "/", name + "/LICENSE", name + "/README.md", name + "/jobwatch", name + "/jobwatch.service"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("%s holds %v, want %v", tarball, names, wantNames)
	}
	return bin
}

// distInterpreter is an ELF file's dynamic loader, "" if it is static.
func distInterpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// distStopOnCleanup waits for the started cmd in the background: the
// channel gets its exit. When the test ends cmd is killed if it still
// runs.
func distStopOnCleanup(t *testing.T, cmd *exec.Cmd) <-chan error {
	exit := make(chan error, 1)
	done := make(chan struct{})
	go func() { exit <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return exit
}

// distWaitFor waits until cond holds. Under qemu the arm64 binary starts
// many times slower than natively: the bound is generous.
func distWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
