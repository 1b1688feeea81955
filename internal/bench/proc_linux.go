package bench

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own, so that a Ctrl-C
// at the bench's terminal, which signals the terminal's whole group,
// reaches the bench alone: it stops its workers, then the server
// (serverProc.stop), and drops what it made. Were the server to get the
// signal too, it would stop under the workers, whose outcomes then have
// nowhere to go until their leases end. The server gets a SIGTERM if
// the bench dies without stopping it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
