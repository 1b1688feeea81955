//go:build !linux

package bench

import "os/exec"

// ownGroup leaves cmd in the bench's process group: without a signal at
// the bench's death (Linux's Pdeathsig), a server in a group of its own
// would outlive a bench killed outright.
func ownGroup(*exec.Cmd) {}
