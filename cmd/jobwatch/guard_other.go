//go:build !linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// guardArg is guard_linux.go's; this system has no guard.
const guardArg = "__command-guard"

// commandCmd starts the command in a process group of its own, as on
// Linux, but without a guard: only Linux (and FreeBSD) has the
// parent-death signal the guard needs, so here a command can outlive a
// worker killed outright.
func commandCmd(ctx context.Context, command string, _ time.Duration) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// killCommand kills the command commandCmd started as pid, with its
// process group.
func killCommand(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// checkGuard says nothing: this system has no guard to start.
func checkGuard() error { return nil }

func guard([]string) int {
	fmt.Fprintln(os.Stderr, "jobwatch: this is how worker --exec starts a job's command on Linux, not a command to run")
	return 2
}
