package stdio

import "syscall"

// sysProcAttr puts the child in its own process group, so a signal reaches its grandchildren
// too, and kills it if the engine dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
