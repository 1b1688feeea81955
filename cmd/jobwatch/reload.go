package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const reloadUsage = `Usage: jobwatch reload --pid-file FILE

Makes the jobwatch serve started with --pid-file FILE read its --config
and --tokens files again (it sends that one process a SIGHUP), and
nothing else: workers and demos on the same host are left alone, where
kill -HUP "$(pidof jobwatch)" would signal them all (and they would
drain their jobs and stop, as on Ctrl-C). It waits for the
server's answer (written to FILE.reload) and says whether it took the
files, or exits 1 naming each it refused and why; the server then keeps
what it had, and its log says the same. A config file it took that no
longer declares queues, pools, schedules, tenants or the alert webhook
that the one before did is named on stderr, with what went: the server
has dropped them (a deploy's half-written copy reads as a shorter
file).

It refuses, and signals nothing, when FILE names no running jobwatch
serve (a stale file whose process id now belongs to something else) or
a serve started without --config and --tokens, which has nothing to
read again.

Flags:
`

// reload runs "jobwatch reload --pid-file FILE".
func reload(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reload", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, reloadUsage); fs.PrintDefaults() }
	pidFile := fs.String("pid-file", "", "the `file` serve --pid-file writes its process id to")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *pidFile == "" {
		return usageError{"reload needs --pid-file FILE: the file serve was started with (serve --pid-file FILE)"}
	}
	pid, err := readPIDFile(*pidFile)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	p := findServe(pid)
	if !p.running {
		return fmt.Errorf("reload: %s names process %d, which is not a running jobwatch serve: the file is stale (serve was killed before it could remove it; its id may be another program's now), or not serve's", *pidFile, pid)
	}
	if p.shown && !reloads(p.flags) {
		return fmt.Errorf("reload: jobwatch serve (pid %d) was started without --config or --tokens: it has nothing to read again", pid)
	}
	outcomes := reloadOutcomeFile(*pidFile)
	before, _ := readReloadOutcome(outcomes)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload: signal jobwatch serve (pid %d): %w", pid, err)
	}
	// serve writes the reload's outcome beside its pid file; one that
	// predates that writes none, and its log alone says.
	for deadline := time.Now().Add(reloadAnswerWithin); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		o, err := readReloadOutcome(outcomes)
		if err != nil || o.PID != pid || o.PID == before.PID && o.Reload == before.Reload {
			continue
		}
		// What went from a file taken is said whichever way the other
		// went; serve's log has the same at warn.
		for _, w := range o.Warned {
			fmt.Fprintf(stderr, "jobwatch: reload: %s\n", w)
		}
		if len(o.Refused) > 0 {
			// The two files are read each on its own: one refused,
			// the other may have been taken.
			took := ""
			if len(o.Taken) > 0 {
				took = "; it took " + strings.Join(o.Taken, " and ")
			}
			return fmt.Errorf("reload: jobwatch serve (pid %d) refused: %s%s", pid, strings.Join(o.Refused, "; "), took)
		}
		if len(o.Taken) > 0 {
			fmt.Fprintf(stdout, "jobwatch serve (pid %d) reloaded %s\n", pid, strings.Join(o.Taken, " and "))
		} else {
			fmt.Fprintf(stdout, "jobwatch serve (pid %d) reloaded its files\n", pid)
		}
		return nil
	}
	fmt.Fprintf(stdout, "sent SIGHUP to jobwatch serve (pid %d); it did not say within %v whether it took the files: its log says\n", pid, reloadAnswerWithin)
	return nil
}

// reloadAnswerWithin bounds how long "jobwatch reload" waits for serve's
// outcome: a reload reads two small files.
const reloadAnswerWithin = 10 * time.Second

// reloadOutcome is what serve writes, as one JSON object, to the file
// reloadOutcomeFile names after each SIGHUP: its process id, how many
// reloads it has made, each file it refused, with why, each it took
// ("tokens FILE"), and what the operator should know of one it took
// (a config that no longer declares queues the one before did).
type reloadOutcome struct {
	PID     int      `json:"pid"`
	Reload  int      `json:"reload"`
	Refused []string `json:"refused,omitempty"`
	Taken   []string `json:"taken,omitempty"`
	Warned  []string `json:"warned,omitempty"`
}

// reloadOutcomeFile is where a serve with --pid-file FILE writes its
// reloads' outcomes: FILE.reload; "" without a pid file.
func reloadOutcomeFile(pidFile string) string {
	if pidFile == "" {
		return ""
	}
	return pidFile + ".reload"
}

func readReloadOutcome(path string) (reloadOutcome, error) {
	var o reloadOutcome
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	return o, err
}

