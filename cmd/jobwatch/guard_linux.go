package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardArg, as the first argument, makes jobwatch the guard of one job's
// command instead of a command of its own (main checks it first). It is
// not a command a user types, so help does not list it.
const guardArg = "__command-guard"

// commandCmd is how worker --exec starts a job's command on Linux: the
// jobwatch binary itself as the command's guard, which runs /bin/sh -c
// command as its child. The guard leads a process group of its own, which
// the command and everything it starts inherit: so a Ctrl-C at the
// worker's terminal, which drains, does not reach them, and a cancel's
// SIGTERM and SIGKILL reach all of them. The guard's parent-death signal
// tells it when the worker is killed outright (kill -9, the OOM killer),
// and it then stops the whole group, as the worker would have: SIGTERM,
// and SIGKILL the kill delay later; and with it what the command started
// that left the group (stopAll). Without it only the shell would hear of the
// worker's death, and a child the shell started would run on beside the
// job's next attempt once the lease expires.
func commandCmd(ctx context.Context, command string, kill time.Duration) *exec.Cmd {
	if checkGuard() != nil {
		// Without its guard, as before there was one: the shell alone
		// hears of the worker's death.
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		return cmd
	}
	cmd := exec.CommandContext(ctx, executable(), guardArg, strconv.Itoa(os.Getpid()), kill.String(), "/bin/sh", "-c", command)
	cmd.Args[0] = "jobwatch" // as ps shows it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: workerDied}
	return cmd
}

// executable is this binary's path. Not /proc/self/exe: under an
// emulator (qemu running an arm64 build) the kernel's /proc/self/exe is
// the emulator.
func executable() string {
	self, err := os.Executable()
	if err != nil {
		return "/proc/self/exe"
	}
	return self
}

var (
	guardChecked sync.Once
	guardErr     error
)

// checkGuard starts the guard once with nothing to guard, and says why
// it cannot be started if it cannot: a binary an emulator runs whose
// children the kernel cannot (qemu-user without binfmt_misc). Commands
// then run without it (commandCmd), and the worker says so as it
// starts.
func checkGuard() error {
	guardChecked.Do(func() {
		if err := exec.Command(executable(), guardArg, "check").Run(); err != nil {
			guardErr = fmt.Errorf("start %s %s: %w", executable(), guardArg, err)
		}
	})
	return guardErr
}

// workerDied is the guard's parent-death signal. A signal no one sends a
// process group, so the guard tells it from a cancel's SIGTERM.
const workerDied = syscall.SIGUSR1

// killNow, sent to the guard alone, has it SIGKILL everything its command
// started, inside the process group and out, and itself with them
// (killCommand).
const killNow = syscall.SIGUSR2

// killCommand kills the command commandCmd started as pid, and all it
// started: by its guard, which finds what left the process group. A
// command started without its guard is killed with its process group.
func killCommand(pid int) {
	if checkGuard() != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(pid, killNow)
}

