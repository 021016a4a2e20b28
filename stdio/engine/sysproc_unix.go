//go:build unix

package engine

import (
	"syscall"
)

// sysProcAttr puts the child in its own process group, so a signal reaches its grandchildren
// too. No Pdeathsig: Linux sends it when the forking *thread* exits, which a Go program does
// not control, and a spurious kill would look like a crash.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
