//go:build unix && !linux

package stdio

import "syscall"

// sysProcAttr puts the child in its own process group, so a signal reaches its grandchildren
// too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