// guard runs args[2:] as its child and exits as the child did; args[0]
// is the worker's process id, args[1] the kill delay. What the child
// starts ends with it:
//
//   - A SIGTERM, which a cancel sends the whole process group, is the
//     child's to act on; the guard passes it on to what left the group,
//     and the kill delay later SIGKILLs all that is left, the group and
//     itself among them.
//   - When the worker has died, the guard sends all of it SIGTERM and,
//     the kill delay later, SIGKILL.
//   - killNow has it SIGKILL all of it at once.
//   - When the child ends, what it left running gets SIGTERM and, the
//     kill delay later, SIGKILL; the guard exits once all of it has
//     ended, so a job ends with its command's last process.
func guard(args []string) int {
	if len(args) == 1 && args[0] == "check" {
		return 0 // checkGuard's: it can be started
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "jobwatch: this is how worker --exec starts a job's command, not a command to run")
		return 2
	}
	workerPID, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "jobwatch: command guard: worker pid: %v\n", err)
		return 2
	}
	kill, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "jobwatch: command guard: %v\n", err)
		return 2
	}
	// A SIGTERM is heard and let be (ignoring it instead would have the
	// child inherit the ignoring).
	died, terms, now, orphans := make(chan os.Signal, 1), make(chan os.Signal, 1), make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(died, workerDied)
	signal.Notify(terms, syscall.SIGTERM)
	signal.Notify(now, killNow)
	signal.Notify(orphans, syscall.SIGCHLD)
	if os.Getppid() != workerPID { // the worker died before the guard could hear of it
		return 128 + int(workerDied)
	}
	// What the command starts and leaves behind (a process whose parent
	// ended) becomes the guard's, not init's, so that stopAll still
	// finds it when it has left the process group (setsid, a daemon).
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	child := exec.Command(args[2], args[3:]...)
	child.Stdin = os.Stdin
	relayed, err := relayOutput(child)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jobwatch: command guard: %v\n", err)
		return 127
	}
	defer relayed()
	if err := child.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "jobwatch: start command: %v\n", err)
		return 127
	}
	ended := make(chan error, 1)
	go func() { ended <- child.Wait() }()
	var killAt <-chan time.Time // once the end has begun, its SIGKILL
	stopping := func() {
		if killAt == nil {
			killAt = time.After(kill)
		}
	}
	orphaned := false
	for {
		select {
		case <-terms:
			if killAt == nil {
				signalOutsideGroup(syscall.SIGTERM)
				stopping()
			}
		case <-died:
			// The signal also comes when the worker's thread that
			// started the guard ends while the worker lives on; only a
			// new parent says the worker is gone.
			if !orphaned && os.Getppid() != workerPID {
				orphaned = true
				stopAll(syscall.SIGTERM)
				stopping()
			}
		case <-now:
			stopAll(syscall.SIGKILL)
		case <-killAt:
			stopAll(syscall.SIGKILL)
		case <-orphans:
			reapOrphans(child.Process.Pid)
		case err := <-ended:
			if killAt == nil && diedOf(child.ProcessState, syscall.SIGTERM) {
				// Most likely the group's SIGTERM (a cancel), which the
				// guard had too but may not have heard yet: what the
				// child left then has it already, and must not get a
				// second. A SIGTERM to the child alone ends the wait.
				select {
				case <-terms:
					signalOutsideGroup(syscall.SIGTERM)
					stopping()
				case <-time.After(termHeard):
				}
			}
			endLeftovers(kill, killAt, now)
			if orphaned {
				return 128 + int(syscall.SIGKILL)
			}
			return exitLike(child.ProcessState, err)
		}
	}
}

// endLeftovers ends what the guard's command left running when it ended:
// SIGTERM, and SIGKILL the kill delay from now; or, when an end had begun
// (a cancel's SIGTERM, the worker's death), SIGKILL at killAt alone: all
// of it had its SIGTERM then, and a second one would cut short the
// clean-up the first began. killNow (now) has the SIGKILL come at once,
// as it does while the command runs: a worker exiting sends it (a shell
// that died of the cancel's SIGTERM leaves behind a script that ignores
// it). It returns once the guard has no process below it.
func endLeftovers(kill time.Duration, killAt <-chan time.Time, now <-chan os.Signal) {
	left := descendants(os.Getpid())
	if len(left) == 0 {
		return
	}
	if killAt == nil {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		killAt = time.After(kill)
	}
	// Each process below the guard either is its child or becomes one
	// when its parent ends (the guard is their subreaper), so the guard
	// has none below it once it has no child.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
				return
			}
		}
	}()
	select {
	case <-gone:
		return
	case <-killAt:
	case <-now:
	}
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-gone
}