// reloadOutcomes writes serve's reload outcomes (reloadOutcome) for
// "jobwatch reload": whole files, put in place by a rename.
type reloadOutcomes struct {
	path    string // "": serve has no pid file, and writes none
	log     *slog.Logger
	reloads int
}

func (r *reloadOutcomes) write(refused, taken, warned []string) {
	if r.path == "" {
		return
	}
	r.reloads++
	b, _ := json.Marshal(reloadOutcome{PID: os.Getpid(), Reload: r.reloads, Refused: refused, Taken: taken, Warned: warned})
	tmp := r.path + ".tmp"
	err := os.WriteFile(tmp, append(b, '\n'), 0o644)
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err != nil {
		r.log.Warn("could not write the reload's outcome for jobwatch reload", "file", r.path, "err", err)
	}
}

// remove removes the outcome file as serve exits, if it is still this
// process's.
func (r *reloadOutcomes) remove() {
	if o, err := readReloadOutcome(r.path); err == nil && o.PID == os.Getpid() {
		os.Remove(r.path)
	}
}

// pidFileFree refuses path if it names another running jobwatch serve.
func pidFileFree(path string) error {
	if other, err := readPIDFile(path); err == nil && other != os.Getpid() {
		if p := findServe(other); p.running {
			return fmt.Errorf("--pid-file %s: jobwatch serve (pid %d) is running with this file; stop it, or give this server a --pid-file of its own", path, other)
		}
	}
	return nil
}

// writePIDFile writes this process's id to path (serve --pid-file), for
// "jobwatch reload" and for scripts (kill -TERM "$(cat path)"), and
// returns the function that removes it, which serve calls as it exits.
// It refuses when path names a jobwatch serve that is still running, so
// a second server cannot take the file from the first; a file left by a
// serve that was killed (its process gone, or its id now another
// program's) is replaced. The file appears whole or not at all: it is
// written beside path and linked into place, which fails if path exists.
func writePIDFile(path string) (remove func(), err error) {
	content := strconv.Itoa(os.Getpid()) + "\n"
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("--pid-file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("--pid-file: %w", err)
	}
	for attempt := 1; ; attempt++ {
		err := os.Link(tmp.Name(), path)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || attempt == 3 { // 3: stale files raced by other servers
			return nil, fmt.Errorf("--pid-file: %w", err)
		}
		if err := pidFileFree(path); err != nil {
			return nil, err
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--pid-file: remove the stale file: %w", err)
		}
	}
	return func() {
		// Only while it is still ours: never another server's file.
		if b, err := os.ReadFile(path); err == nil && string(b) == content {
			os.Remove(path)
		}
	}, nil
}

// readPIDFile reads the process id in a pid file.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("--pid-file %s does not exist: is jobwatch serve running with --pid-file %s?", path, path)
	}
	if err != nil {
		return 0, fmt.Errorf("--pid-file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("--pid-file %s holds no process id (%q)", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// serveProcess is what the system shows of a process a pid file names.
type serveProcess struct {
	running bool     // it runs and is a jobwatch serve, as far as the system shows
	flags   []string // serve's flags, when the system shows them
	shown   bool     // flags is known (else any running process counts as jobwatch serve)
}

// findServe looks up process pid: it counts as a running serve if its
// command line is "… serve … --pid-file …"; a process that runs some
// other program (a stale file's id, reused) does not.
func findServe(pid int) serveProcess {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return serveProcess{}
	}
	args, ok := processArgs(pid)
	switch {
	case !ok:
		return serveProcess{running: true}
	case len(args) < 2 || args[1] != "serve" || !hasFlag(args[2:], "pid-file"):
		// Known by its arguments, not by the binary's name: go run's
		// and a renamed copy are jobwatch too.
		return serveProcess{}
	}
	return serveProcess{running: true, flags: args[2:], shown: true}
}

// processArgs is the command line of process pid: from /proc where there
// is one (Linux), else from ps (split at spaces, which is enough to know
// jobwatch serve and its flags). ok is false when neither tells.
func processArgs(pid int) (args []string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil {
		return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), true
	}
	if _, err := os.Stat("/proc/self/cmdline"); err == nil {
		return nil, true // /proc is there and pid is not: it has just ended
	}
	out, err := exec.Command("ps", "-ww", "-o", "args=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(out)), true
}

// reloads reports whether serve's flags give it a file a SIGHUP reads
// again (--config or --tokens); without one, serve only logs a SIGHUP.
func reloads(serveFlags []string) bool { return hasFlag(serveFlags, "config", "tokens") }

// hasFlag reports whether args, a command's flags as the flag package
// reads them (-name or --name, with or without =value), give one of
// names.
func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}
