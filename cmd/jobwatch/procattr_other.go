//go:build !linux

package main

import "syscall"

// commandAttr is commandAttr of procattr_linux.go without the
// parent-death signal, which only Linux (and FreeBSD) has.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