// reapOrphans waits for the ended processes that became the guard's
// (their parents ended first) while its command runs, so that they do not
// stay zombies until it ends. It leaves the command's own process, whose
// end exec.Cmd waits for.
func reapOrphans(command int) {
	for _, p := range children(os.Getpid()) {
		if p.pid != command && p.state == 'Z' {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// signalOutsideGroup sends sig to every process below the guard that
// left its process group, which a signal to the group misses.
func signalOutsideGroup(sig syscall.Signal) {
	for _, pid := range descendants(os.Getpid()) {
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != os.Getpid() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// stopAll sends sig to every process the guard's command started: those
// that left the command's process group, then the group, the guard among
// them.
func stopAll(sig syscall.Signal) {
	signalOutsideGroup(sig)
	_ = syscall.Kill(0, sig)
}

// proc is a process as /proc says it is: its id, parent and state (R,
// S, Z, ...).
type proc struct {
	pid, parent int
	state       byte
}

// processes reads every process from /proc.
func processes() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it ended
		}
		// "pid (comm) state ppid ...", where comm may hold anything.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || len(f[0]) == 0 {
			continue
		}
		if parent, err := strconv.Atoi(f[1]); err == nil {
			out = append(out, proc{pid: pid, parent: parent, state: f[0][0]})
		}
	}
	return out
}

// children returns the processes whose parent is pid.
func children(pid int) []proc {
	var out []proc
	for _, p := range processes() {
		if p.parent == pid {
			out = append(out, p)
		}
	}
	return out
}

// descendants returns the processes below pid, as /proc says now.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range processes() {
		children[p.parent] = append(children[p.parent], p.pid)
	}
	var out []int
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// termHeard bounds how long the guard waits to hear a SIGTERM its child
// died of, when the signal was the group's.
const termHeard = time.Second

// diedOf reports whether the process ps describes was ended by sig.
func diedOf(ps *os.ProcessState, sig syscall.Signal) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// exitLike returns the exit status of a child that ended as ps says, for
// the guard to exit with. A child killed by a signal that ends a Go
// process quietly (SIGTERM, SIGKILL, SIGINT, SIGHUP) has the guard killed
// by the same signal, so the worker sees what the command saw; any other
// signal gives 128 + its number, as a shell's $? does.
func exitLike(ps *os.ProcessState, err error) int {
	if ps == nil {
		fmt.Fprintf(os.Stderr, "jobwatch: run command: %v\n", err)
		return 127
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ps.ExitCode()
	}
	switch s := ws.Signal(); s {
	case syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGHUP:
		signal.Reset(s)
		_ = syscall.Kill(os.Getpid(), s)
		time.Sleep(time.Second) // the signal arrives first
	}
	return 128 + int(ws.Signal())
}

// relayOutput has child write its stdout and stderr to pipes of the
// guard's, which it copies to its own (the worker's pipes), and returns
// the function that waits for the copies to end, for the guard's last
// moment: once nothing the command started is left to hold the pipes.
// Once the worker has died the copies fail, and the guard reads on and
// drops what the command writes: a command's SIGTERM clean-up that
// writes (a shell's "Terminated", a trap's own words) would otherwise
// die of SIGPIPE on the dead worker's pipe, and its clean-up with it.
// The guard takes SIGPIPE as an error of the write (signal.Notify), and
// the command keeps SIGPIPE's default.
func relayOutput(child *exec.Cmd) (wait func(), err error) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var (
		wg      sync.WaitGroup
		writers []*os.File
	)
	for _, to := range []struct {
		dst *os.File
		set *io.Writer
	}{{os.Stdout, &child.Stdout}, {os.Stderr, &child.Stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		*to.set = w
		writers = append(writers, w)
		wg.Go(func() {
			defer r.Close()
			if _, err := io.Copy(to.dst, r); err != nil {
				_, _ = io.Copy(io.Discard, r)
			}
		})
	}
	return func() {
		for _, w := range writers {
			_ = w.Close() // the guard's own: the copies end with the last other
		}
		wg.Wait()
	}, nil
}
