package main

import "syscall"

// commandAttr is how worker --exec starts a job's command: in a process
// group of its own (so a Ctrl-C at the worker's terminal, which drains,
// does not reach it, and a cancel stops the whole pipeline it started),
// and, on Linux, with SIGTERM as its parent-death signal, so that a
// worker killed outright (kill -9, the OOM killer) does not leave the
// command running beside the next attempt of its job. The signal reaches
// the command's first process only; docs/CLIENTS.md says how a script
// passes it on.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
